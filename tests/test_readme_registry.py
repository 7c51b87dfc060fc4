"""The method tables of the README and its docs pages (docs/*.md) say what the registry says: every registered
method, drafter, diffusion sampler and reward is there, with every parameter it declares by the name `--set`
takes (a plug-in's own as `<plug-in>.<field>`), and nothing that is no longer registered. A new method fails
this test until the documentation tells users about it. A section is looked up by its heading in README.md and
every docs page (doc_pages.section), so a table checked here may live on the front page or a lab's page."""

from __future__ import annotations

import re

import pytest

from decoding.diffusion.samplers import SAMPLERS
from decoding.params import specs
from decoding.registry import get_strategy, param_specs, strategies_of
from decoding.scaling.params import ScalingParams
from decoding.scaling.scoring import REWARDS
from decoding.speculative.strategy import DRAFTERS
from doc_pages import section


def table_rows(text: str) -> dict[str, str]:
    """{first cell's backticked name: the row} of the Markdown tables in `text`."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\| `([^`]+)` \|", line)
        if match:
            rows[match.group(1)] = line
    return rows


def named(text: str) -> set[str]:
    return set(re.findall(r"`([^`=\s]+)(?:=[^`]*)?`", text))


def test_the_strategies_table_lists_every_playground_and_speculative_strategy_with_its_parameters():
    rows = table_rows(section("Strategies", own_only=True))
    expected = set(strategies_of("token", "beam", "speculative"))
    assert set(rows) == expected, "the Strategies table (docs/playground.md) and the registry differ"
    for name, row in rows.items():
        cells = row.split(" | ")
        declared = {p["name"] for p in param_specs(name)}
        listed = named(cells[1]) if cells[1].strip() != "none" else set()
        assert listed == declared, (name, sorted(declared - listed), sorted(listed - declared))


def test_the_scaling_table_lists_every_method_and_its_own_parameters():
    text = section("Inference-time scaling")
    rows = table_rows(text)
    assert set(strategies_of("scaling")) <= set(rows), sorted(set(strategies_of("scaling")) - set(rows))
    shared = {s.name for s in specs(ScalingParams)}
    for method in strategies_of("scaling"):
        own = {s.name for s in specs(get_strategy(method).params_cls)} - shared
        assert own <= named(rows[method]), (method, sorted(own - named(rows[method])))


@pytest.mark.parametrize("registry, title", [(REWARDS, "Inference-time scaling"), (DRAFTERS, "Speculative decoding"),
                                             (SAMPLERS, "Diffusion LMs")])
def test_every_plugin_and_its_own_knobs_are_in_its_section(registry, title):
    text = section(title)
    mentioned = named(text) | {m.split("=", 1)[1] for m in re.findall(r"`(\w+=[\w-]+)`", text)}
    for name in registry.names():
        assert name in mentioned, f"the {title} section (README.md, docs/) does not name {registry.kind} {name}"
        for spec in specs(registry.params_of(name)):
            assert f"{name}.{spec.name}" in named(text), f"{title}: {name}'s own `{name}.{spec.name}` is not named"


def test_every_diffusion_parameter_is_in_the_table():
    rows = table_rows(section("Diffusion LMs"))
    family = {p["name"] for p in param_specs("diffusion") if p["plugin"] is None}
    listed = {name.split("=")[0] for name in rows} | {n for row in rows.values() for n in named(row)}
    assert family <= listed, sorted(family - listed)
