"""LUD, HAMburger and FTP on the models trained for them: each "off" setting is plain greedy decoding,
every token written is what the model computed (re-derived here without a cache, from whole
sequences), FTP's router at "every block" is tiny-ar itself, and a model not trained for a method
is refused with a sentence naming the one to pick."""

import pytest
import torch

from decoding import run_to_trace
from decoding.lm import LM
from decoding.models import load_model
from decoding.token.faster import HAMBURGER_MODELS
from decoding.token.ftp_router import ROUTERS, gate_hooks, load_router
from decoding.token.hamburger_model import load_parts

PROMPT = "And the king said"
TOKENS = 40
FAST = "tiny-ar models load in well under a second"


class Models(dict):
    """Each model loaded once, when a test first asks for it."""

    def __missing__(self, name: str) -> LM:
        self[name] = LM(load_model(name, dtype="float32", progress=None))
        return self[name]


@pytest.fixture(scope="module")
def models():
    return Models()


def prompt_ids(lm) -> list[int]:
    return lm.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]


def greedy(lm) -> list[int]:
    return run_to_trace(lm, PROMPT, strategy="greedy", max_new_tokens=TOKENS, chat=False).finish.token_ids


@pytest.mark.fast(FAST)
@pytest.mark.parametrize("model, strategy, params", [("tiny-ar-lud", "lud", {"span": 0}),
                                                     ("tiny-ar-hamburger", "hamburger", {"group": 1}),
                                                     ("tiny-ar", "ftp", {"threshold": 0.0})])
def test_the_off_setting_is_greedy(models, model, strategy, params):
    lm = models[model]
    trace = run_to_trace(lm, PROMPT, strategy=strategy, params=params, max_new_tokens=TOKENS, chat=False)
    assert trace.finish.token_ids == greedy(lm)
    assert all(e.forward_passes == 1 for e in trace.of_kind("token"))  # one big forward per token, as greedy
    if strategy == "ftp":
        assert all(e.extra["blocks"] == [1] * lm.num_layers for e in trace.of_kind("token"))


@pytest.mark.fast(FAST)
def test_ftp_at_every_block_is_tiny_ar_and_matches_huggingface_generate(models):
    lm = models["tiny-ar"]
    ids = torch.tensor([prompt_ids(lm)])
    expected = lm.model.generate(ids, max_new_tokens=TOKENS, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)[0, ids.shape[1]:].tolist()
    trace = run_to_trace(lm, PROMPT, strategy="ftp", params={"threshold": 0.0}, max_new_tokens=TOKENS, chat=False)
    stop = next((i + 1 for i, t in enumerate(expected) if t in lm.stop_ids), len(expected))
    assert trace.finish.token_ids == expected[:stop]


@pytest.mark.fast(FAST)
@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7])
def test_ftp_writes_what_the_routed_model_computes_over_the_whole_text(models, threshold):
    """The cached run (a skipped block stores only keys and values) against one uncached forward of the
    prompt + written text with the router's hooks: the same tokens and the same block decisions."""
    lm = models["tiny-ar"]
    trace = run_to_trace(lm, PROMPT, strategy="ftp", params={"threshold": threshold}, max_new_tokens=TOKENS, chat=False)
    steps = trace.of_kind("token")
    written = [e.token_id for e in steps]
    ids = prompt_ids(lm) + written[:-1]
    router = load_router(ROUTERS["tiny-ar"])
    record: list = []
    hooks = gate_hooks(lm.model, router, threshold, record)
    try:
        with torch.no_grad():
            logits = lm.model(input_ids=torch.tensor([ids])).logits[0, len(prompt_ids(lm)) - 1:]
    finally:
        for hook in hooks:
            hook.remove()
    assert logits.argmax(-1).tolist() == written
    decisions = torch.stack([ran[0] for _, ran, _ in record])[:, len(prompt_ids(lm)) - 1:]  # (L, T)
    assert decisions.T.int().tolist() == [e.extra["blocks"] for e in steps]
    skipped = sum(lm.num_layers - sum(e.extra["blocks"]) for e in steps)
    assert skipped > 0  # the router does skip at its working points


