"""Exports: written only when asked, into one folder that is swept by age and by total size (issue 12).

The browser side (a click downloads the right trace after a comparison run, in every lab) is in
tests/ui/test_browser_exports.py.
"""

from __future__ import annotations

import os
import re
import tempfile
import time

import pytest

from decoding.events import Trace
from decoding.run import run_to_trace
from ui import playground_callbacks, scaling_callbacks, speculative_callbacks
from ui.exports import (NOTHING_YET, STILL_RUNNING, download, export_dir, export_file, export_max_age_s,
                        export_max_bytes, gradio_cache_policy, sweep)
from ui.playground_views import new_selection, param_widgets
from ui.scaling_views import DEFAULT_SETTINGS as SCALING_SETTINGS, FIELDS as SCALING_FIELDS
from ui.speculative_views import DEFAULT_SETTINGS as SPEC_SETTINGS, SPEC_FIELDS

TINY = "tiny-random"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The export folder, in this test's temp folder."""
    monkeypatch.setenv("DECODING_LAB_EXPORT_DIR", str(tmp_path / "exports"))
    return tmp_path / "exports"


@pytest.fixture(scope="module")
def trace() -> Trace:
    return run_to_trace(TINY, "Hello", strategy="greedy", max_new_tokens=4, chat=False)


def entry(folder, name: str, size: int, age_s: float):
    """An export entry (a subfolder with one file of `size` bytes) last modified `age_s` ago."""
    path = folder / name
    path.mkdir(parents=True)
    (path / "file.json").write_bytes(b"x" * size)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_limits_come_from_the_environment(monkeypatch, tmp_path):
    for name in ("DECODING_LAB_EXPORT_DIR", "DECODING_LAB_EXPORT_MAX_AGE_S", "DECODING_LAB_EXPORT_MAX_MB"):
        monkeypatch.delenv(name, raising=False)
    assert export_dir().name == "decoding-lab-exports" and export_dir().is_relative_to(tempfile.gettempdir())
    assert (export_max_age_s(), export_max_bytes(), gradio_cache_policy()) == (3600, 200 * 2**20, (600, 3600))
    monkeypatch.setenv("DECODING_LAB_EXPORT_DIR", str(tmp_path))
    monkeypatch.setenv("DECODING_LAB_EXPORT_MAX_AGE_S", "90")
    monkeypatch.setenv("DECODING_LAB_EXPORT_MAX_MB", "3")
    assert (export_dir(), export_max_age_s(), export_max_bytes(), gradio_cache_policy()) == (tmp_path, 90, 3 * 2**20,
                                                                                           (90, 90))
    monkeypatch.setenv("DECODING_LAB_EXPORT_MAX_MB", "lots")
    with pytest.raises(ValueError, match="DECODING_LAB_EXPORT_MAX_MB must be an integer, got 'lots'"):
        export_max_bytes()


def test_sweep_deletes_exports_older_than_the_age_limit(folder):
    old, fresh = entry(folder, "old", 10, age_s=120), entry(folder, "fresh", 10, age_s=5)
    assert sweep(folder, max_age_s=60, max_bytes=10**6) == [old]
    assert not old.exists() and fresh.exists()


def test_sweep_keeps_the_folder_under_the_size_limit_oldest_first(folder):
    first, second, third = (entry(folder, name, 400, age_s=age) for name, age in (("a", 30), ("b", 20), ("c", 10)))
    assert sweep(folder, max_age_s=3600, max_bytes=900) == [first]  # 1200 bytes: the oldest goes
    assert sweep(folder, max_age_s=3600, max_bytes=400) == [second]
    assert [p.name for p in folder.iterdir()] == [third.name]
    assert sweep(folder / "missing", max_age_s=1, max_bytes=1) == []


