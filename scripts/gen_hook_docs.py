"""Regenerate docs/plugin-hooks.md from pysb_core/hookspecs.py and pysb_core/childhooks.py
(tests/test_docs.py checks it)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import FunctionType, ModuleType

from pysb_core import childhooks, hookspecs

HEADER = """# Plugin hooks

Every hook pysb calls, in the order of a run. Implement them with `@pysb_core.hookimpl` in a
module registered under the `pysb.guards` (guard families) or `pysb.plugins` (anything else)
entry-point group. pysb calls each hook with keyword arguments, and pluggy passes an
implementation only the arguments it names: name only those you need. The loaded
provider instance is registered as a plugin too (`provider:NAME`), so a provider class can
implement any hook as a method. The names a plugin may import from pysb-core are those of
`pysb_core`, [`pysb_core.providerkit`](writing-providers.md) and
[`pysb_core.guardkit`](writing-guards.md).

Generated from `pysb_core/hookspecs.py` and `pysb_core/childhooks.py` by
`scripts/gen_hook_docs.py`; `tests/test_docs.py` checks that it is current.
"""

CHILD_HEADER = """## Inside the sandbox: a guard's child side (not pluggy hooks)

"""


def _functions(module: ModuleType) -> list[FunctionType]:
    found = [
        f
        for n, f in inspect.getmembers(module, inspect.isfunction)
        if n.startswith("pysb_") and f.__module__ == module.__name__
    ]
    return sorted(found, key=lambda f: f.__code__.co_firstlineno)


def _doc(fn: FunctionType) -> str:
    """The docstring as Markdown: ``literal`` as `literal`, ``:param x:`` as a list."""
    doc = (inspect.getdoc(fn) or "").split(".. versionadded::")[0].strip()
    doc = re.sub(r":param (\w+):", r"- `\1`:", doc)
    doc = re.sub(r":return:", "- returns:", doc)
    doc = re.sub(r":(?:func|class|meth|mod):`~?([^`]+)`", r"`\1`", doc)
    return doc.replace("``", "`")


def _section(fn: FunctionType, level: str = "##") -> list[str]:
    opts = getattr(fn, "pysb_spec", {}) or {}
    sig = str(inspect.signature(fn)).replace("'", "")
    out = [f"{level} `{fn.__name__}{sig}`\n"]
    flags = [k for k in ("firstresult", "historic") if opts.get(k)]
    if flags:
        out.append(f"*{', '.join(flags)}*\n")
    out.append(_doc(fn) + "\n")
    return out


def render() -> str:
    out = [HEADER]
    for fn in _functions(hookspecs):
        out.extend(_section(fn))
    out.append(CHILD_HEADER + _module_doc(childhooks))
    for fn in _functions(childhooks):
        out.extend(_section(fn, "###"))
    return "\n".join(out)


def _module_doc(module: ModuleType) -> str:
    doc = inspect.getdoc(module) or ""
    doc = doc.rsplit("\n\nThe functions below are the specification", 1)[0]
    doc = re.sub(r":(?:func|class|meth|mod):`~?([^`]+)`", r"`\1`", doc)
    return doc.replace("``", "`") + "\n"


if __name__ == "__main__":
    Path(__file__).resolve().parents[1].joinpath("docs", "plugin-hooks.md").write_text(render())
