"""Import Gradio without regenerating its type stubs.

Every `import gradio` re-derives the `.pyi` stub of each of its ~80 component classes from their source
(`gradio.component_meta.create_or_modify_pyi`, run by the components' metaclass as each class is defined)
and compares it with the file on disk: about 2.5 of the 4.8 s Gradio's import takes on a 2-core machine,
paid by every start of the app and by every test worker. The stubs are for editors' autocompletion of
Gradio's own source; nothing at run time reads them. `skip_stub_generation()` (called by `ui/__init__.py`,
so before any tab module imports Gradio) makes that one step a no-op; the rest of the import is Gradio's
own. With a Gradio whose module no longer has that function, it changes nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

MODULE = "gradio.component_meta"
STEP = "create_or_modify_pyi"


class _SkipStubs(importlib.abc.MetaPathFinder):
    """Finds `gradio.component_meta` as Python would and, once it is executed, replaces its stub step."""

    def find_spec(self, name, path=None, target=None):
        if name != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            if callable(getattr(module, STEP, None)):
                setattr(module, STEP, _no_stub)

        spec.loader.exec_module = exec_module  # this spec's loader only
        return spec


def _no_stub(component_class, class_name, events) -> None:
    """In place of Gradio's stub regeneration: nothing (see the module's docstring)."""


def skip_stub_generation() -> bool:
    """Install the finder unless Gradio is already imported; True when the next import of Gradio will skip
    the stubs (or already did)."""
    loaded = sys.modules.get(MODULE)
    if loaded is not None:
        return getattr(loaded, STEP, None) is _no_stub
    if not any(isinstance(finder, _SkipStubs) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SkipStubs())
    return True
