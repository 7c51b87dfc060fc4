"""Command line: `python -m decoding run|list|papers|presets|show|transcribe`.

    python -m decoding run --prompt "Why is the sky blue?" --strategy sample --set top_p=0.9
    python -m decoding run --model gemma3-270m --no-chat --prompt "Once upon a time" --json
    python -m decoding run --strategy particle-filter --set n=8 --set reward=arith-step --prompt "..."
    python -m decoding run --strategy rag --set mode=iterdrag --prompt-file book-and-question.txt
    python -m decoding list
    python -m decoding papers [--json]
    python -m decoding show trace.json
    python -m decoding transcribe --audio FILE.wav --policy local-agreement --chunk-s 1.0 --json

Bad arguments exit with status 2 and a one-line message on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from decoding.embedded import EmbeddedModelError
from decoding.env import configure_torch_threads
from decoding.errors import MissingDependency, short_repr
from decoding.events import ParticleStep, RunFinished, TokenStep, Trace, TrainStep, stats
from decoding.models import DEFAULT_MODEL, QUANTIZATIONS, REGISTRY, SUGGESTED_HUB_IDS, ModelLoadError, load_model
from decoding.run import MAX_NEW_TOKENS_CAP, generate, validate_request
from decoding.papers import collect, render
from decoding.params import describe
from decoding.registry import STRATEGIES, param_specs
from decoding.remote.source import ALLOW_ENV, ANY_ENGINE, ENGINES_ENV, EXAMPLE
from decoding.diffusion.samplers import SAMPLERS
from decoding.scaling.scoring import REWARDS, reward_help
from decoding.speculative.strategy import DRAFTERS
from decoding.speech.cli import cmd_transcribe
from decoding.speech.policies import POLICIES
from decoding.speech.whisper import SOURCES as WHISPERS


def parse_sets(items: list[str]) -> dict:
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"`--set` expects key=value, got {item!r}")
        params[key.strip()] = value.strip()
    return params


def summary(trace: Trace) -> dict:
    """What `run --json` prints and the app's API returns at the end of a run."""
    start, finish = trace.start, trace.finish
    return {
        "model": start.model if start else None,
        "strategy": start.strategy if start else None,
        "params": start.params if start else {},
        "prompt": start.prompt if start else None,
        "text": finish.text if finish else "",
        "token_ids": finish.token_ids if finish else [],
        "stats": stats(trace),
    } | _particles(finish) | _retrieval(finish)


def _particles(finish) -> dict:
    """Scaling runs: every particle's final text and weight, and which one was chosen."""
    extra = finish.extra if finish else {}
    if "particles" not in extra:
        return {}
    return {"chosen": extra["chosen"], "answer": extra["answer"], "rule": extra["rule"], "votes": extra["votes"],
            "particles": [{k: p[k] for k in ("text", "weight", "score", "answer", "finished")} for p in extra["particles"]]}


def _retrieval(finish) -> dict:
    """Retrieval runs (strategy rag): the final answer, what each query retrieved, and the compute spent."""
    extra = finish.extra if finish else {}
    if "retrievals" not in extra:
        return {}
    return {key: extra[key] for key in ("answer", "retrievals", "effective_context_tokens", "tokens_processed")
            if key in extra}


RUN_DEFAULTS = {"model": DEFAULT_MODEL, "strategy": "greedy", "max_new_tokens": 64, "seed": 0, "chat": True}


