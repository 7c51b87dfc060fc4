"""`pip install -e .` (pyproject.toml): every top-level package the code imports is installed, the
dependencies are requirements.txt's, the `decoding` command is the CLI, and the Python snippet under "From
Python" (docs/api-and-cli.md, which the README's set-up links to) runs from another directory once installed
(slow: a virtual environment and a real install)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sysconfig
import sys
import tomllib
from pathlib import Path

import pytest
from setuptools import find_packages

from conftest import ROOT
from doc_pages import section

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SOURCES = ("decoding", "ui", "visualizers", "app.py", "bench")  # what the app, the CLI and the benchmarks run


def local_imports() -> set[str]:
    """The repository's own top-level modules and packages that its code imports."""
    local = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} | {p.stem for p in ROOT.glob("*.py")}
    names = set()
    for source in SOURCES:
        path = ROOT / source
        for file in [path] if path.is_file() else path.rglob("*.py"):
            for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names.add(node.module.split(".")[0])
    return names & local


def installed() -> tuple[set[str], set[str]]:
    """(the packages, the single-file modules) the setuptools configuration installs."""
    tool = PYPROJECT["tool"]["setuptools"]
    packages = set(find_packages(ROOT, include=tool["packages"]["find"]["include"]))
    return packages, set(tool.get("py-modules", []))


def test_every_package_the_code_imports_is_installed_with_its_subpackages():
    packages, modules = installed()
    assert local_imports() <= packages | modules
    every_subpackage = {".".join(p.relative_to(ROOT).parent.parts) for top in packages if "." not in top
                        for p in (ROOT / top).rglob("__init__.py")}
    assert every_subpackage <= packages  # e.g. decoding.diffusion, decoding.scaling


def test_dependencies_are_the_requirements_and_the_command_is_the_cli():
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["dependencies"]["file"] == ["requirements.txt"]
    module, _, name = PYPROJECT["project"]["scripts"]["decoding"].partition(":")
    import importlib

    assert callable(getattr(importlib.import_module(module), name))


def readme_snippet() -> str:
    return re.search(r"```python\n(.*?)```", section("From Python"), re.S).group(1)


def test_readme_says_how_to_install_the_packages():
    setup = (ROOT / "README.md").read_text(encoding="utf-8").split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert "pip install -e ." in setup and "docs/api-and-cli.md#from-python" in setup


@pytest.mark.slow
def test_the_readme_snippet_runs_from_another_directory_after_install(tmp_path):
    """A copy of the sources (pip builds an editable install in place, and tests write only to temporary
    folders) installed into a virtual environment that sees this one's packages; the snippet runs in
    another folder with no PYTHONPATH, on the tiny random model instead of SmolLM2 (the same calls)."""
    source = tmp_path / "src"
    for name in ("decoding", "ui", "visualizers", "presets"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("app.py", "pyproject.toml", "README.md", "requirements.txt"):
        shutil.copy(ROOT / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # the new environment sees this one's packages: `--system-site-packages` would give the base Python's, which is
    # not where they are when this runs in a virtual environment itself (as CI does)
    ours = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    theirs = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    (Path(theirs) / "_parent_env.pth").write_text("\n".join(sorted(ours)) + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(source)], check=True,
                   capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "snippet.py").write_text(readme_snippet().replace('"smollm2-135m"', '"tiny-random"'))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    run = subprocess.run([str(python), "snippet.py"], cwd=elsewhere, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0].startswith("start") and (elsewhere / "beam.json").exists()
    cli = subprocess.run([str(venv / "bin" / "decoding"), "presets"], cwd=elsewhere, env=env, capture_output=True,
                         text=True, timeout=300)
    assert cli.returncode == 0 and "03-min-p-at-high-temperature" in cli.stdout, cli.stderr


APP_SOURCES = ("decoding", "ui", "visualizers", "app.py")  # what `pip install -r requirements.txt && python app.py` runs


def optional(node: ast.AST, parents: dict) -> bool:
    """Whether an import sits in a `try` whose handler catches ImportError (the code runs without it)."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in node.handlers):
            return True
    return False


def third_party_imports(sources=APP_SOURCES, root=ROOT) -> dict[str, str]:
    """{top-level module: a file that imports it} for every import of the app's code that is neither the standard
    library, the repository's own, nor optional (guarded by `except ImportError`)."""
    local = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} | {p.stem for p in ROOT.glob("*.py")}
    found: dict[str, str] = {}
    for source in sources:
        path = root / source
        for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
            tree = ast.parse(file.read_text(encoding="utf-8"))
            parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in local and not optional(node, parents):
                        found.setdefault(top, str(file.relative_to(root)))
    return found


def requirement_names(path) -> set[str]:
    """The distribution names a requirements file declares (normalised as pip compares them)."""
    names = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split("#")[0])
        if match:
            names.add(re.sub(r"[-_.]+", "-", match.group(1)).lower())
    return names


def undeclared(requirements, sources=APP_SOURCES, root=None) -> list[str]:
    """The third-party modules the sources import that no distribution named in `requirements` provides."""
    import importlib.metadata

    declared = requirement_names(requirements)
    provided = importlib.metadata.packages_distributions()
    missing = []
    for module, where in sorted(third_party_imports(sources, root or ROOT).items()):
        dists = {re.sub(r"[-_.]+", "-", d).lower() for d in provided.get(module, [])}
        if not dists & declared:
            missing.append(f"{module} (imported by {where}; distribution {sorted(dists) or 'not installed'})")
    return missing


def test_every_third_party_import_of_the_app_is_declared_in_requirements():
    """A fresh `pip install -r requirements.txt` must give the app everything it imports: each third-party module is
    provided by a distribution named in requirements.txt itself (not one that only happens to come with another, or
    to be on this machine). The README's launch command once crashed on `from scipy.stats import norm` this way."""
    missing = undeclared(ROOT / "requirements.txt")
    assert not missing, "imported but not declared in requirements.txt: " + "; ".join(missing)


def test_the_import_check_sees_an_undeclared_import(tmp_path):
    """The check can fail: code importing numpy and scipy (spaces guarded by `except ImportError`), checked against
    requirements.txt without numpy's line, reports numpy and scipy and nothing else."""
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "mod.py").write_text("import numpy\ntry:\n    import spaces\nexcept ImportError:\n    pass\n"
                                               "from scipy.stats import norm\nimport torch\n")
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "requirements.txt").write_text("\n".join(ln for ln in lines if not ln.startswith("numpy")) + "\n")
    missing = undeclared(tmp_path / "requirements.txt", ("probe",), tmp_path)
    assert [m.split()[0] for m in missing] == ["numpy", "scipy"]
