"""The documentation's links and commands work (issue 33: the README is a front page, its depth in docs/).

Every relative link and image in README.md, docs/*.md, ARCHITECTURE.md and the model cards (assets/*/README.md)
names a file that exists, and every `#anchor` (same file or `page.md#anchor`) names a heading of its target, by
GitHub's rule for heading ids. Each docs page links back to the README, and the README links to every docs page.
Every command the docs show (```bash blocks, indented code blocks and `python ...` in inline code) that runs a
script or module of this repository names one that exists, and each `--option` it passes is declared by that
script's argparse (`python -m decoding run ...`: declared for the `run` subcommand). The README's test command,
which .ci/run reads between its markers, is still there. No model, no network: the sources are parsed, not run.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
from functools import cache
from pathlib import Path

from doc_pages import DOCS, README, ROOT, headings, read

CHECKED = [README, *sorted(DOCS.glob("*.md")), ROOT / "ARCHITECTURE.md", *sorted((ROOT / "assets").glob("*/README.md"))]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"<(?:a|img)\s[^>]*?(?:href|src)=\"([^\"]+)\"", re.I)
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)", re.M)
FENCE = re.compile(r"^ {0,3}(```+|~~~+)(.*)$")


# ---- Markdown: code, links, heading ids ----------------------------------------------------------------------

def blocks(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(the text with fenced and indented code blanked out, [(info string, code)] of its code blocks); an
    indented block's info string is "indented". Line numbers of the blanked text are the original's."""
    prose, code, fence, info, body = [], [], None, "", []
    previous_blank, indented = True, False
    for line in text.splitlines():
        marker = FENCE.match(line)
        if fence is not None:
            if marker and marker.group(1).startswith(fence) and not marker.group(2).strip():
                code.append((info, "\n".join(body)))
                fence = None
            else:
                body.append(line)
            prose.append("")
        elif marker:
            fence, info, body = marker.group(1)[0] * 3, marker.group(2).strip().lower(), []
            prose.append("")
        elif line.startswith("    ") and line.strip() and (previous_blank or indented):
            code.append(("indented", line.strip()))  # a line of an indented code block (the docs' are one-liners)
            prose.append("")
            indented = True
        else:
            prose.append(line)
            indented = indented and not line.strip()
        previous_blank = not line.strip()
    return "\n".join(prose), code


