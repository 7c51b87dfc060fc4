"""Strategy ttt: the training steps see the prefill's frozen keys and values, gradients reach only the run's own
copies of the chosen projections, the shared model is bitwise unchanged after a run (finished, stopped, failed), a
run interleaved with another user's sees nothing of it, and the compute is counted from what ran."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

from decoding import run_to_trace
from decoding.longctx import ttt as T
from decoding.longctx.adapt import FlopCounter, FrozenKV, adapted_view, own_copy, target_names
from decoding.longctx.document import build_document
from decoding.run import generate

FAST = {"steps": 3, "span_tokens": 32, "lr": 0.05}  # large enough to change the tiny model's answer


@pytest.fixture(scope="module")
def doc(tiny_lm):
    return build_document(tiny_lm.tokenizer, 1024, seed=0)


@pytest.fixture
def prompt(doc):
    return doc.prompt(doc.questions[0])


def snapshot(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_unchanged(model, before) -> None:
    after = model.state_dict()
    assert after.keys() == before.keys()
    for k, v in before.items():
        assert torch.equal(after[k], v), k  # bitwise
    assert all(p.grad is None for p in model.parameters())


def greedy(lm, prompt, n=6):
    return run_to_trace(lm, prompt, strategy="greedy", max_new_tokens=n, chat=False).finish.token_ids


@pytest.mark.parametrize("params, message", [
    ({"steps": -1}, r"`steps` must be an integer in \[0, 256\]"),
    ({"span_tokens": 2}, r"`span_tokens` must be an integer in \[4, 2048\]"),
    ({"lr": 0.0}, r"`lr` must be in \(0, 1\]"),
    ({"modules": "key"}, "`modules` must be one of query, mlp-down"),
    ({"layers": "middle"}, "`layers` must be one of all, last-half, first-half"),
    ({"lora_rank": 65}, r"`lora_rank` must be an integer in \[0, 64\]"),
    ({"mode": "sample"}, "`mode` must be one of train, think"),
])
def test_bad_parameters_are_refused_naming_the_field(tiny_lm, prompt, params, message):
    with pytest.raises(ValueError, match=message):
        run_to_trace(tiny_lm, prompt, strategy="ttt", params=params, max_new_tokens=4, chat=False)


def test_think_needs_room_for_its_matched_tokens_and_an_answer(tiny_lm, prompt):
    with pytest.raises(ValueError, match="raise `max_new_tokens` to at least"):
        run_to_trace(tiny_lm, prompt, strategy="ttt", params={"mode": "think", **FAST}, max_new_tokens=8, chat=False)


def test_context_ends_after_the_last_blank_line(tiny_lm):
    ids = tiny_lm.tokenizer("one\n\ntwo\n\nWhat?", add_special_tokens=False)["input_ids"]
    end = T.context_end(tiny_lm, ids)
    assert tiny_lm.decode(ids[:end]) == "one\n\ntwo\n\n" and tiny_lm.decode(ids[end:]) == "What?"
    assert T.context_end(tiny_lm, tiny_lm.tokenizer("no blank line", add_special_tokens=False)["input_ids"]) == 0


def test_without_steps_the_answer_is_greedy_decoding_of_the_prompt(tiny_lm, prompt):
    trace = run_to_trace(tiny_lm, prompt, strategy="ttt", params={"steps": 0}, max_new_tokens=6, chat=False)
    assert trace.finish.token_ids == greedy(tiny_lm, prompt)
    assert not trace.of_kind("train_step")


def test_a_step_attends_to_the_frozen_prefill_and_its_first_loss_is_the_models(tiny_lm):
    """Before any update, the span's loss through FrozenKV equals the plain model's loss on those positions."""
    model = tiny_lm.model
    ids = list(range(10, 90))
    _, kv = T._prefill(tiny_lm, ids)
    start, end = 40, 60
    out = model(input_ids=torch.tensor([ids[start:end]]), past_key_values=FrozenKV(kv, start, end),
                position_ids=torch.arange(start, end)[None], use_cache=True)
    with torch.no_grad():
        full = model(input_ids=torch.tensor([ids[:end]])).logits[0, start:end]
    assert torch.allclose(out.logits[0], full, atol=1e-5)
    target = torch.tensor(ids[start + 1:end + 1])
    assert torch.isclose(F.cross_entropy(out.logits[0].float(), target), F.cross_entropy(full.float(), target),
                         atol=1e-5)


def test_the_view_trains_its_own_copy_and_the_model_is_untouched(tiny_lm):
    model = tiny_lm.model
    names = target_names(model, "self_attn.q_proj", "last-half")
    assert names == ["model.layers.2.self_attn.q_proj", "model.layers.3.self_attn.q_proj"]
    before = snapshot(model)
    modules = dict(model.named_modules())
    own = {n: own_copy(modules[n]) for n in names}
    view = adapted_view(model, own)
    with torch.no_grad():
        own[names[0]].weight.add_(1.0)
    x = torch.tensor([[5, 6, 7]])
    assert dict(view.named_modules())[names[0]] is own[names[0]]
    assert dict(model.named_modules())[names[0]] is modules[names[0]]
    assert not torch.equal(view(input_ids=x).logits, model(input_ids=x).logits)
    assert_unchanged(model, before)


@pytest.mark.parametrize("extra", [{}, {"lora_rank": 4}, {"modules": "mlp-down", "layers": "first-half"}])
def test_training_changes_the_runs_answer_and_restores_nothing_because_it_wrote_nothing(tiny_lm, prompt, extra):
    before, plain = snapshot(tiny_lm.model), greedy(tiny_lm, prompt)
    trace = run_to_trace(tiny_lm, prompt, strategy="ttt", params={**FAST, "steps": 6, **extra}, max_new_tokens=6,
                         chat=False)
    steps = trace.of_kind("train_step")
    assert [s.step for s in steps] == list(range(6)) and steps[-1].tokens_trained == 6 * 32
    assert trace.finish.extra["losses"] == [round(s.loss, 4) for s in steps]
    first = trace.of_kind("token")[0]
    untrained = run_to_trace(tiny_lm, prompt, strategy="greedy", max_new_tokens=1, chat=False).of_kind("token")[0]
    assert first.top_probs != untrained.top_probs  # the answer came from the trained weights
    assert_unchanged(tiny_lm.model, before)
    assert greedy(tiny_lm, prompt) == plain  # a run after it equals a run before it, token for token


def test_stop_mid_training_ends_the_run_and_leaves_the_model_bitwise_equal(tiny_lm, prompt):
    before = snapshot(tiny_lm.model)
    seen = []
    events = generate(tiny_lm, prompt, strategy="ttt", params={**FAST, "steps": 20}, max_new_tokens=6, chat=False,
                      should_stop=lambda: len(seen) >= 3)
    for event in events:
        seen.append(event)
    assert seen[-1].stop_reason == "cancelled"
    assert 1 <= len([e for e in seen if e.kind == "train_step"]) < 20
    assert_unchanged(tiny_lm.model, before)


def test_an_error_mid_training_leaves_the_model_bitwise_equal(tiny_lm, prompt, monkeypatch):
    before = snapshot(tiny_lm.model)
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return torch.optim.Adam.step(*args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", failing, raising=True)
    with pytest.raises(RuntimeError, match="boom"):
        run_to_trace(tiny_lm, prompt, strategy="ttt", params=FAST, max_new_tokens=4, chat=False)
    monkeypatch.undo()
    assert_unchanged(tiny_lm.model, before)


def test_another_users_run_between_training_steps_sees_the_loaded_model(tiny_lm, prompt):
    """Deterministic interleaving: the other user's whole run happens while this run is suspended mid-training."""
    other = "Hello there, how are"
    alone = greedy(tiny_lm, other)
    outputs = []
    for event in generate(tiny_lm, prompt, strategy="ttt", params={**FAST, "steps": 4}, max_new_tokens=4,
                          chat=False):
        if event.kind == "train_step":
            outputs.append(greedy(tiny_lm, other))
    assert len(outputs) == 4 and all(o == alone for o in outputs)


