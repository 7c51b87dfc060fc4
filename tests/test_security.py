"""Security (issue 12): a shared trace is hostile input, model ids never name local folders, presets
cannot explode. Unit level, no browser: tests/test_browser_security.py replays hostile traces in
Chromium.

    hostile trace   a real trace (tiny models) with one value replaced by PAYLOAD: in a text field it
                    must come out escaped in every view of its tab; anywhere else it must be refused
                    on load with a message naming the event, its kind and the field.
"""

from __future__ import annotations

import json
import time
from html.parser import HTMLParser

import plotly.graph_objects as go
import pytest

import gradio as gr

from decoding.errors import short_repr
from decoding.events import EVENT_TYPES, Trace
from decoding.models import LOCAL_MODELS_ENV, check_model_id, load_hub_auxiliary, load_model, resolve_spec
from decoding.training.tiny import build_tiny_model
from decoding.presets import parse_preset
from decoding.run import run_to_trace, validate_request
from conftest import tab_replayers
from ui.widgets import error_toast, user_error
from visualizers import (acceptance_figure, ar_vs_diffusion_html, beams_figure, budget_figure, canvas_html, choice_html,
                         compare_samplers_figure, confidence_figure, diffusion_summary_html, distribution_figure,
                         draft_tree_figure, entropy_figure, lineage_figure, overlap_figure, particles_html,
                         scaling_summary_html, spec_tokens_html, speculative_summary_html, tokens_html,
                         tokens_per_step_figure, unmask_order_figure, weights_figure)
from visualizers._common import esc, plotly_safe

PAYLOAD = "\"'><img src=x onerror=\"window.__pwned=1\">"  # breaks out of either quote, then a tag with a handler
HTML_OUTPUTS = {"text", "stats", "summary", "particles", "choice", "canvas", "compare_html", "branch_text", "status",
                "inspect", "branch_summary", "answer", "document",
                "transcript", "transcript2", "stats2"}  # the outputs a tab renders as HTML or Markdown
JSON_FIELDS = {"params", "extra"}  # fields whose values are any JSON (their strings may be accepted)


# ---------------------------------------------------------------- helpers


class _Markup(HTMLParser):
    """The tags and attributes a browser would build from an HTML string."""

    def __init__(self):
        super().__init__()
        self.tags, self.handlers = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.handlers += [name for name, _ in attrs if name.startswith("on")]


def assert_inert_html(text: str, where: str) -> None:
    markup = _Markup()
    markup.feed(text)
    markup.close()
    assert not {"img", "script", "iframe", "svg", "object"} & set(markup.tags), (where, text[:400])
    assert not markup.handlers, (where, markup.handlers)


