"""Text the user reads in a terminal or a message (issue 18): `python -m decoding list` lines its columns
up however long a name is, and messages offer only the models the menus list."""

from __future__ import annotations

import pytest

import decoding.__main__ as cli
from decoding.models import REGISTRY, check_model_id
from decoding.registry import STRATEGIES, param_specs


@pytest.fixture(scope="module")
def listing() -> list[str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["list"]) == 0
    return out.getvalue().splitlines()


def columns(lines: list[str], texts) -> set[int]:
    """The columns at which each of `texts` starts on the line that holds it."""
    return {next(line.index(text) for line in lines if text in line) for text in texts}


def test_models_line_up_however_long_their_names(listing):
    assert max(map(len, REGISTRY)) > 14  # tiny-random-diffusion: longer than the old fixed width
    assert len(columns(listing, [spec.description for spec in REGISTRY.values()])) == 1


def test_each_strategys_parameters_line_up_in_columns(listing):
    for name in STRATEGIES:
        specs = [p for p in param_specs(name) if p["plugin"] is None]  # a plug-in's own: listed with the plug-in
        if not specs:
            continue
        start = listing.index(next(line for line in listing if line.startswith(f"  {name} ")))
        end = next(i for i in range(start + 1, len(listing)) if not listing[i].startswith("      "))
        block = listing[start + 1:end]  # its parameters' lines (and the lines a long range pushed help to)
        for cell in ("default {default!s}", "range {range}", "{help}"):  # a long cell moves the rest to a new line
            assert len(columns(block, [cell.format(**p) for p in specs])) == 1, (name, cell)


def test_strategies_rewards_drafters_and_samplers_line_up(listing):
    assert len(columns(listing, [f"  {s.help}" for s in STRATEGIES.values()])) == 1
    for title in ("Rewards", "Drafters", "Samplers"):
        start = next(i for i, line in enumerate(listing) if line.startswith(title))
        section = listing[start + 1:next((i for i in range(start + 1, len(listing)) if not listing[i]), len(listing))]
        names = [line for line in section if line.startswith("  ") and not line.startswith("   ")]  # not their knobs
        assert len({len(line) - len(line[2:].split(None, 1)[1]) for line in names}) == 1, title


@pytest.mark.slow  # the real models smollm2-135m, tiny-diffusion
@pytest.mark.parametrize("name", ["", "no-such-model"])
def test_model_messages_offer_only_the_menus_models(name):
    with pytest.raises(ValueError) as refused:
        check_model_id(name)
    message = str(refused.value)
    assert "smollm2-135m" in message and "tiny-diffusion" in message
    hidden = [n for n, spec in REGISTRY.items() if not spec.suggested]
    assert hidden and not any(f"{n}," in message or f"{n} " in message for n in hidden), message