def test_two_threads_at_once_never_see_each_others_training(tiny_lm, prompt):
    other = "Hello there, how are"
    alone, trained_alone = greedy(tiny_lm, other), run_to_trace(
        tiny_lm, prompt, strategy="ttt", params={**FAST, "steps": 8}, max_new_tokens=4, chat=False).finish.token_ids
    results, errors, done = [], [], threading.Event()

    def user_b():
        try:
            while not done.is_set() or not results:
                results.append(greedy(tiny_lm, other))
        except Exception as err:  # noqa: BLE001 - re-raised below in the main thread
            errors.append(err)

    thread = threading.Thread(target=user_b)
    thread.start()
    try:
        trained = run_to_trace(tiny_lm, prompt, strategy="ttt", params={**FAST, "steps": 8}, max_new_tokens=4,
                               chat=False).finish.token_ids
    finally:
        done.set()
        thread.join(timeout=60)
    assert not errors
    assert results and all(r == alone for r in results)
    assert trained == trained_alone  # and the trainer's own run is what it is alone (same seed, same spans)


def test_think_spends_the_matched_tokens_then_answers_after_the_cue(tiny_lm, prompt):
    trace = run_to_trace(tiny_lm, prompt, strategy="ttt", params={"mode": "think", **FAST}, max_new_tokens=300,
                         chat=False)
    extra = trace.finish.extra
    parts = [e.extra["part"] for e in trace.of_kind("token")]
    think = parts.count("think")
    assert think == extra["think_tokens"] == extra["planned_think_tokens"]  # stop tokens kept out: the whole budget
    assert parts == ["think"] * think + ["answer"] * (len(parts) - think)
    # matched compute: the thinking tokens cost about what training 3 spans of 32 would
    train = run_to_trace(tiny_lm, prompt, strategy="ttt", params=FAST, max_new_tokens=4, chat=False).finish.extra
    assert abs(extra["planned_think_tokens"] - train["train_compute_tokens"]) <= 0.15 * train["train_compute_tokens"]
    assert not trace.of_kind("train_step")