@pytest.mark.fast(FAST)
def test_lud_writes_only_what_the_model_predicts_at_the_real_and_mask_positions(models):
    lm = models["tiny-ar-lud"]
    mask_id = lm.tokenizer.convert_tokens_to_ids("<|mask|>")
    trace = run_to_trace(lm, PROMPT, strategy="lud", params={"span": 4}, max_new_tokens=TOKENS, chat=False)
    steps = trace.of_kind("token")
    written = [e.token_id for e in steps]
    units: dict[int, list] = {}
    for index, e in enumerate(steps):
        units.setdefault(e.extra["unit"], []).append(index)
    assert any(len(u) > 1 for u in units.values())  # some forward wrote a unit of 2+ tokens
    assert sum(e.forward_passes for e in steps) == len(units)
    base = prompt_ids(lm)
    for unit in units.values():
        start, room = unit[0], steps[unit[0]].extra["span"]
        ids = base + written[:start] + [mask_id] * room
        with torch.no_grad():
            rows = lm.model(input_ids=torch.tensor([ids])).logits[0, len(base) + start - 1:]  # (1 + room, V)
        predicted = rows.argmax(-1).tolist()
        assert [written[i] for i in unit] == predicted[: len(unit)]
        if len(unit) - 1 < room and written[unit[-1]] not in lm.stop_ids:
            assert predicted[len(unit)] == mask_id  # the unit ends where the model says it ends


@pytest.mark.fast(FAST)
def test_hamburger_writes_what_slots_and_micro_steps_compute_without_a_cache(models):
    lm = models["tiny-ar-hamburger"]
    parts = load_parts(HAMBURGER_MODELS["tiny-ar-hamburger"])
    trace = run_to_trace(lm, PROMPT, strategy="hamburger", params={"group": 4, "threshold": 0.3},
                         max_new_tokens=TOKENS, chat=False)
    steps = trace.of_kind("token")
    slots: dict[int, list] = {}
    for e in steps:
        slots.setdefault(e.extra["slot"], []).append(e.token_id)
    assert any(len(s) > 1 for s in slots.values())  # some slot smashed 2+ tokens
    assert sum(e.forward_passes for e in steps) == len(slots)
    embed, head = lm.model.get_input_embeddings(), lm.model.get_output_embeddings()
    base = prompt_ids(lm)
    inputs = [embed(torch.tensor([t]))[0] for t in base]  # the prompt: one slot per token
    positions = list(range(len(base)))
    written = 0
    with torch.no_grad():
        for group in slots.values():
            hidden = lm.model.model(inputs_embeds=torch.stack(inputs)[None],
                                    position_ids=torch.tensor([positions])).last_hidden_state[0, -1]
            tokens, state = [int(head(hidden).argmax())], hidden[None]
            while len(tokens) <= len(group):  # the slot's tokens, then the micro-step that ended it
                if len(tokens) == 4 or written + len(tokens) == TOKENS or tokens[-1] in lm.stop_ids:
                    break
                state = parts.micro.step(embed(torch.tensor([tokens[-1]])), state)
                probs = torch.softmax(head(parts.micro.features(state))[0], -1)
                if len(tokens) == len(group):
                    assert probs.max() < 0.3  # not confident: the slot ended here
                    break
                tokens.append(int(probs.argmax()))
            assert tokens == group
            written += len(group)
            ids = torch.tensor([group])
            inputs.append(parts.smasher(embed(ids), torch.tensor([len(group)]))[0])
            positions.append(positions[-1] + len(group))


@pytest.mark.fast(FAST)
@pytest.mark.parametrize("strategy, right", [("lud", "tiny-ar-lud"), ("hamburger", "tiny-ar-hamburger")])
def test_a_model_not_trained_for_the_method_is_refused_with_the_one_to_pick(models, strategy, right):
    with pytest.raises(ValueError, match=f"`{strategy}` runs on a model trained for it: pick {right}"):
        run_to_trace(models["tiny-ar"], PROMPT, strategy=strategy, max_new_tokens=4, chat=False)
    with pytest.raises(ValueError, match="`ftp` runs on a model trained for it: pick tiny-ar"):
        run_to_trace(models["tiny-ar-lud"], PROMPT, strategy="ftp", max_new_tokens=4, chat=False)


