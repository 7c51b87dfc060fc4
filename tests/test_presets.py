import json

import pytest

from decoding import presets
from decoding.presets import load_presets, parse_preset


def test_shipped_presets_load_and_validate():
    shipped = load_presets()
    assert len(shipped) >= 5
    assert len({p.name for p in shipped}) == len(shipped)
    assert all(p.note.strip() and p.title for p in shipped)
    assert {"greedy", "sample", "beam", "mirostat"} <= {p.strategy for p in shipped}


GOOD = "title: t\nmodel: smollm2-135m\nstrategy: sample\nprompt: hi\nnote: n\nparams: {top_p: 0.9}\n"


@pytest.mark.parametrize(
    "text, message",
    [
        ("title: [unclosed", "not valid YAML"),
        ("- a\n- b\n", "expected a mapping"),
        ("title: t\n", r"missing \['model'"),
        (GOOD + "colour: red\n", r"unknown \['colour'\]"),
        (GOOD.replace("top_p: 0.9", "top_p: 7"), r"`top_p` must be in \(0, 1\], got 7"),
        (GOOD.replace("smollm2-135m", "gpt-17"), "unknown model 'gpt-17'"),
        (GOOD.replace("strategy: sample", "strategy: psychic"), "unknown strategy 'psychic'"),
        (GOOD + "max_new_tokens: many\n", "`max_new_tokens` must be int"),
        (GOOD.replace("prompt: hi", "prompt: ''"), "`prompt` is empty"),
    ],
)
def test_malformed_presets_name_the_file_and_the_problem(text, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_preset("broken", text)
    assert "preset 'broken'" in str(info.value)


def test_a_bad_file_among_good_ones_is_reported(tmp_path):
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="preset 'b.yaml': cannot be read"):
        presets.load_presets(tmp_path)


def test_the_cli_lists_presets_and_runs_one_with_overrides(capsys):
    from decoding.__main__ import main as cli
    from decoding.presets import load_presets

    assert cli(["presets", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in listed] == [p.name for p in load_presets()]
    assert {"name": "30-diffusion-unmasking-order", "lab": "diffusion"}.items() <= listed[[p["name"] for p in listed].index(
        "30-diffusion-unmasking-order")].items()
    assert cli(["presets"]) == 0 and "03-min-p-at-high-temperature" in capsys.readouterr().out
    preset = next(p for p in load_presets() if p.name == "30-diffusion-unmasking-order")
    assert cli(["run", "--preset", preset.name, "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["model"], out["strategy"], out["prompt"]) == (preset.model, preset.strategy, preset.prompt)
    assert out["params"] == {**out["params"], **preset.params} and len(out["token_ids"]) <= preset.max_new_tokens
    assert cli(["run", "--preset", preset.name, "--json", "--quiet", "--prompt", "And God said", "--max-new-tokens",
                "8", "--set", "steps=4"]) == 0  # options given on the command line override the preset
    out = json.loads(capsys.readouterr().out)
    assert out["prompt"] == "And God said" and out["params"]["steps"] == 4 and len(out["token_ids"]) <= 8
    assert cli(["run", "--preset", "no-such-preset"]) == 2
    assert "no preset named 'no-such-preset'" in capsys.readouterr().err
    assert cli(["run", "--model", "tiny-random"]) == 2
    assert "give --prompt TEXT, or --preset NAME" in capsys.readouterr().err