def strings_in(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings_in(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from strings_in(v)


def assert_inert_figure(fig: go.Figure, where: str) -> None:
    """Plotly renders <b>, <br>, <a>, <span> in labels, hovers and titles: a payload must arrive escaped."""
    for s in strings_in(fig.to_dict()):
        assert "<img" not in s and "<script" not in s, (where, s[:300])


def assert_inert_outputs(out: dict, where: str) -> None:
    for key, value in out.items():
        if isinstance(value, go.Figure):
            assert_inert_figure(value, f"{where}: {key}")
        elif isinstance(value, dict) and isinstance(value.get("value"), go.Figure):  # gr.update(value=figure)
            assert_inert_figure(value["value"], f"{where}: {key}")
        elif key in HTML_OUTPUTS and isinstance(value, str):
            assert_inert_html(value, f"{where}: {key}")


def leaf_paths(value, prefix=()):
    """Every field, and inside lists and objects one element / every key, as a path of keys and indices."""
    if prefix:
        yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaf_paths(v, prefix + (k,))
    elif isinstance(value, list) and value:
        yield from leaf_paths(value[0], prefix + (0,))


def replaced(data: dict, event: int, path: tuple, new) -> dict:
    out = json.loads(json.dumps(data))
    target = out["events"][event]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return out


# ---------------------------------------------------------------- real traces of every lab


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    scaling = {"n": 2, "max_step_tokens": 3, "reward": "arith-step"}
    return {
        "sample": run_to_trace("tiny-random", "Hi", strategy="sample", params={"top_k": 5}, max_new_tokens=3,
                               chat=False),
        "beam": run_to_trace("tiny-random", "Hi", strategy="beam", params={"num_beams": 2}, max_new_tokens=2,
                             chat=False),
        "speculative": run_to_trace("tiny-random", "Hi", strategy="speculative",
                                    params={"drafter": "early-exit", "exit_layer": 1, "draft_length": 2,
                                            "temperature": 1.0}, max_new_tokens=3, chat=False),
        "particle-filter": run_to_trace("tiny-random", "1+1=", strategy="particle-filter", params=scaling,
                                        max_new_tokens=3, chat=False),
        "diffusion": run_to_trace("tiny-random-diffusion", "Hi", strategy="diffusion", params={"steps": 2},
                                  max_new_tokens=4, chat=False),
        "ttt": run_to_trace("tiny-random", "A context of a few words.\n\nWhat?", strategy="ttt",
                            params={"steps": 1, "span_tokens": 4}, max_new_tokens=2, chat=False),  # train_step
        "speech": speech_trace(),
    }


def speech_trace() -> Trace:
    """A streaming speech run on a recogniser that writes one word per second heard (no Whisper needed)."""
    import numpy as np

    from decoding.speech.policies import transcribe
    from decoding.speech.whisper import SAMPLE_RATE, Decoded, TokenChoice

    class OneWordASecond:
        name = "one-word-a-second"

        def encode(self, audio, **_):
            return len(audio) // SAMPLE_RATE

        def decode(self, seconds, prefix_ids=(), **_):
            tokens = [TokenChoice(i, f" w{i}", 0.9, 0.1, [i, i + 1], [f" w{i}", "x"], [0.9, 0.05])
                      for i in range(seconds)]
            return Decoded(tokens[len(prefix_ids):], True, 1)

        def text(self, ids):
            return "".join(f" w{i}" for i in ids)

    words = [{"word": f"w{i}", "start": float(i), "end": i + 0.5} for i in range(3)]
    return Trace(list(transcribe(OneWordASecond(), np.zeros(3 * SAMPLE_RATE, np.float32), words=words,
                                 reference="w0 w1 w2", source="preset: test")))


@pytest.fixture
def replay(tmp_path):
    """replay(tab, data, name) -> outputs: the tab's real Replay callback on `data` saved as `name`."""
    calls = tab_replayers()

    def run(tab: str, data, name: str = "shared.json") -> dict:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
        return calls[tab](str(path))

    return run


TABS = {"sample": "playground", "beam": "playground", "speculative": "speculative", "particle-filter": "scaling",
        "diffusion": "diffusion", "ttt": "longctx", "speech": "speech"}


# ---------------------------------------------------------------- hostile traces


@pytest.mark.slow  # the module's real-model run
@pytest.mark.parametrize("run", list(TABS))
def test_a_payload_in_any_field_is_refused_or_shown_escaped(traces, replay, run):
    """PAYLOAD in every field (and one element / every key below it) of the first event of each kind:
    outside text it is refused with the event, kind and field named; in text every view escapes it."""
    data = json.loads(traces[run].to_json())
    firsts = {}
    for i, e in enumerate(data["events"]):
        firsts.setdefault(e["kind"], i)
    refused = accepted = 0
    for i in firsts.values():
        event = data["events"][i]
        for path in leaf_paths(event):
            original = event
            for key in path:
                original = original[key]
            hostile = replaced(data, i, path, PAYLOAD)
            field = path[0]
            try:
                Trace.from_dict(hostile)
            except ValueError as err:
                message = str(err)
                refused += 1
                assert f"event {i}" in message and len(message) < 700, message
                if field != "kind":
                    assert f"({event['kind']!r})" in message and f"`{field}" in message, message
                    assert "must be" in message, message
                continue
            accepted += 1
            text = isinstance(original, str) or original is None  # None: a `str | None` field (an answer)
            assert text or field in JSON_FIELDS, f"{event['kind']}.{path} accepted {PAYLOAD}"
            try:
                out = replay(TABS[run], hostile)
            except gr.Error as err:  # rendering refused it: the toast is escaped
                assert "<img" not in err.message, err.message
                continue
            assert_inert_outputs(out, f"{run} {event['kind']}.{path}")
    assert refused and accepted


def test_every_kind_refuses_the_payload_in_every_non_text_field(traces):
    """Field by field from the annotations: a string where a number, list or flag belongs is refused."""
    seen = set()
    for trace in traces.values():
        data = json.loads(trace.to_json())
        for i, e in enumerate(data["events"]):
            for field, value in e.items():
                if field == "kind" or isinstance(value, str) or field in JSON_FIELDS:
                    continue
                with pytest.raises(ValueError, match=rf"event {i} \('{e['kind']}'\): `{field}` must be"):
                    Trace.from_dict(replaced(data, i, (field,), PAYLOAD))
                seen.add(e["kind"])
    assert seen == set(EVENT_TYPES)


@pytest.mark.parametrize("change, message", [
    ({"kind": PAYLOAD}, "unknown event kind"),
    ({"kind": ["token"]}, "unknown event kind"),
    ({"step": -1}, r"`step` must be an integer >= 0, got -1"),
    ({"step": True}, r"`step` must be an integer >= 0, got True"),
    ({"step": 2**80}, "beyond 64 bits"),
    ({"prob": 1.5}, r"`prob` must be a finite number in \[0, 1\]"),
    ({"entropy": float("nan")}, r"`entropy` must be a finite number >= 0, got nan"),
    ({"top_tokens": ["a", 7]}, r"`top_tokens\[1\]` must be text, got 7"),
    ({"top_kept": "yes"}, "`top_kept` must be a list of true / false values"),
    ({"extra": {"a": [[[[[[[[[1]]]]]]]]]}}, "nested at most 8 containers deep"),
    ({"extra": {"a": {1, 2}}}, "must be a JSON value"),
    ({"surprise": 1}, r"unknown fields \['surprise'\]"),
    ({"token_text": None}, "`token_text` must be text, got None"),
    ({"token_text": "x" * 10_000}, None),  # long text is text: accepted
])
def test_token_event_field_checks(traces, change, message):
    data = json.loads(traces["sample"].to_json())
    data["events"][1] |= change
    if message is None:
        assert Trace.from_dict(data).events[1].token_text == change["token_text"]
        return
    with pytest.raises(ValueError, match=message) as err:
        Trace.from_dict(data)
    assert str(err.value).startswith("malformed trace: event 1") and len(str(err.value)) < 400


def test_nested_records_are_typed(traces):
    data = json.loads(traces["speculative"].to_json())
    i = next(i for i, e in enumerate(data["events"]) if e["kind"] == "spec_round")
    for key, value, message in [("parent", "x", r"`nodes\[0\]\.parent` must be an integer >= -1"),
                                ("depth", -2, r"`nodes\[0\]\.depth` must be an integer >= 0"),
                                ("u", 7.0, r"`nodes\[0\]\.u` must be a finite number in \[0, 1\] or null")]:
        with pytest.raises(ValueError, match=message):
            Trace.from_dict(replaced(data, i, ("nodes", 0, key), value))
    node = data["events"][i]["nodes"][0]
    hostile = replaced(data, i, ("nodes", 0), {k: v for k, v in node.items() if k != "status"})
    with pytest.raises(ValueError, match=r"`nodes\[0\]` must be an object with keys .* \(missing status\)"):
        Trace.from_dict(hostile)


def test_deeply_nested_json_is_refused_with_a_message():
    text = '{"format": "decoding-lab-trace", "version": 1, "events": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(ValueError, match="nested too deeply"):
        Trace.from_json(text)


def test_a_hostile_file_name_is_escaped_in_status_and_errors(traces, replay):
    name = "<img src=x onerror=alert(1)>.json"
    out = replay("playground", traces["sample"].to_json(), name)
    assert_inert_html(out["status"], "status") and "&lt;img" in out["status"]
    with pytest.raises(gr.Error) as err:
        replay("speculative", "not json", name)
    assert "<img" not in err.value.message and "&lt;img" in err.value.message


def test_error_toasts_escape_what_they_quote():
    err = user_error(ValueError(f"unknown model {PAYLOAD!r}"))
    assert "<img" not in err.message and "&lt;img" in err.message and "'" in err.message  # quotes stay readable
    assert error_toast("a < b & c", "t").message == "a &lt; b &amp; c"


# ---------------------------------------------------------------- every visualizer, hostile texts everywhere


def hostile_copy(trace: Trace) -> Trace:
    """The trace with every text value (except kinds, statuses and the strategy) replaced by PAYLOAD."""
    keep = {"kind", "status", "strategy", "extra_kind", "method", "stop_reason", "remasking", "sampler", "cache",
            "drafter", "tree", "reward", "aggregate", "resampling", "select", "trimmed"}  # choices, checked on load

    def swap(value, key=None):
        if isinstance(value, str):
            return value if key in keep else PAYLOAD
        if isinstance(value, dict):
            return {k: swap(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v, key) for v in value]
        return value

    data = json.loads(trace.to_json())
    data["events"] = [swap(e) for e in data["events"]]
    return Trace.from_dict(data)


def test_every_visualizer_escapes_hostile_texts(traces):
    sample, beam, spec, pf, diff = (hostile_copy(traces[k]) for k in
                                    ("sample", "beam", "speculative", "particle-filter", "diffusion"))
    steps, dsteps = pf.of_kind("particles"), diff.of_kind("diffusion_step")
    chosen = pf.finish.extra
    html_outputs = {
        "tokens_html": tokens_html(sample), "tokens_html(entropy, selected)": tokens_html(sample, color_by="entropy",
                                                                                            selected_step=0),
        "tokens_html(beam)": tokens_html(beam), "spec_tokens_html": spec_tokens_html(spec),
        "speculative_summary_html": speculative_summary_html(spec, {"tokens_per_s": 1.0}),
        "particles_html": particles_html(steps[-1], 0), "choice_html": choice_html(chosen | {"votes": {PAYLOAD: 1.0}}),
        "scaling_summary_html": scaling_summary_html({"answer": PAYLOAD, "ess": 1.0}),
        "canvas_html": canvas_html(dsteps), "canvas_html(step 0)": canvas_html(dsteps, 0),
        "diffusion_summary_html": diffusion_summary_html({"nfe": PAYLOAD}),
        "ar_vs_diffusion_html": ar_vs_diffusion_html({"num_tokens": PAYLOAD}, {"nfe": 1}, PAYLOAD, PAYLOAD),
    }
    for name, text in html_outputs.items():
        assert_inert_html(text, name)
        assert "&lt;img" in text or "&#x27;&gt;&lt;img" in text or name.endswith("summary_html"), name
    figures = {
        "entropy_figure": entropy_figure(sample, selected_step=0), "entropy_figure(beam)": entropy_figure(beam),
        "distribution_figure": distribution_figure(sample), "beams_figure": beams_figure(beam),
        "draft_tree_figure": draft_tree_figure(spec), "acceptance_figure": acceptance_figure(spec),
        "overlap_figure": overlap_figure(spec), "weights_figure": weights_figure(steps),
        "lineage_figure": lineage_figure(steps, chosen),
        "budget_figure": budget_figure([{"method": PAYLOAD, "budget": 2, "accuracy": 0.5}]),
        "unmask_order_figure": unmask_order_figure(dsteps), "confidence_figure": confidence_figure(dsteps),
        "tokens_per_step_figure": tokens_per_step_figure(dsteps),
        "compare_samplers_figure": compare_samplers_figure({PAYLOAD: dsteps}),
    }
    for name, fig in figures.items():
        assert_inert_figure(fig, name)


def test_the_escaping_helpers():
    assert esc(PAYLOAD) == "&quot;&#x27;&gt;&lt;img src=x onerror=&quot;window.__pwned=1&quot;&gt;"
    assert esc(3) == "3" and esc(None) == "None"
    assert plotly_safe("<b>'x'</b> & y") == "&lt;b&gt;'x'&lt;/b&gt; &amp; y"  # plotly decodes these back


# ---------------------------------------------------------------- model ids


@pytest.mark.fast("checks model ids by name; loads no model")
@pytest.mark.parametrize("name", ["assets/tiny-ar", "assets/tiny-diffusion", "/etc", "/tmp/model", "../assets/tiny-ar",
                                  "./assets/tiny-ar", "~/models/x", "a..b/c", "tests/data"])
def test_local_paths_are_not_model_ids(name, monkeypatch):
    monkeypatch.delenv(LOCAL_MODELS_ENV, raising=False)
    with pytest.raises(ValueError, match=rf"for `model`: that is a local path.*{LOCAL_MODELS_ENV}=1"):
        resolve_spec(name)


@pytest.mark.fast("checks model ids by name; loads no model")
@pytest.mark.parametrize("name", ["tiny-ar", "tiny-diffusion", "smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct",
                                  "Qwen/Qwen2.5-0.5B-Instruct", "  tiny-ar  "])
def test_registry_names_and_hub_ids_are_model_ids(name):
    assert check_model_id(name) == name.strip()


@pytest.mark.fast("checks model ids by name; loads no model")
@pytest.mark.parametrize("param, value", [("draft_model", "assets/tiny-ar-draft"), ("judge_model", "assets/tiny-ar"),
                                          ("prm_model", "/tmp"), ("prm_model", ["Qwen/x"])])
def test_model_parameters_are_checked_by_name(param, value):
    strategy = "speculative" if param == "draft_model" else "best-of-n"
    params = {"drafter": "model", param: value} if param == "draft_model" else {param: value}
    with pytest.raises(ValueError, match=rf"`([\w-]+\.)?{param}`"):  # a drafter's own knob: `model.draft_model`
        validate_request("hi", strategy, params, 4, 0)


def test_the_prm_loader_refuses_a_path():
    with pytest.raises(ValueError, match="`hub_id`.*local path"):
        load_hub_auxiliary("/tmp", "AutoModel")


def test_the_operator_can_allow_local_folders(tmp_path, monkeypatch):
    tiny = build_tiny_model(seed=5)
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    monkeypatch.delenv(LOCAL_MODELS_ENV, raising=False)
    with pytest.raises(ValueError, match="local path"):
        load_model(str(tmp_path), progress=None)
    monkeypatch.setenv(LOCAL_MODELS_ENV, "1")
    loaded = load_model(str(tmp_path), progress=None)
    assert loaded.source == f"local:{tmp_path}" and loaded.meta["kind"] == "causal"
    trace = run_to_trace(str(tmp_path), "hi", strategy="greedy", max_new_tokens=2, chat=False)
    assert trace.start.model == str(tmp_path) and len(trace.finish.token_ids) == 2


# ---------------------------------------------------------------- presets and quoting

LAUGHS = "\n".join(['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
                   + [f"l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * 9) + "]" for k in range(1, 10)]
                   + ["title: *l9", "model: tiny-ar", "strategy: greedy", "prompt: hi", "note: n"])


def test_billion_laughs_preset_is_refused_fast_with_a_short_message():
    assert len(LAUGHS) < 700
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"anchors and aliases are not allowed .*&l0 on line 1") as err:
        parse_preset("laughs", LAUGHS)
    assert time.perf_counter() - start < 0.5 and len(str(err.value)) < 200


@pytest.mark.parametrize("text", ["a: &x 1\nb: *x\n", "base: &b {x: 1}\nother:\n  <<: *b\n", "title: *nothing\n"])
def test_any_anchor_or_alias_is_refused(text):
    with pytest.raises(ValueError, match="not allowed|not valid YAML"):
        parse_preset("p", text)


def test_preset_errors_quote_a_bounded_prefix():
    text = "title: [" + ", ".join(["x" * 1000] * 1000) + "]\nmodel: tiny-ar\nstrategy: greedy\nprompt: hi\nnote: n\n"
    with pytest.raises(ValueError, match="`title` must be text") as err:
        parse_preset("big", text)
    assert len(str(err.value)) < 300


def test_short_repr_is_bounded_in_size_and_time():
    deep = []
    for _ in range(100_000):
        deep = [deep]
    wide = ["y" * 10**6] * 10**4
    for value in (deep, wide, "x" * 10**7, 10**5000, {str(i): i for i in range(10**5)}):
        start = time.perf_counter()
        text = short_repr(value)
        assert len(text) <= 200 and time.perf_counter() - start < 0.05