@pytest.mark.fast("parses the command line only; loads no model")
def test_the_cli_runs_a_method_on_the_model_trained_for_it_unless_told_otherwise():
    from decoding.__main__ import build_parser, resolve_run

    for strategy, model in (("lud", "tiny-ar-lud"), ("hamburger", "tiny-ar-hamburger"), ("ftp", "tiny-ar")):
        assert resolve_run(build_parser().parse_args(["run", "--strategy", strategy, "--prompt", "x"]))["model"] == model
    chosen = build_parser().parse_args(["run", "--strategy", "lud", "--model", "tiny-ar", "--prompt", "x"])
    assert resolve_run(chosen)["model"] == "tiny-ar"  # then refused with the model to pick (above)


@pytest.mark.fast(FAST)
def test_the_ftp_preset_note_holds(models):
    """Preset 14: about 73% of the blocks run, the first almost always, the last about half the time; the text
    leaves tiny-ar's greedy text at the fifth token; threshold 0 is tiny-ar's greedy text."""
    from decoding.presets import find_preset

    preset = find_preset("playground", "14-ftp-token-routing")
    lm = models["tiny-ar"]
    greedy_ids = run_to_trace(lm, preset.prompt, strategy="greedy", max_new_tokens=preset.max_new_tokens,
                              chat=False).finish.token_ids
    trace = run_to_trace(lm, preset.prompt, strategy="ftp", params=preset.params, max_new_tokens=preset.max_new_tokens,
                         chat=False)
    steps = trace.of_kind("token")
    per_block = [sum(e.extra["blocks"][b] for e in steps) / len(steps) for b in range(lm.num_layers)]
    assert 0.70 <= sum(per_block) / len(per_block) <= 0.76
    assert per_block[0] >= 0.95 and 0.4 <= per_block[-1] <= 0.6
    first_difference = next(i for i, (a, b) in enumerate(zip(trace.finish.token_ids, greedy_ids)) if a != b)
    assert first_difference == 4
    off = run_to_trace(lm, preset.prompt, strategy="ftp", params={"threshold": 0.0}, max_new_tokens=preset.max_new_tokens,
                       chat=False)
    assert off.finish.token_ids == greedy_ids


@pytest.mark.fast(FAST)
def test_the_lud_preset_note_holds(models):
    """Preset 12: 35 tokens in 31 forwards, " king of" twice and " his stead" as units, this model's greedy text."""
    from decoding.presets import find_preset

    preset = find_preset("playground", "12-lud-lexical-units")
    lm = models[preset.model]
    trace = run_to_trace(lm, preset.prompt, strategy="lud", params=preset.params, max_new_tokens=preset.max_new_tokens,
                         chat=False)
    steps = trace.of_kind("token")
    units: dict[int, str] = {}
    for e in steps:
        units[e.extra["unit"]] = units.get(e.extra["unit"], "") + e.token_text
    assert (len(steps), sum(e.forward_passes for e in steps)) == (35, 31)
    assert [u for u in units.values() if len(lm.tokenizer(u, add_special_tokens=False)["input_ids"]) > 1][:3] == \
        [" king of", " king of", " his stead"]
    assert trace.finish.token_ids == run_to_trace(lm, preset.prompt, strategy="greedy", max_new_tokens=preset.max_new_tokens,
                                                  chat=False).finish.token_ids


@pytest.mark.fast(FAST)
def test_the_hamburger_preset_note_holds(models):
    """Preset 13: 37 tokens in 29 big forwards, " came to", " king of" and " The LORD" among the slots, one cache
    entry per slot; group 1 is this model's greedy text."""
    from decoding.presets import find_preset

    preset = find_preset("playground", "13-hamburger-smashed-slots")
    lm = models[preset.model]
    trace = run_to_trace(lm, preset.prompt, strategy="hamburger", params=preset.params,
                         max_new_tokens=preset.max_new_tokens, chat=False)
    steps = trace.of_kind("token")
    slots: dict[int, str] = {}
    for e in steps:
        slots[e.extra["slot"]] = slots.get(e.extra["slot"], "") + e.token_text
    assert (len(steps), sum(e.forward_passes for e in steps)) == (37, 29)
    assert {" came to", " king of", " The LORD"} <= set(slots.values())
    off = run_to_trace(lm, preset.prompt, strategy="hamburger", params={"group": 1}, max_new_tokens=preset.max_new_tokens,
                       chat=False)
    assert off.finish.token_ids == run_to_trace(lm, preset.prompt, strategy="greedy", max_new_tokens=preset.max_new_tokens,
                                                chat=False).finish.token_ids