def without_inline_code(text: str) -> str:
    """`text` with every inline code span blanked (newlines kept, so line numbers hold)."""
    return re.sub(r"(`+)(.+?)\1", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def inline_code(text: str) -> list[str]:
    return [re.sub(r"\s+", " ", m.group(2)).strip() for m in re.finditer(r"(`+)(.+?)\1", text, flags=re.S)]


def slug(title: str) -> str:
    """GitHub's id for a heading: its text (links, code and emphasis marks dropped), lowercase, every character
    that is not a letter, digit, underscore, hyphen or space dropped, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"(\*{1,3}|\b_{1,3})(\S.*?\S|\S)\1", r"\2", text)  # *em*, **strong**, _em_
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The ids of `text`'s headings; a repeated id gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    ids = set()
    for _, title, _, _ in headings(text):
        base = slug(title)
        n = seen.get(base, 0)
        ids.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return ids


def link_targets(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link, image, reference definition and HTML href/src outside code."""
    prose = without_inline_code(blocks(text)[0])
    found = []
    for pattern in (LINK, HTML_LINK, REFERENCE):
        for match in pattern.finditer(prose):
            found.append((prose.count("\n", 0, match.start()) + 1, match.group(1)))
    return sorted(found)


def resolve(path: Path, target: str) -> tuple[Path, str]:
    """(the file a relative link of `path` names, its anchor or "")."""
    file, _, anchor = target.partition("#")
    return (Path(os.path.normpath(path.parent / file)) if file else path), anchor


def link_problems(path: Path, text: str, read_target=None) -> list[str]:
    """What is wrong with the links of `text` (the file at `path`): a missing file, or an anchor its target has
    no heading for. `read_target` reads another file (the tests hand in their own pages)."""
    read_target = read_target or read
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    problems = []
    for line, target in link_targets(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
            continue  # https:, mailto: ...: not ours to check offline
        file, anchor = resolve(path, target)
        if file != path and not file.exists():
            problems.append(f"{where}:{line}: {target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor:
            if file.suffix != ".md":
                problems.append(f"{where}:{line}: {target}: an anchor into a file that is not Markdown")
            elif anchor not in anchors(text if file == path else read_target(file)):
                problems.append(f"{where}:{line}: {target}: {file.name} has no heading #{anchor}")
    return problems


def links_to(path: Path, text: str) -> set[Path]:
    """The files the links of `text` (at `path`) name, anchors dropped."""
    return {resolve(path, target)[0] for _, target in link_targets(text) if not re.match(r"[a-z][a-z0-9+.-]*:", target)}


# ---- commands: scripts, modules and their declared options ---------------------------------------------------

@cache
def declared_options(script: Path) -> tuple[frozenset[str], dict[str, frozenset[str]], frozenset[str | None]]:
    """(options of the script's main parser, {subcommand: its own options}, the parsers (None: the main one)
    with an option whose name is computed, so cannot be read), from the `add_argument` and `add_parser` calls in
    its source, in source order (a variable such as `p` may name one subparser after another)."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    events = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            call = node.value
            if isinstance(call.func, ast.Attribute) and call.func.attr == "add_parser" and call.args \
                    and isinstance(call.args[0], ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        events.append((node.lineno, 0, "parser", target.id, call.args[0].value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            owner = node.func.value.id if isinstance(node.func.value, ast.Name) else None
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            computed = any(not isinstance(a, ast.Constant) for a in node.args)
            events.append((node.lineno, 1, "argument", owner, (names, computed)))
    top, subs, computed_in, current = set(), {}, set(), {}
    for _, _, kind, name, value in sorted(events, key=lambda e: (e[0], e[1])):
        if kind == "parser":
            current[name] = value
            subs.setdefault(value, set())
        else:
            names, computed = value
            parser = current.get(name)
            if computed:
                computed_in.add(parser)
            (subs[parser] if parser is not None else top).update(n for n in names if n.startswith("--"))
    return frozenset(top), {k: frozenset(v) for k, v in subs.items()}, frozenset(computed_in)


def module_file(module: str) -> Path | None:
    """The file `python -m module` runs, if the module is this repository's; None for another's (pytest, pip)."""
    top = module.split(".")[0]
    if not (ROOT / top).is_dir() and not (ROOT / f"{top}.py").is_file():
        return None
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__main__.py"):
        if candidate.is_file():
            return candidate
    return base.with_suffix(".py")  # missing: reported by the caller


def command_lines(info: str, code: str) -> list[str]:
    """The shell commands of a code block (continuation lines joined); none for a block in another language."""
    if info not in ("bash", "sh", "shell", "console", "", "indented"):
        return []
    return [line.strip() for line in re.sub(r"\\\n\s*", " ", code).splitlines() if line.strip()]


def command_problems(command: str) -> list[str]:
    """What is wrong with one shell command line: each `python X.py ...` / `python -m module ...` of this
    repository must name a file that exists, and each `--option` must be one its parser declares."""
    try:
        tokens = shlex.split(command, comments=True)
    except ValueError:
        tokens = command.split()
    problems = []
    segments, segment = [], []
    for token in tokens:
        if token in ("&&", "||", "|", ";"):
            segments.append(segment)
            segment = []
        else:
            segment.append(token)
    segments.append(segment)
    for words in segments:
        while words and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]  # VAR=value python ...
        if len(words) < 2 or words[0] not in ("python", "python3"):
            continue  # pip, apt-get, git, vllm, pytest ...: not this repository's parsers
        if words[1] == "-m" and len(words) > 2:
            file, args, name = module_file(words[2]), words[3:], f"python -m {words[2]}"
            if file is None:
                continue
        elif words[1].endswith(".py"):
            file, args, name = ROOT / words[1], words[2:], f"python {words[1]}"
        else:
            continue
        if not file.is_file():
            problems.append(f"{name}: no such file {file.relative_to(ROOT)}")
            continue
        top, subs, computed = declared_options(file)
        for i, arg in enumerate(args):
            if arg in (">", ">>", "2>", "<"):
                args = args[:i]
                break
        words_given = [a for a in args if re.fullmatch(r"[a-z][\w-]*", a)]
        sub = words_given[0] if subs and words_given and words_given[0] in subs else None
        if subs and words_given and sub is None and args and args[0] == words_given[0]:
            problems.append(f"{name}: no subcommand {args[0]!r} (it has {', '.join(sorted(subs))})")
        allowed = top | (subs[sub] if sub else frozenset().union(*subs.values()) if subs else frozenset())
        unreadable = None in computed or sub in computed or (sub is None and bool(computed))
        for arg in args:
            option = re.match(r"[\[(]?(--[A-Za-z][\w-]*)", arg)
            if option and option.group(1) not in allowed and not unreadable:
                problems.append(f"{name}: {file.relative_to(ROOT)} declares no {option.group(1)}"
                                + (f" for {sub!r}" if sub else ""))
    return problems


def commands_of(text: str) -> list[str]:
    """Every shell command `text` shows: in its code blocks and in inline code that starts `python `."""
    prose, code = blocks(text)
    found = [line for info, body in code for line in command_lines(info, body)]
    for span in inline_code(prose):
        if re.match(r"(\w+=\S+ )*python3? ", span):
            found.append(span)
        elif re.match(r"bench/\w+\.py( |$)", span):  # `bench/bench_dtype.py --rounds 6`: run with python
            found.append(f"python {span}")
    return found


def path_problems(text: str) -> list[str]:
    """Repository paths named in code (`decoding/events.py`, `python bench/bench_x.py`) that do not exist."""
    prose, code = blocks(text)
    spans = inline_code(prose) + [line for info, body in code for line in command_lines(info, body)]
    tops = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    problems = []
    for span in spans:
        for path in re.findall(r"(?<![\w./-])[\w-]+(?:/[\w.-]+)+\.[A-Za-z]+\b", span):
            if path.split("/")[0] in tops and not (ROOT / path).exists():
                problems.append(f"`{path}` does not exist")
    return problems


# ---- the shipped documentation -------------------------------------------------------------------------------

def test_every_link_image_and_anchor_resolves():
    problems = [p for path in CHECKED for p in link_problems(path, read(path))]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_docs_page_links_back_to_the_readme_and_the_readme_links_to_every_page():
    pages = sorted(DOCS.glob("*.md"))
    assert len(pages) >= 8, pages
    for page in pages:
        text = read(page)
        assert text.startswith("# "), f"{page.name} does not start with its title"
        assert README in links_to(page, text), f"{page.name} has no link back to README.md"
    missing = set(pages) - links_to(README, read(README))
    assert not missing, f"README.md does not link to {sorted(p.name for p in missing)}"


def test_every_command_names_a_script_that_exists_with_options_it_declares():
    problems, seen = [], 0
    for path in CHECKED:
        for command in commands_of(read(path)):
            seen += 1
            problems += [f"{path.relative_to(ROOT)}: {p}   [{command[:100]}]" for p in command_problems(command)]
    assert seen > 50, seen  # the docs' commands are really found
    assert not problems, "\n".join(problems)


def test_every_repository_path_the_docs_name_in_code_exists():
    problems = [f"{path.relative_to(ROOT)}: {p}" for path in CHECKED for p in path_problems(read(path))]
    assert not problems, "\n".join(problems)


def test_the_readme_keeps_its_front_matter_and_test_command():
    text = read(README)
    assert text.startswith("---\n") and "\nsdk: gradio\n" in text.split("\n---\n", 1)[0]
    assert "\napp_file: app.py\n" in text.split("\n---\n", 1)[0]
    assert text.count("<!-- test-command -->") == 1 and text.count("<!-- /test-command -->") == 1
    block = text.split("<!-- test-command -->\n", 1)[1].split("<!-- /test-command -->", 1)[0]
    lines = block.strip().splitlines()
    assert lines[0] == "```bash" and lines[-1] == "```" and len(lines) == 3, block  # what .ci/run extracts
    assert "python -m pytest" in lines[1] and "python -m ruff check ." in lines[1], lines[1]
    assert len(text.splitlines()) <= 320, "README.md is the front page: the depth belongs in docs/"


# ---- the checkers can fail -----------------------------------------------------------------------------------

def test_github_heading_ids():
    assert slug("The app's API") == "the-apps-api"
    assert slug("Tasks: where parallel decoding works and where it breaks (tiny-parallel)") == \
        "tasks-where-parallel-decoding-works-and-where-it-breaks-tiny-parallel"
    assert slug("Hyperfitting (tiny-ar-hyperfit)") == "hyperfitting-tiny-ar-hyperfit"
    assert slug("`tiny-math` on **CPU**, 2 x 3") == "tiny-math-on-cpu-2-x-3"
    assert anchors("# A\n\n```bash\n# not a heading\n```\n\n## A\n## B b\n") == {"a", "a-1", "b-b"}


def test_a_broken_link_or_anchor_is_reported():
    page = DOCS / "made-up.md"
    text = ("# Made up\n\n[back](../README.md) [ok](#made-up) [set-up](../README.md#set-up)\n"
            "[gone](missing.md) ![gone](../assets/no-such.png) [bad anchor](../README.md#no-such-heading)\n"
            "[bad here](#nowhere) `[in code](missing-too.md)` [web](https://example.com/x.md)\n")
    problems = link_problems(page, text)
    assert len(problems) == 4, problems
    assert any("missing.md" in p for p in problems) and any("no-such.png" in p for p in problems)
    assert any("#no-such-heading" in p for p in problems) and any("#nowhere" in p for p in problems)


def test_an_unknown_script_module_option_or_subcommand_is_reported():
    assert command_problems("python bench/bench_compare.py --prompts 1 --json") == []
    assert command_problems('python -m decoding run --model tiny-ar --set top_p=0.9 --prompt "x" --json') == []
    assert command_problems("pip install -r requirements.txt && python -m pytest -q --no-such") == []
    assert command_problems("python -m decoding.training.eagle train --resume") == []
    assert command_problems("python -m decoding.training.train train --any-computed-option 1") == []  # f"--{name}"
    assert command_problems("python -m decoding.training.train corpus --no-such") == [
        "python -m decoding.training.train: decoding/training/train.py declares no --no-such for 'corpus'"]
    assert command_problems("python bench/bench_compare.py [--tokens 64] [--no-such-option]") == [
        "python bench/bench_compare.py: bench/bench_compare.py declares no --no-such-option"]
    assert command_problems("python bench/bench_nothing.py --json") == [
        "python bench/bench_nothing.py: no such file bench/bench_nothing.py"]
    assert command_problems("python -m decoding.no_such_module") == [
        "python -m decoding.no_such_module: no such file decoding/no_such_module.py"]
    assert command_problems("python -m decoding list --set x=1") == [
        "python -m decoding: decoding/__main__.py declares no --set for 'list'"]
    assert command_problems("python -m decoding.training.eagle export --resume") == [
        "python -m decoding.training.eagle: decoding/training/eagle.py declares no --resume for 'export'"]
    assert command_problems("python -m decoding runn --prompt x")[0].startswith("python -m decoding: no subcommand 'runn'")


def test_a_missing_repository_path_is_reported():
    text = "`decoding/events.py`, `bench/bench_gone.py`, `tests/`, `assets/*/README.md`, `run.json`, `docs/x.md#a`"
    assert path_problems(text) == ["`bench/bench_gone.py` does not exist", "`docs/x.md` does not exist"]


def test_commands_are_found_in_code_blocks_indented_blocks_and_inline_code():
    text = ("# T\n\n```bash\npython app.py && python -m decoding list \\\n  --json   # a comment\n```\n\n"
            "```python\nprint('not a command')\n```\n\nThen:\n\n    python bench/bench_compare.py [--json]\n\n"
            "Inline `python bench/bench_extract.py\n--smoke`, `bench/bench_draw.py --quick` and `pip install x`.\n")
    assert [" ".join(c.split()) for c in commands_of(text)] == [
        "python app.py && python -m decoding list --json # a comment",
        "python bench/bench_compare.py [--json]", "python bench/bench_extract.py --smoke",
        "python bench/bench_draw.py --quick"]


def test_every_environment_variable_the_app_reads_is_documented():
    """A DECODING_LAB_* variable named in the code (decoding/, ui/, visualizers/, app.py) appears in the docs or the
    README, and every one the app's server reads (ui/, app.py) in hosting.md's table or app.py's docstring."""
    sources = [ROOT / "app.py", *[p for d in ("decoding", "ui", "visualizers") for p in (ROOT / d).rglob("*.py")]]
    named = {}
    for path in sources:
        for name in re.findall(r"DECODING_LAB_[A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8")):
            named.setdefault(name, path.relative_to(ROOT).as_posix())
    docs = "\n".join(read(p) for p in CHECKED)
    assert not [n for n in named if n not in docs], "undocumented: " + ", ".join(sorted(n for n in named if n not in docs))
    hosting = read(DOCS / "hosting.md") + ast.get_docstring(ast.parse(read(ROOT / "app.py")))
    server = {n: where for n, where in named.items() if where.startswith("ui/") or where == "app.py"}
    missing = sorted(n for n in server if n not in hosting)
    assert not missing, f"the server reads {missing} but hosting.md's table and app.py's docstring do not say so"