def test_each_export_sweeps_first_and_gets_a_fresh_entry(folder, trace, monkeypatch):
    monkeypatch.setenv("DECODING_LAB_EXPORT_MAX_AGE_S", "60")
    stale = entry(folder, "stale", 10, age_s=61)
    paths = [export_file(trace), export_file(trace, "tokens"), export_file(trace, "entropy", suffix="-branch")]
    assert not stale.exists()
    assert [os.path.basename(p) for p in paths] == ["tiny-random-greedy-trace.json", "tiny-random-greedy-tokens.csv",
                                                    "tiny-random-greedy-branch-entropy.html"]
    assert len({os.path.dirname(p) for p in paths}) == 3 and all(p.startswith(str(folder)) for p in paths)
    assert Trace.load(paths[0]).to_dict() == trace.to_dict()
    monkeypatch.setenv("DECODING_LAB_EXPORT_MAX_MB", "1")
    (folder / "big").mkdir()
    (folder / "big" / "old.json").write_bytes(b"x" * 2**20)
    os.utime(folder / "big", (time.time() - 30,) * 2)
    export_file(trace)  # over 1 MB with the big one: it goes, oldest first
    assert not (folder / "big").exists() and len(list(folder.iterdir())) == 4


def test_download_says_why_there_is_nothing(folder, trace):
    with pytest.warns(UserWarning, match=re.escape(NOTHING_YET)):
        assert download(None) is None
    with pytest.warns(UserWarning, match="No branch"):
        assert download(Trace(), missing="No branch to export") is None
    running = Trace([trace.start] + trace.of_kind("token"))  # no RunFinished yet
    with pytest.warns(UserWarning, match=re.escape(STILL_RUNNING)):
        assert download(running) is None
    assert not folder.exists()  # nothing written


def run_playground():
    values = {w.key: w.default for w in param_widgets()}
    return list(playground_callbacks.generate_run(TINY, "sample", "Hello", 8, 0, False, "auto", "prob",
                                                  new_selection(), **values))


def run_speculative():  # with plain decoding after it
    return list(speculative_callbacks.generate_run(TINY, "Hello", 8, 0, False, True,
                                                   **{f: SPEC_SETTINGS[f] for f in SPEC_FIELDS}))


def run_scaling():  # with best-of-N after it
    fields = SCALING_SETTINGS | {"n": 2, "max_step_tokens": 4}
    return list(scaling_callbacks.generate_run(TINY, "Hello", "particle-filter", 8, 0, False, "best-of-n",
                                               **{f: fields[f] for f in SCALING_FIELDS}))


@pytest.mark.parametrize("lab_run", [run_playground, run_speculative, run_scaling])
def test_a_run_alone_writes_no_file(lab_run, folder, tmp_path, monkeypatch):
    """Before, every run wrote a trace (and in the Playground a CSV and a 4.8 MB chart) into a new temp folder."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where a `mkdtemp()` would have gone
    updates = lab_run()
    final = {k: v for update in updates for k, v in update.items()}
    assert final["trace"].finish is not None and "Finished" in final["status"]
    assert not any(isinstance(v, str) and os.path.isfile(v) for v in final.values())
    assert list(scratch.iterdir()) == [] and not folder.exists()


def test_token_csv_cells_that_a_spreadsheet_would_evaluate_are_text(folder):
    """OWASP's CSV-injection rule (issue 25): a replayed token `=HYPERLINK(...)` must not be the first thing in
    its cell; cells starting with = + - @, a tab or a carriage return get a leading apostrophe."""
    import csv

    from decoding.events import RunStarted, TokenStep
    from visualizers.tokens import csv_safe

    tokens = ['=HYPERLINK("http://x","click")', "+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1", " plain", "a=b", "'q",
              "x\r=HYPERLINK(1)"]  # the last: a carriage return inside a cell must not start a new row
    start = RunStarted(model="tiny-random", strategy="greedy", params={}, prompt="p", prompt_text="p", prompt_ids=[1],
                       chat=False, seed=0, max_new_tokens=9, device="cpu", dtype="float32", vocab_size=10)
    steps = [TokenStep(step=i, token_id=i, token_text=t, prob=0.5, sampling_prob=1.0, rank=1, entropy=1.0,
                       entropy_truncated=0.0, kept_size=1, top_ids=[i], top_tokens=[t], top_probs=[0.5], top_kept=[True],
                       elapsed_s=0.1) for i, t in enumerate(tokens)]
    path = export_file(Trace([start, *steps]), "tokens")
    with open(path, newline="", encoding="utf-8") as f:
        cells = [row["token"] for row in csv.DictReader(f)]
    assert cells == ["'" + t for t in tokens[:6]] + tokens[6:]
    assert csv_safe(-0.5) == -0.5 and csv_safe("") == ""  # numbers and empty text are left alone