def test_the_compute_is_counted_from_what_ran(tiny_lm, prompt):
    trace = run_to_trace(tiny_lm, prompt, strategy="ttt", params=FAST, max_new_tokens=4, chat=False)
    extra = trace.finish.extra
    counter = FlopCounter(tiny_lm.model)
    context = extra["context_tokens"]
    assert extra["flops"]["prefill"] == counter.forward(context, 0)
    assert extra["flops"]["train"] > 3 * counter.forward(32, 0)  # three spans, forward and backward
    assert extra["flops"]["total"] == sum(v for k, v in extra["flops"].items() if k != "total")
    assert extra["paper_think_tokens"] == 2 * 3 * 32
    assert extra["trained_parameters"] == 4 * 64 * 64  # W_Q of the 4 layers
    assert trace.finish.forward_passes == 1 + 3 + len(trace.finish.token_ids)  # prefill, steps, question + tokens


@pytest.mark.slow  # SmolLM2-135M on a 1K book: about a minute on a loaded 2-core machine
def test_on_smollm2_the_frozen_prefill_path_is_greedy_and_training_leaves_the_model_unchanged(smol_lm):
    smollm = smol_lm
    doc = build_document(smollm.tokenizer, 1024, seed=0)
    prompt = doc.prompt(doc.questions[1])
    plain = run_to_trace(smollm, prompt, strategy="greedy", max_new_tokens=16).finish.token_ids
    untrained = run_to_trace(smollm, prompt, strategy="ttt", params={"steps": 0}, max_new_tokens=16)
    assert untrained.finish.token_ids == plain  # the chat template's question fed after the context's prefill
    before = snapshot(smollm.model)
    trained = run_to_trace(smollm, prompt, strategy="ttt", params={"steps": 2, "span_tokens": 64}, max_new_tokens=16)
    assert [e.kind for e in trained.events[1:3]] == ["train_step", "train_step"]
    assert trained.finish.extra["trained_modules"] == smollm.config.num_hidden_layers  # W_Q of every layer
    assert_unchanged(smollm.model, before)
    assert run_to_trace(smollm, prompt, strategy="greedy", max_new_tokens=16).finish.token_ids == plain


def test_a_prompt_without_a_blank_line_has_no_context_to_train_on(tiny_lm):
    trace = run_to_trace(tiny_lm, "no blank line in this prompt", strategy="ttt", params=FAST, max_new_tokens=4,
                         chat=False)
    extra = trace.finish.extra
    assert extra["context_tokens"] == 0 and extra["steps_run"] == 0 and extra["flops"]["train"] == 0
    assert trace.finish.token_ids == greedy(tiny_lm, "no blank line in this prompt", n=4)
