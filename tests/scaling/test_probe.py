"""Self-evaluation probe (decoding.scaling.probe): the fit, the AUC, the hidden states it reads, the reward."""

import pytest
import torch

from decoding import run_to_trace
from decoding.run import as_lm
from decoding.scaling import probe as pr
from decoding.scaling.tasks import menu_tasks


def test_auc_counts_pairs_and_ties():
    assert pr.auc(torch.tensor([0.9, 0.8, 0.1]), torch.tensor([1.0, 1.0, 0.0])) == 1.0
    assert pr.auc(torch.tensor([0.1, 0.9]), torch.tensor([1.0, 0.0])) == 0.0
    assert pr.auc(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0])) == 0.5


def test_fit_separates_a_separable_set():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 8, generator=g)
    y = (x[:, 0] - 0.5 * x[:, 3] > 0).double()
    probe = pr.fit(x, y)
    assert pr.auc(probe(x), y) > 0.99 and ((probe(x) > 0.5).double() == y).double().mean() > 0.95
    again = pr.Probe.from_json(probe.to_json())
    assert torch.allclose(again(x), probe(x))


def test_solution_text_puts_each_step_on_its_own_line():
    assert pr.solution_text(["3 + 4 = 7\n", "  ", "The answer is 7."]) == "3 + 4 = 7\nThe answer is 7.\n"


@pytest.mark.slow  # the real model tiny-math
def test_step_states_reads_one_state_per_line():
    lm = as_lm("tiny-math")
    task = menu_tasks()[0]
    states = pr.step_states(lm, task["prompt"], "63 - 13 = 50\n50 + 49 = 99\n")
    assert states.shape == (2, lm.config.hidden_size)
    alone = pr.step_states(lm, task["prompt"], "63 - 13 = 50\n")
    assert torch.allclose(alone[0], states[0], atol=1e-4)  # a causal state does not see the later line


@pytest.mark.slow  # the real model tiny-ar
def test_the_probe_reward_needs_a_trained_probe():
    with pytest.raises(ValueError, match="probe trained for 'tiny-ar'.*decoding.scaling.probe train"):
        run_to_trace("tiny-ar", "abc", strategy="particle-filter", params={"n": 2, "reward": "probe"},
                     max_new_tokens=4)


@pytest.mark.slow  # the real model tiny-math
def test_the_shipped_probe_scores_steps_and_beats_chance_on_held_out_samples():
    probe = pr.probe_for(as_lm("tiny-math"))
    assert probe.info["held_out"]["auc"] > 0.55  # measured on test-split samples it never saw (the model card)
    task = next(t for t in menu_tasks() if t["id"] == "m5")
    trace = run_to_trace("tiny-math", task["prompt"], strategy="particle-filter",
                         params={"n": 2, "reward": "probe", "temperature": 1.0}, max_new_tokens=160, seed=0, chat=False)
    details = [p["detail"] for s in trace.of_kind("particles") for p in s.particles]
    assert all(d.startswith("probe: P(ends right) =") for d in details)
