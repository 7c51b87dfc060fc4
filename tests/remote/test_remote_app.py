"""The Playground and Scaling tabs' callbacks on a model served by the real llama.cpp server (no
browser): the text streams in, a branch continues from an alternative, a scaling run completes, and the
strategy menu offers only what a remote engine runs."""

import pytest

from test_remote_engine import MATH, PROMPT, source
from ui import playground_callbacks as playground
from ui import scaling_callbacks as scaling
from ui.playground_views import new_selection, param_widgets
from ui.scaling_views import DEFAULT_SETTINGS, FIELDS

pytestmark = pytest.mark.usefixtures("remote_allowed")


@pytest.mark.slow
def test_playground_streams_a_remote_run_and_branches_from_an_alternative(llama_server):
    defaults = {w.key: w.default for w in param_widgets()}
    selection = new_selection()
    updates = list(playground.generate_run(source(llama_server), "greedy", PROMPT, 12, 0, False, "auto", "prob",
                                           selection, **defaults))
    trace = updates[0]["trace"]
    assert len(trace.of_kind("token")) == 12 and "Finished" in updates[-1]["status"]
    assert any("tokens so far" in str(u.get("status", "")) for u in updates)  # redrawn while tokens arrived
    selection["step"] = 3
    alternative = trace.of_kind("token")[3].top_ids[1]
    branch = list(playground.branch_run(alternative, trace, None, selection, "prob"))[-1]["branch"]
    lead = "".join(e.token_text for e in trace.of_kind("token")[:3]) + trace.of_kind("token")[3].top_tokens[1]
    assert branch["trace"].finish.text.startswith(lead) and branch["trace"].start.source["model"] == "smollm2-135m"


@pytest.mark.slow
def test_a_replayed_remote_trace_branches_in_a_new_session(llama_server, tmp_path):
    """A saved remote trace numbers its tokens as the recording process met them; another process (here:
    the model's token table emptied) re-numbers them from the texts the trace records."""
    from decoding.events import Trace
    from decoding.run import as_lm

    defaults = {w.key: w.default for w in param_widgets()}
    trace = list(playground.generate_run(source(llama_server), "greedy", PROMPT, 8, 0, False, "auto", "prob",
                                         new_selection(), **defaults))[0]["trace"]
    trace.save(tmp_path / "remote.json")
    lm = as_lm(source(llama_server))
    lm._texts, lm._ids = [""], {}  # a new process: no token met yet
    lm.token_id(" unrelated")  # ... that has met other tokens first, so the old ids mean other texts here
    replayed = Trace.load(tmp_path / "remote.json")
    selection = new_selection() | {"step": 4}
    alternative = replayed.of_kind("token")[4].top_ids[2]
    branch = list(playground.branch_run(alternative, replayed, None, selection, "prob"))[-1]["branch"]
    lead = "".join(e.token_text for e in replayed.of_kind("token")[:4]) + replayed.of_kind("token")[4].top_tokens[2]
    assert branch["trace"].finish.text.startswith(lead)


@pytest.mark.slow
def test_playground_refuses_a_strategy_the_engine_cannot_run(llama_server):
    import gradio as gr

    defaults = {w.key: w.default for w in param_widgets()}
    run = playground.generate_run(source(llama_server), "contrastive", PROMPT, 8, 0, False, "auto", "prob",
                                  new_selection(), **defaults)
    with pytest.raises(gr.Error, match="cannot run on a remote engine: contrastive search needs the hidden states"):
        list(run)


@pytest.mark.slow
def test_scaling_tab_runs_best_of_n_on_the_engine(llama_server):
    settings = DEFAULT_SETTINGS | {"n": 3, "max_step_tokens": 16, "reward": "arith-step"}
    fields = {name: settings[name] for name in FIELDS}
    updates = list(scaling.generate_run(source(llama_server), MATH, "best-of-n", 32, 0, False, "none", **fields))
    trace = updates[-1].get("trace") or updates[0]["trace"]
    assert trace.finish is not None and len(trace.of_kind("particles")[-1].particles) == 3
    assert trace.start.source["engine"].startswith("llama.cpp")


@pytest.mark.fast("names smollm2-135m for its strategy menu; loads no model")
@pytest.mark.parametrize("model, offered", [
    ("openai:http://127.0.0.1:8000/v1#m", ["greedy", "sample"]),
    ("smollm2-135m", None),  # every Playground strategy
])
def test_the_strategy_menu_offers_what_the_model_can_run_and_says_why(model, offered):
    from ui.playground_views import playground_strategies

    update = playground.model_changed(model, "beam")["strategy"]
    assert update["choices"] == (offered or playground_strategies())
    assert update["value"] == ("greedy" if offered else "beam")
    assert ("mirostat, contrastive, beam, " in update["info"] and "need several rows" in update["info"]) == bool(offered)
