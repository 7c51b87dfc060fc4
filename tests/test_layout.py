"""The layout shows the families: no import circles, the core imports no family, families are discovered.

The import graph is read from the source with `ast` (nothing is imported): every `import` and
`from ... import` of a project module counts, at module level or inside a function, so a circle
hidden in a function-level import is found too. Two kinds of edge are left out of the circle check:
imports under `if TYPE_CHECKING:` (annotations only, never run) and the implicit import of a
module's own parent packages (importing `decoding.lm` runs `decoding/__init__.py`, which imports
the families: that is discovery, not a circle). The core rule counts every import, type-only ones
included.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest

import decoding
from decoding.registry import STRATEGIES

ROOT = Path(__file__).resolve().parents[1]
TREES = ("decoding", "ui", "visualizers", "bench", "tests")
FAMILIES = ("decoding.token", "decoding.speculative", "decoding.scaling", "decoding.diffusion", "decoding.longctx",
            "decoding.speech")
NOT_CORE = {
    "decoding": "discovery: imports every family package's modules",
    "decoding.__main__": "the command line: lists every family's plug-ins, as app.py shows every tab",
}
ALLOWED_CIRCLES: set[frozenset] = set()  # none: a circle added later fails here until it is taken apart


def module_files(root: Path, trees=TREES) -> dict[str, Path]:
    """{dotted module name: file} for the project's Python files (a package by its __init__.py)."""
    files = {}
    for tree in trees:
        for path in sorted((root / tree).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    if (root / "app.py").is_file():
        files["app"] = root / "app.py"
    return files


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A file's syntax tree, parsed once per test process (two tests walk every file)."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imports_of(name: str, path: Path, known, *, with_type_only: bool) -> set[str]:
    """The project modules `name` imports (resolved to the deepest known module); without with_type_only the
    imports under `if TYPE_CHECKING:` are left out."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node) -> None:
        for child in ast.iter_child_nodes(node):
            if (not with_type_only and isinstance(child, ast.If) and isinstance(child.test, (ast.Name, ast.Attribute))
                    and (getattr(child.test, "id", None) or getattr(child.test, "attr", None)) == "TYPE_CHECKING"):
                visit(ast.Module(body=child.orelse, type_ignores=[]))
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: from the module's package, up level - 1 more
                    package = name.split(".") if is_package else name.split(".")[:-1]
                    package = package[: len(package) - (child.level - 1)]
                    base = ".".join(package + ([child.module] if child.module else []))
                submodules = [f"{base}.{alias.name}" for alias in child.names if f"{base}.{alias.name}" in known]
                found.update(submodules)
                if len(submodules) < len(child.names):  # some names come from the module itself
                    found.add(base)
            visit(child)

    visit(parsed(path))
    resolved = set()
    for target in found:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


def import_graph(root: Path = ROOT, trees=TREES, *, with_type_only: bool = False) -> dict[str, set[str]]:
    files = module_files(root, trees)
    return {name: imports_of(name, path, files, with_type_only=with_type_only) for name, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = iter(range(len(graph) * 2 + 1))

    def connect(v):  # recursion depth is bounded by the number of modules (a few hundred)
        index[v] = low[v] = next(counter)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def in_family(module: str) -> bool:
    return any(module == family or module.startswith(family + ".") for family in FAMILIES)


def core_modules(graph) -> list[str]:
    """decoding/*.py at the top level: what the families are built on."""
    return sorted(m for m in graph if m.startswith("decoding") and m.count(".") <= 1 and not in_family(m)
                  and m not in NOT_CORE and not m.startswith(("decoding.remote", "decoding.training")))


def family_imports_of_core(graph) -> dict[str, list[str]]:
    return {m: sorted(t for t in graph[m] if in_family(t)) for m in core_modules(graph)
            if any(in_family(t) for t in graph[m])}


def test_the_project_has_no_import_circle():
    graph = import_graph()
    assert len(graph) > 200 and "decoding.token.autoregressive" in graph  # the walk saw the project
    unexpected = [c for c in circles(graph) if frozenset(c) not in ALLOWED_CIRCLES]
    assert not unexpected, "import circles (move the shared piece down, or let the lower module register into " \
                           f"the upper one): {unexpected}"


def test_the_core_imports_no_family():
    graph = import_graph(with_type_only=True)  # an annotation-only import counts here
    core = core_modules(graph)
    assert {"decoding.contracts", "decoding.run", "decoding.models", "decoding.lm", "decoding.registry"} <= set(core)
    assert not family_imports_of_core(graph), "the core imports a family; let the family register into the core"


def test_the_checks_find_a_circle_and_a_core_import_of_a_family(tmp_path):
    """On a small made-up tree: a circle through a function-level import, one only under TYPE_CHECKING
    (not a circle), and a core module whose type-only import names a family."""
    files = {
        "decoding/__init__.py": "",
        "decoding/models.py": "def load():\n    from decoding.remote import client\n",
        "decoding/remote/__init__.py": "",
        "decoding/remote/client.py": "from decoding.models import load\n",
        "decoding/contracts.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                 "    from decoding.speculative.drafters import Draft\n",
        "decoding/speculative/__init__.py": "",
        "decoding/speculative/drafters.py": "from decoding import contracts\n",
        "decoding/token/__init__.py": "from . import greedy\n",
        "decoding/token/greedy.py": "import decoding.contracts\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path, ("decoding",))
    assert graph["decoding.token"] == {"decoding.token.greedy"}  # a relative import
    assert circles(graph) == [["decoding.models", "decoding.remote.client"]]
    typed = import_graph(tmp_path, ("decoding",), with_type_only=True)
    assert circles(typed) == [["decoding.contracts", "decoding.speculative.drafters"],
                              ["decoding.models", "decoding.remote.client"]]
    assert family_imports_of_core(typed) == {"decoding.contracts": ["decoding.speculative.drafters"]}
    assert family_imports_of_core(graph) == {}


def test_import_decoding_imports_every_module_of_the_family_packages():
    for family in FAMILIES:
        package = sys.modules[family]
        for path in Path(package.__path__[0]).glob("*.py"):
            if path.stem != "__init__":
                assert f"{family}.{path.stem}" in sys.modules, f"{family}.{path.stem} was not discovered"


def test_shipped_methods_keep_their_menu_order():
    shipped = ["greedy", "sample", "mirostat", "contrastive", "beam", "momentum", "adadec", "superposed",
               "exact-extract", "speculative", "best-of-n", "majority-vote", "first-finish", "reward-beam",
               "particle-filter", "a-star", "refine", "step-speculation", "diffusion", "rag"]
    assert [name for name in STRATEGIES if name in shipped] == shipped


def write_package(root: Path, name: str, modules: dict[str, str], init: str = "") -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("ORDER = []\n" + init)
    for module, text in modules.items():
        (root / name / f"{module}.py").write_text(f"from {name} import ORDER\nORDER.append({module!r})\n{text}")


def test_discover_imports_the_named_modules_first_then_the_rest_alphabetically(tmp_path, monkeypatch):
    write_package(tmp_path, "toy_family_a", {"zeta": "", "alpha": "", "mid": "", "first": ""},
                  init='MENU_ORDER = ("mid", "first")\n')
    write_package(tmp_path, "toy_family_b", {"one": ""}, init='MENU_ORDER = ("one", "gone")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        decoding.discover("toy_family_a")
        assert sys.modules["toy_family_a"].ORDER == ["mid", "first", "alpha", "zeta"]
        with pytest.raises(ImportError, match=r"toy_family_b.MENU_ORDER names gone, which the package does not have"):
            decoding.discover("toy_family_b")
    finally:
        for name in [m for m in sys.modules if m.startswith(("toy_family_a", "toy_family_b"))]:
            del sys.modules[name]


def test_discover_leaves_the_module_python_dash_m_runs_to_runpy(tmp_path, monkeypatch):
    write_package(tmp_path, "toy_family_c", {"tool": "", "method": ""})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["-m", "--out", "x"])  # what runpy shows while it finds the module
    monkeypatch.setattr(sys, "orig_argv", ["python", "-X", "importtime", "-m", "toy_family_c.tool", "--out", "x"])
    try:
        decoding.discover("toy_family_c")
        assert sys.modules["toy_family_c"].ORDER == ["method"]
    finally:
        for name in [m for m in sys.modules if m.startswith("toy_family_c")]:
            del sys.modules[name]
