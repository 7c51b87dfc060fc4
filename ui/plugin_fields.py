"""A family's plug-in knobs as widgets, laid out from the registry's declarations.

A drafter, diffusion sampler or reward declares its own parameters (`decoding.registry.Registry.register(
..., params=...)`); `param_specs(strategy)` lists them after the family's, named `"<plug-in>.<field>"`
with the plug-in's name in `plugin`. A tab makes one widget per row (`spec_widget`), keyed
`"<prefix>:<plug-in>.<field>"`, shows only the chosen plug-in's (`visibility`), and sends only the chosen
plug-in's values with the run (`chosen_values`). So a new plug-in's knob appears in its tab with no edit
to the tab, and two plug-ins' fields of one name are two widgets, each with its own default and range.

Glossary
    row       one parameter's spec row (`decoding.params.describe`)
    selector  the family field that picks the plug-in (drafter, sampler, reward)
"""

from __future__ import annotations

import gradio as gr

from decoding.registry import param_specs
from ui.widgets import spec_widget


def plugin_rows(strategy: str) -> list[dict]:
    """The spec rows of every registered plug-in's own parameters, in registration order."""
    return [row for row in param_specs(strategy) if row["plugin"]]


def field_label(row: dict) -> str:
    """"n-gram (prompt-lookup)": the field's own name, then whose it is."""
    return f"{row['name'].partition('.')[2].replace('_', ' ')} ({row['plugin']})"


def plugin_widgets(c: dict, prefix: str, elem: str, strategy: str, chosen: str, values: dict | None = None) -> list[str]:
    """One widget per plug-in parameter of `strategy` into `c` (keys `"<prefix>:<plug-in>.<field>"`, element
    ids `"<elem>-<plug-in>-<field>"`); only `chosen`'s are visible. `values` overrides a default shown at
    first ({"<plug-in>.<field>": value}). Returns the keys made."""
    values = values or {}
    keys = []
    for row in plugin_rows(strategy):
        key = f"{prefix}:{row['name']}"
        elem_id = f"{elem}-{row['name'].replace('.', '-').replace('_', '-')}"
        c[key] = spec_widget(row, label=field_label(row), elem_id=elem_id, visible=row["plugin"] == chosen,
                             value=values.get(row["name"]))
        keys.append(key)
    return keys


def visibility(strategy: str, prefix: str, chosen: str) -> dict:
    """{widget key: gr.update(visible=...)}: the chosen plug-in's widgets shown, the others hidden."""
    return {f"{prefix}:{row['name']}": gr.update(visible=row["plugin"] == chosen) for row in plugin_rows(strategy)}


def chosen_values(params: dict, chosen: str) -> dict:
    """`params` without the other plug-ins' values: the family's fields and `"<chosen>.<field>"`."""
    return {k: v for k, v in params.items() if "." not in k or k.startswith(f"{chosen}.")}


def namespaced(strategy: str, params: dict, given_only: bool = False) -> dict:
    """A preset's or a trace's parameters as the tab's widgets are keyed: every value effective (0 draft length
    resolved, defaults filled) and a plug-in's knobs as `"<plug-in>.<field>"`, also from the older flat form
    (`ngram` for the chosen prompt-lookup). Parameters the engine refuses come back unchanged (the run then
    says what is wrong). `given_only`: only what `params` names (a preset's own settings, not every default)."""
    from decoding.params import flat
    from decoding.run import make_params

    try:
        full = flat(make_params(strategy, params, lenient=True))
    except ValueError:
        return dict(params)
    if not given_only:
        return full
    return {k: v for k, v in full.items() if k in params or ("." in k and k.partition(".")[2] in params)}


def own_values(params: dict, plugin: str) -> dict:
    """{field: value} of `plugin`'s own knobs in a recorded run's parameters: `"<plugin>.<field>"`, or in a
    trace recorded before plug-ins owned their knobs, the plain field name."""
    prefix = f"{plugin}."
    own = {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}
    return own or {k: v for k, v in params.items() if "." not in k}
