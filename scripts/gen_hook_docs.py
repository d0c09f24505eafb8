"""Regenerate docs/plugin-hooks.md from pysb_core/hookspecs.py (tests/test_docs.py checks it)."""

from __future__ import annotations

import inspect
from pathlib import Path

from pysb_core import hookspecs

HEADER = """# Plugin hooks

Every hook pysb calls, in the order of a run. Implement them with `@pysb_core.hookimpl` in a
module registered under the `pysb.guards` (guard families) or `pysb.plugins` (anything else)
entry-point group, and name only the arguments you need. The loaded provider instance is
registered as a plugin too. Generated from `pysb_core/hookspecs.py` by
`scripts/gen_hook_docs.py`; `tests/test_docs.py` checks that it is current.
"""


def render() -> str:
    out = [HEADER]
    hooks = [
        f for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("pysb_")
    ]
    for fn in sorted(hooks, key=lambda f: f.__code__.co_firstlineno):
        opts = getattr(fn, "pysb_spec", {}) or {}
        sig = str(inspect.signature(fn)).replace("'", "")
        doc = (inspect.getdoc(fn) or "").split(".. versionadded::")[0].strip()
        out.append(f"## `{fn.__name__}{sig}`\n")
        flags = [k for k in ("firstresult", "historic") if opts.get(k)]
        if flags:
            out.append(f"*{', '.join(flags)}*\n")
        out.append(doc + "\n")
    return "\n".join(out)


if __name__ == "__main__":
    Path(__file__).resolve().parents[1].joinpath("docs", "plugin-hooks.md").write_text(render())