def resolve_run(args) -> dict:
    """The run's settings: the preset's (with `--preset NAME`), overridden by every option given on
    the command line (`--set` per parameter), else the defaults. ValueError for an unknown preset
    or a run without a prompt."""
    settings: dict = dict(RUN_DEFAULTS, params={})
    if getattr(args, "prompt_file", None):  # a long prompt (a book for the Long context lab) from a file
        if args.prompt is not None:
            raise ValueError("give --prompt or --prompt-file, not both")
        with open(args.prompt_file, encoding="utf-8") as f:
            args.prompt = f.read()
    if args.preset:
        from decoding.presets import load_presets

        presets = {p.name: p for p in load_presets()}
        if args.preset not in presets:
            raise ValueError(f"no preset named {short_repr(args.preset, 80)}; `python -m decoding presets` lists them "
                             f"({', '.join(list(presets)[:4])}, ...)")
        p = presets[args.preset]
        settings.update(model=p.model, strategy=p.strategy, prompt=p.prompt, max_new_tokens=p.max_new_tokens,
                        seed=p.seed, chat=p.chat, params=dict(p.params))
        if p.document is not None and args.prompt is None:  # the shipped book, built with the model's tokenizer
            settings["document"] = p
    if args.strategy is not None and args.strategy != settings["strategy"]:
        settings["params"] = {}  # the preset's parameters belong to its own strategy
    for name in ("model", "strategy", "prompt", "max_new_tokens", "seed"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    if args.no_chat:
        settings["chat"] = False
    if args.set:
        settings["params"] = {**settings["params"], **parse_sets(args.set)}
    if "prompt" not in settings:
        raise ValueError("give --prompt TEXT, or --preset NAME (`python -m decoding presets` lists them)")
    if settings["strategy"] not in STRATEGIES:
        raise ValueError(f"unknown strategy {short_repr(settings['strategy'], 80)}; choose from {', '.join(STRATEGIES)}")
    models = STRATEGIES[settings["strategy"]].models
    if models and args.model is None and not args.preset:  # a method trained into its model: that model by default
        settings["model"] = models[0]
    return settings


def cmd_run(args) -> int:
    run = resolve_run(args)
    args.model, args.strategy, args.prompt = run["model"], run["strategy"], run["prompt"]
    args.max_new_tokens, args.seed, args.no_chat = run["max_new_tokens"], run["seed"], not run["chat"]
    params = run["params"]
    book = run.get("document")  # a Long context preset: its prompt is built from the shipped book
    validate_request(args.prompt or ("the shipped book" if book else args.prompt), args.strategy, params,
                     args.max_new_tokens, args.seed)
    say = (lambda message: None) if args.quiet else None
    loaded = load_model(args.model, device=args.device, dtype=args.dtype, quantization=args.quantization,
                        **({"progress": say} if say else {}))
    if book is not None:
        from decoding.presets import document_prompt

        args.prompt = document_prompt(book, loaded.tokenizer)
    trace = Trace()
    stream = not args.json and sys.stdout.isatty() or args.stream
    for event in generate(loaded, args.prompt, strategy=args.strategy, params=params,
                          max_new_tokens=args.max_new_tokens, seed=args.seed, chat=not args.no_chat):
        trace.append(event)
        if stream and isinstance(event, TokenStep):
            print(event.token_text, end="", flush=True)
        elif stream and isinstance(event, ParticleStep):
            print(f"step {event.step}: ESS {event.ess:.2f}/{len(event.particles)}"
                  f"{', resampled' if event.resampled else ''}, {event.tokens_spent} tokens spent", file=sys.stderr)
        elif stream and isinstance(event, TrainStep):
            print(f"train step {event.step}: loss {event.loss:.3f} on positions {event.span_start}-"
                  f"{event.span_start + event.span_tokens - 1}, {event.tokens_trained} tokens trained", file=sys.stderr)
    finish: RunFinished = trace.finish
    if args.trace:
        trace.save(args.trace)
    if args.json:
        print(json.dumps(summary(trace), ensure_ascii=False))
    else:
        if stream and trace.of_kind("token"):
            print()
        else:
            print(finish.text)
        s = stats(trace)
        if "tokens_spent" in s:
            print(f"[{s['num_particles']} particles, {s['particle_steps']} steps, {s['resampling_events']} resampling "
                  f"events, final ESS {s['ess']}, {s['tokens_spent']} tokens spent, {s['forward_passes']} forward "
                  f"passes, answer {s['answer']}, stop: {s['stop_reason']}]", file=sys.stderr)
        elif "nfe" in s:
            print(f"[{s['num_tokens']} tokens, {s['diffusion_steps']} denoising steps, {s['nfe']} NFE, "
                  f"{s['tokens_per_step']} tokens per step, {s['tokens_per_s']} tok/s, stop: {s['stop_reason']}]",
                  file=sys.stderr)
        else:
            print(f"[{s['num_tokens']} tokens, {s['tokens_per_s']} tok/s, {s['forward_passes']} forward passes, "
                  f"mean entropy {s['mean_entropy']} nats, stop: {s['stop_reason']}]", file=sys.stderr)
    return 0


def cmd_list(args) -> int:
    info = {
        "models": {name: spec.description for name, spec in REGISTRY.items()},
        "hub_examples": list(SUGGESTED_HUB_IDS),
        "strategies": {name: {"help": s.help, "params": param_specs(name)} for name, s in STRATEGIES.items()},
        "rewards": reward_help(),
        "drafters": {e.name: e.help for e in DRAFTERS.entries.values()},
        "diffusion_samplers": {e.name: e.help for e in SAMPLERS.entries.values()},
        "speech_policies": {e.name: e.help for e in POLICIES.entries.values()},
    }
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    print("Models (or any Hugging Face hub id, e.g. " + ", ".join(SUGGESTED_HUB_IDS) + "):")
    print_columns(info["models"].items(), "  ")
    print("\nStrategies and parameters (set with --set name=value):")
    for name, s in info["strategies"].items():
        print_columns([(name, s["help"])], "  ", widths=[max(map(len, info["strategies"]))])
        print_columns([_param_row(p) for p in s["params"] if p["plugin"] is None], "      ")
        selectors = sorted({p["selector"] for p in s["params"] if p["plugin"]})
        if selectors:
            print(f"      and the chosen {', '.join(selectors)}'s own parameters, listed with it below")
    for title, registry in (("Rewards for the scaling strategies (--set reward=NAME)", REWARDS),
                            ("Drafters for speculative (--set drafter=NAME)", DRAFTERS),
                            ("Samplers for diffusion (--set sampler=NAME)", SAMPLERS),
                            ("Streaming speech policies (transcribe --policy NAME)", POLICIES)):
        print(f"\n{title}; its own parameters: --set <{registry.kind}>.<parameter>=value, e.g. "
              f"--set {_example(registry)}:")
        for entry in registry.entries.values():
            print_columns([(entry.name, entry.help)], "  ", widths=[max(map(len, registry.names()))])
            print_columns([_param_row(p, f"{entry.name}.") for p in describe(entry.params_cls)], "      ")
    return 0


def _param_row(p: dict, prefix: str = "") -> tuple:
    return prefix + p["name"], f"default {p['default']!s}", f"range {p['range']}", p["help"]


def _example(registry) -> str:
    """`--set` text for the first plug-in of `registry` with a parameter of its own."""
    for entry in registry.entries.values():
        rows = [row for row in describe(entry.params_cls) if row["default"] not in ("", None)]
        if rows:
            return f"{entry.name}.{rows[0]['name']}={rows[0]['default']}"
    return f"{registry.kind}=NAME"


def print_columns(rows, indent: str, widths: list[int] | None = None, max_width: int = 24) -> None:
    """Print rows of cells so that every cell starts at its column: every column but the last is as wide as
    its widest cell (or `widths`), at most `max_width`; a longer cell ends its line and the row goes on
    under the next column (as argparse does with long option names)."""
    rows = [tuple(map(str, row)) for row in rows]
    if not rows:
        return
    widths = widths or [min(max(len(row[i]) for row in rows), max_width) for i in range(len(rows[0]) - 1)]
    for row in rows:
        line = indent
        for cell, width in zip(row, widths):
            start = len(line)
            line += cell
            if len(cell) > width:
                print(line)
                line = " " * start
            line = line.ljust(start + width + 2)
        print(line + row[-1])


def paper_users() -> list[tuple]:
    """(kind, name, papers declaration) of every registered strategy, drafter, sampler, reward and model."""
    users = [("strategy", name, info.papers) for name, info in STRATEGIES.items()]
    for kind, registry in (("drafter", DRAFTERS), ("sampler", SAMPLERS), ("reward", REWARDS), ("policy", POLICIES)):
        users += [(kind, entry.name, entry.papers) for entry in registry.entries.values()]
    return users + [("model", name, spec.papers) for name, spec in (*REGISTRY.items(), *WHISPERS.items())]


def cmd_papers(args) -> int:
    listing = collect(paper_users())
    print(json.dumps(listing, indent=2, ensure_ascii=False) if args.json else render(listing))
    return 0


def cmd_presets(args) -> int:
    from decoding.presets import load_presets

    presets = load_presets()
    if args.json:
        print(json.dumps([{"name": p.name, "lab": p.lab, "title": p.title, "model": p.model, "strategy": p.strategy}
                          for p in presets], indent=2))
        return 0
    width = max(len(p.name) for p in presets)
    for p in presets:
        print(f"{p.name:<{width}}  {p.lab:<11} {p.title}")
    print("\nRun one with: python -m decoding run --preset NAME  (options given as well override it)")
    return 0


def cmd_show(args) -> int:
    trace = Trace.load(args.file)
    print(json.dumps(summary(trace), ensure_ascii=False, indent=None if args.json else 2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m decoding", description="Decoding Lab command line")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="generate text with one strategy")
    run.add_argument("--preset", metavar="NAME", help="start from a preset (file name without .yaml; see `presets`); "
                                                     "the other options given override it")
    run.add_argument("--model", default=None, help=f"registry name, hub id, or a model on an OpenAI-compatible server: "
                                                   f"{EXAMPLE} (default {DEFAULT_MODEL}; lud, hamburger and ftp: the model "
                                                   "trained for them)")
    run.add_argument("--strategy", default=None, choices=list(STRATEGIES), help="default greedy")
    run.add_argument("--prompt", default=None, help="the prompt (required unless --preset gives one)")
    run.add_argument("--prompt-file", metavar="FILE", help="read the prompt from this UTF-8 file (a long context)")
    run.add_argument("--max-new-tokens", type=int, default=None, help=f"1..{MAX_NEW_TOKENS_CAP} (default 64)")
    run.add_argument("--seed", type=int, default=None, help="default 0")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="strategy parameter")
    run.add_argument("--no-chat", action="store_true", help="feed the prompt as plain text (no chat template)")
    run.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    run.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, cuda:N, mps")
    run.add_argument("--quantization", default="none", choices=list(QUANTIZATIONS), help="bitsandbytes, CUDA only")
    run.add_argument("--trace", metavar="FILE", help="write the trace JSON here")
    run.add_argument("--json", action="store_true", help="print one JSON object: text, token_ids, stats")
    run.add_argument("--stream", action="store_true", help="print tokens as they are generated")
    run.add_argument("--quiet", action="store_true", help="no loading messages")
    run.set_defaults(fn=cmd_run)
    lst = sub.add_parser("list", help="models, strategies and parameters")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(fn=cmd_list)
    show = sub.add_parser("show", help="summarise a saved trace")
    show.add_argument("file")
    show.add_argument("--json", action="store_true")
    show.set_defaults(fn=cmd_show)
    papers = sub.add_parser("papers", help="the bibliography: every paper a method, plug-in or model declares, "
                                           "and who uses it")
    papers.add_argument("--json", action="store_true", help='one JSON object {"papers": [...], "uncited": [...]}')
    papers.set_defaults(fn=cmd_papers)
    presets = sub.add_parser("presets", help="the named classroom demos: name, lab, title")
    presets.add_argument("--json", action="store_true")
    presets.set_defaults(fn=cmd_presets)
    speech = sub.add_parser("transcribe", help="stream a speech clip through Whisper with a commit policy "
                                               "(docs/speech.md)")
    source = speech.add_mutually_exclusive_group(required=True)
    source.add_argument("--audio", metavar="FILE.wav", help="a 16 kHz mono 16-bit WAV of at most 30 s")
    source.add_argument("--say", metavar="TEXT", help="speak TEXT with espeak-ng first (its word times are known)")
    speech.add_argument("--policy", default="local-agreement", choices=list(POLICIES.names()),
                        help="default local-agreement")
    speech.add_argument("--chunk-s", type=float, default=1.0, help="seconds of audio arriving at once, 0.5..2 (default 1)")
    speech.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a policy's own parameter, e.g. local-agreement.agree=3")
    speech.add_argument("--words", metavar="FILE.json", help="the reference word times of --audio")
    speech.add_argument("--reference", metavar="TEXT", help="the reference transcript (for the WER)")
    speech.add_argument("--model", default="whisper-base", help="default whisper-base")
    speech.add_argument("--json", action="store_true", help="one JSON object per event")
    speech.set_defaults(fn=cmd_transcribe)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ[ALLOW_ENV] = "1"  # the command line is its user's own: remote engines are always allowed,
    if not os.environ.get(ENGINES_ENV, "").strip():  # at any URL unless the user lists some
        os.environ[ENGINES_ENV] = ANY_ENGINE
    args = build_parser().parse_args(argv)
    configure_torch_threads()  # all cores but one, as the app (DECODING_LAB_TORCH_THREADS / OMP_NUM_THREADS override)
    try:
        return args.fn(args)
    except (ValueError, ModelLoadError, EmbeddedModelError, MissingDependency, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
