import json
import re
from collections import defaultdict

import pytest

from decoding import presets
from decoding.presets import LAB_NUMBERS, load_presets, parse_preset
from decoding.registry import get_strategy


def test_shipped_presets_load_and_validate():
    shipped = load_presets()
    assert len(shipped) >= 5
    assert len({p.name for p in shipped}) == len(shipped)
    assert all(p.note.strip() and p.title for p in shipped)
    assert {"greedy", "sample", "beam", "mirostat"} <= {p.strategy for p in shipped}


GOOD = "title: t\nmodel: smollm2-135m\nstrategy: sample\nprompt: hi\nnote: n\nparams: {top_p: 0.9}\n"


def strategy_lab(preset) -> str:
    """The lab whose tab runs the preset's strategy: its registry family, with the token-level and beam
    families in the Playground (as `ui/playground_views.PLAYGROUND_FAMILIES` puts them), and a preset that names
    the shipped book in the Long context lab."""
    if preset.document is not None:  # the shipped book: the Long context lab (rag, ttt, speculative with rapid)
        return "longctx"
    family = get_strategy(preset.strategy).family
    return "playground" if family in ("token", "beam") else family


def numbering_problems(shipped) -> list[str]:
    """One sentence per broken numbering rule: each file name starts with two digits, no two files
    share a number, each number is in the range of the lab its strategy belongs to."""
    problems, files_of = [], defaultdict(list)
    for p in shipped:
        lab, match = strategy_lab(p), re.match(r"(\d\d)-", p.name)
        if p.lab != lab:
            problems.append(f"{p.name}.yaml says lab {p.lab!r}, but its strategy {p.strategy!r} belongs to {lab!r}")
        if match is None:
            problems.append(f"{p.name}.yaml does not start with a two-digit number")
            continue
        files_of[int(match[1])].append(f"{p.name}.yaml")
        span = LAB_NUMBERS[lab]
        if int(match[1]) not in span:
            problems.append(f"{p.name}.yaml is a {lab} preset, so its number must be in "
                            f"{span.start:02d}-{span.stop - 1:02d}")
    problems += [f"{', '.join(files[:-1])} and {files[-1]} share the number {number:02d}; give each its own"
                 for number, files in sorted(files_of.items()) if len(files) > 1]
    return problems


def test_shipped_presets_have_unique_numbers_in_their_labs_ranges():
    shipped = load_presets()
    assert not numbering_problems(shipped), "\n".join(numbering_problems(shipped))
    assert {strategy_lab(p) for p in shipped} == set(LAB_NUMBERS)  # every lab has presets, and every range is used


@pytest.mark.slow  # the real models smollm2-135m, tiny-diffusion
def test_a_shared_number_or_a_number_out_of_range_is_named(tmp_path):
    (tmp_path / "07-first.yaml").write_text(GOOD)
    (tmp_path / "07-second.yaml").write_text(GOOD)
    (tmp_path / "24-diffusion-here.yaml").write_text(GOOD.replace("smollm2-135m", "tiny-diffusion").replace(
        "strategy: sample", "strategy: diffusion\nlab: diffusion").replace("params: {top_p: 0.9}", "params: {}"))
    (tmp_path / "unnumbered.yaml").write_text(GOOD.replace("strategy: sample", "strategy: greedy").replace(
        "params: {top_p: 0.9}", "lab: scaling"))
    assert numbering_problems(load_presets(tmp_path)) == [
        "24-diffusion-here.yaml is a diffusion preset, so its number must be in 50-79",
        "unnumbered.yaml says lab 'scaling', but its strategy 'greedy' belongs to 'playground'",
        "unnumbered.yaml does not start with a two-digit number",
        "07-first.yaml and 07-second.yaml share the number 07; give each its own",
    ]


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
    assert {"name": "50-diffusion-unmasking-order", "lab": "diffusion"}.items() <= listed[[p["name"] for p in listed].index(
        "50-diffusion-unmasking-order")].items()
    assert cli(["presets"]) == 0 and "03-min-p-at-high-temperature" in capsys.readouterr().out
    preset = next(p for p in load_presets() if p.name == "50-diffusion-unmasking-order")
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


BOOK = "title: t\nlab: longctx\nmodel: tiny-random\nstrategy: rag\nnote: n\ndocument: {size: 1024, seed: 0, question: 1}\n"


@pytest.mark.parametrize("text, message", [
    (BOOK.replace("question: 1", "question: 5"), r"`document.question` must be an integer in \[0, 4\], got 5"),
    (BOOK.replace("size: 1024", "size: 1000"), "`document.size` must be one of 1024, 2048, 4096, 8192, got 1000"),
    (BOOK.replace("seed: 0", "seed: -1"), r"`document.seed` must be an integer in \[0, 2\*\*31\), got -1"),
    (BOOK.replace(", question: 1", ""), "`document` must have exactly the keys size, seed, question"),
    (BOOK + "prompt: hi\n", "give `document` or `prompt`, not both"),
    (BOOK.replace("lab: longctx", "lab: playground"), "a preset with a `document` belongs to lab 'longctx'"),
    (BOOK.replace("document: {size: 1024, seed: 0, question: 1}", "document: [1024]"), "`document` must be dict"),
])
def test_a_long_context_preset_names_the_shipped_book_exactly(text, message):
    with pytest.raises(ValueError, match=message):
        parse_preset("book", text)


def test_a_long_context_preset_runs_from_the_cli_on_the_book_it_names(capsys):
    """No text in the preset: the CLI builds the book it names with the run's model's tokenizer."""
    from decoding.__main__ import main as cli
    from decoding.models import load_model
    from decoding.presets import document_prompt, find_preset

    preset = find_preset("longctx", "83-longctx-ttt-train-1k")
    assert preset.prompt == "" and preset.document == {"size": 1024, "seed": 0, "question": 0}
    assert cli(["run", "--preset", preset.name, "--model", "tiny-random", "--set", "steps=1", "--set", "span_tokens=8",
                "--max-new-tokens", "2", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = document_prompt(preset, load_model("tiny-random", progress=None).tokenizer)
    assert out["prompt"] == expected and out["strategy"] == "ttt" and out["params"]["steps"] == 1
    assert "What is the secret number of" in expected and len(expected) > 800
    assert cli(["run", "--preset", preset.name, "--model", "tiny-random", "--prompt", "Hi", "--max-new-tokens", "1",
                "--set", "steps=0", "--json", "--quiet"]) == 0  # a prompt given on the command line wins
    assert json.loads(capsys.readouterr().out)["prompt"] == "Hi"
