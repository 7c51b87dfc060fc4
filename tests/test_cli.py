"""The command line, in-process for argument errors and as a real subprocess for a run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from decoding.__main__ import main

pytestmark = pytest.mark.slow  # CLI subprocesses, and runs that load SmolLM2

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "--model", "tiny-random", "--prompt", ""], "`prompt` is empty"),
        (["run", "--model", "tiny-random", "--prompt", "hi", "--strategy", "sample", "--set", "top_p=1.5"], "`top_p` must be in"),
        (["run", "--model", "tiny-random", "--prompt", "hi", "--set", "oops"], "`--set` expects key=value"),
        (["run", "--model", "no-such-model", "--prompt", "hi"], "unknown model 'no-such-model'"),
        (["run", "--model", "tiny-random", "--prompt", "hi", "--max-new-tokens", "0"], "`max_new_tokens`"),
        (["show", "/nonexistent/trace.json"], "No such file"),
    ],
)
def test_bad_arguments_exit_nonzero_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_list_shows_models_strategies_and_parameters(capsys):
    assert main(["list", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert {"smollm2-135m", "gemma3-270m"} <= set(info["models"])
    assert {"greedy", "sample", "mirostat", "beam", "contrastive"} <= set(info["strategies"])
    names = {p["name"] for p in info["strategies"]["sample"]["params"]}
    assert {"temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon", "eta", "repetition_penalty", "top_h"} <= names


def test_run_writes_a_trace_that_show_reads(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["run", "--model", "tiny-random", "--prompt", "hi", "--strategy", "sample", "--set", "top_k=5",
                 "--max-new-tokens", "6", "--trace", str(trace), "--json", "--quiet"]) == 0
    ran = json.loads(capsys.readouterr().out)
    assert main(["show", str(trace), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["token_ids"] == ran["token_ids"] and shown["params"]["top_k"] == 5


def test_cli_runs_the_real_model_in_a_subprocess(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "decoding", "run", "--prompt", "What is 2+2? Answer with a number.",
         "--strategy", "greedy", "--max-new-tokens", "16", "--json", "--quiet"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["text"] and out["token_ids"]
    assert {"num_tokens", "tokens_per_s", "forward_passes", "mean_entropy"} <= set(out["stats"])
    assert out["stats"]["num_tokens"] == len(out["token_ids"])
    assert "4" in out["text"]


def test_cli_particle_filter_with_a_forbidden_letter(tmp_path):
    """The issue's CLI: `--set n=N --set reward=forbid-letter --set letter=e`; as a hard constraint
    no particle's text contains the letter, and the JSON lists every particle's text and weight."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "decoding", "run", "--prompt", "Describe the sea in one sentence.",
         "--strategy", "particle-filter", "--set", "n=3", "--set", "reward=forbid-letter", "--set", "letter=e",
         "--set", "max_step_tokens=8", "--max-new-tokens", "24", "--json", "--quiet"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"ess", "resampling_events", "tokens_spent", "forward_passes"} <= set(out["stats"])
    assert len(out["particles"]) == 3 and all({"text", "weight"} <= set(p) for p in out["particles"])
    assert sum(p["weight"] for p in out["particles"]) == pytest.approx(1.0)
    assert out["text"] and "e" not in out["text"].lower()
    assert all("e" not in p["text"].lower() for p in out["particles"])


def test_list_names_the_rewards(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "Rewards for the scaling strategies" in out and "arith-step" in out and "forbid-letter" in out


def test_the_cli_bounds_torch_threads_as_the_app_does(monkeypatch, capsys):
    """A CLI run went at 2.8 tokens/s with every core of a busy 2-core machine, 14.4 with one: it now takes all
    cores but one, as the app does (DECODING_LAB_TORCH_THREADS overrides)."""
    import torch

    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("DECODING_LAB_TORCH_THREADS", raising=False)
    try:
        torch.set_num_threads(max(1, os.cpu_count() or 1))
        assert main(["list"]) == 0
        assert torch.get_num_threads() == max(1, (os.cpu_count() or 1) - 1)
        monkeypatch.setenv("DECODING_LAB_TORCH_THREADS", "1")
        assert main(["list"]) == 0 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    capsys.readouterr()
