"""The import guard's parent-side hooks: what ``pysb check`` reports, what learning writes.

This module is the ``imports`` entry point of the ``pysb.guards`` group. It is imported by
every ``pysb run`` on the host, so it stays light: the guard itself (the finder, the
``__import__`` checks) lives in :mod:`pysb_guards.imports.guard`, which only the sandboxed
interpreter imports (``PYSB_CHILD_MODULE``).
"""

from __future__ import annotations

from pysb_core.guardkit import hookimpl

TYPE_CHECKING = False  # typing costs milliseconds at every start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from pysb_core.guardkit import CheckReport, Event, Policy, Provider

GUARD = "imports"
#: The module the sandboxed interpreter imports to install this family's guard.
PYSB_CHILD_MODULE = "pysb_guards.imports.guard"
#: The guard kit this family is written against (:mod:`pysb_core.kitversion`).
PYSB_GUARDKIT = "1.2"


@hookimpl
def pysb_check(policy: Policy, provider: Provider | None, report: CheckReport) -> None:
    """Imports are a Python-layer rule only."""
    if policy.imports is None:
        report.add(
            "imports: (none: only the interpreter's own modules)",
            "<default>",
            ["python"],
            family=GUARD,
        )
        return
    text = "imports: " + ("*" if "*" in policy.imports else ", ".join(policy.imports))
    report.add(text, policy.imports_source or "<profile>", ["python"], family=GUARD)


@hookimpl
def pysb_learned(records: Sequence[Event], profile: Any) -> None:
    """Render learned imports, grouped: standard library, third party, dangerous."""
    from pysb_guards.learned_fields import module_name_problem

    drop = getattr(profile, "drop", None)
    for r in records:
        if r.guard == GUARD and r.action == "learn" and drop is not None:
            problem = module_name_problem(r.target.partition(".")[0])
            if problem is not None:
                drop(GUARD, r.target, problem)
    for group, name in learned_imports(records):
        profile.add("imports", None, name, group=group)


def learned_imports(records: Sequence[Event]) -> list[tuple[str, str]]:
    """``(group, top-level name)`` for every import the program made, sorted by group."""
    import sys

    from pysb_guards.imports.guard import ALWAYS, DANGEROUS  # the guard's own lists (end of run)
    from pysb_guards.learned_fields import module_name_problem

    stdlib: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())
    names = sorted(
        {
            r.target.partition(".")[0]
            for r in records
            if r.guard == GUARD and r.action == "learn" and isinstance(r.target, str)
        }
    )
    out = []
    for name in names:
        if module_name_problem(name) is not None or name in ALWAYS:
            continue
        if name in DANGEROUS:
            group = "dangerous"
        elif name in stdlib:
            group = "standard library"
        else:
            group = "third party"
        out.append((group, name))
    order = {"standard library": 0, "third party": 1, "dangerous": 2}
    return sorted(out, key=lambda gn: (order[gn[0]], gn[1]))
