"""A training run's checkpoint: what continuing it needs (weights, optimizer, random streams, progress).

    save_checkpoint(path, model, optimizer, {"generator": g}, step=..., spent=...)
    state = load_checkpoint(path, model, optimizer, {"generator": g})   # -> {"step": ..., "spent": ...}

The file is written beside itself and renamed, so a run killed while saving leaves the previous
checkpoint whole. `decoding.training.train`, `layerskip` and `faster` use it; `run_log` is their log file;
`export_notes` writes the log and a summary beside an exported draft (`eagle`, `longspec`).
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

import torch

RESERVED = ("model", "optimizer", "generators", "rng", "state")


def save_checkpoint(path: Path, model, optimizer, generators: dict[str, torch.Generator], **state) -> None:
    """Weights, optimizer state, every named generator's state and torch's global one, and `state` (step, time
    spent, history, ...: whatever the trainer needs to go on)."""
    data = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "generators": {name: g.get_state() for name, g in generators.items()}, "rng": torch.get_rng_state(),
            "state": state}
    tmp = path.with_suffix(".tmp")
    torch.save(data, tmp)
    tmp.replace(path)  # never a half-written checkpoint


def load_checkpoint(path: Path, model, optimizer, generators: dict[str, torch.Generator], what: str = "--resume") -> dict:
    """Restore what `save_checkpoint` wrote into `model`, `optimizer` and `generators`; returns its `state`.
    ValueError naming `what` when there is no checkpoint. A checkpoint written before this module (every entry
    at the top level) is read too."""
    if path is None or not Path(path).exists():
        raise ValueError(f"{what}: no checkpoint at {path}")
    data = torch.load(path, weights_only=False)
    model.load_state_dict(data["model"])
    optimizer.load_state_dict(data["optimizer"])
    saved = data.get("generators") or {name: data[name] for name in generators if name in data}
    for name, generator in generators.items():
        generator.set_state(saved[name])
    if "rng" in data:
        torch.set_rng_state(data["rng"])
    if "state" in data:
        return data["state"]
    return {k: v for k, v in data.items() if k not in RESERVED and k not in generators}


@contextmanager
def run_log(path: Path, mode: str = "a"):
    """A training run's log: `log(line)` prints the line with the time and appends it to `path` at once (a
    run killed mid-way keeps every line it wrote)."""
    with open(path, mode) as file:
        def log(line: str) -> None:
            line = time.strftime("%H:%M:%S ") + line
            print(line, flush=True)
            file.write(line + "\n")
            file.flush()

        yield log


def export_notes(out: Path, work: Path, summary: dict) -> None:
    """Beside an exported model in `out`: the training run's log (`work`/train.log) and `summary` as training.json;
    the summary is printed too (the EAGLE and LongSpec draft recipes)."""
    (out / "train.log").write_text((work / "train.log").read_text())
    (out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))
