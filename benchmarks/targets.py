"""The performance budget (ARCHITECTURE.md §Performance budget), as data for the report.

Each target is ``(operator, limit)`` on the figure the JSON stores: seconds, calls per
second, or a ratio to plain python. The reference's anchor figures (measured once on
this kind of machine, /work/shared/reference) are shown when the live reference run
could not produce a figure.
"""

from __future__ import annotations

Target = tuple[str, float]

#: `pysb run -c pass` over `python -c pass`, per provider (qemu has no budget).
STARTUP_RATIO: dict[str, Target] = {
    "subprocess": ("<=", 6.0),
    "landlock": ("<=", 8.0),
    "bwrap": ("<=", 8.0),
    "unshare": ("<=", 8.0),
    "firejail": ("<=", 8.0),
}

#: Issue 30's goals for the same ratio (stricter than the budget above; not met yet).
STARTUP_GOAL: dict[str, Target] = {
    "subprocess": ("<=", 3.0),
    "landlock": ("<=", 3.0),
    "bwrap": ("<=", 3.5),
    "unshare": ("<=", 3.5),
    "firejail": ("<=", 3.5),
}

#: Variants with a budget of their own (issue: unshare with network filtering <= 12x).
STARTUP_VARIANT_RATIO: dict[str, Target] = {
    "unshare/network-filtering": ("<=", 12.0),
}


def startup_target(name: str) -> Target | None:
    """The budget of a startup row: the variant's own, else its provider's."""
    if name in STARTUP_VARIANT_RATIO:
        return STARTUP_VARIANT_RATIO[name]
    if "/network-filtering" in name:
        return None  # no budget of its own (bwrap's filtering came with no target)
    return STARTUP_RATIO.get(name.partition("/")[0])


PARTIAL: dict[str, Target] = {
    "start_s": ("<=", 0.15),
    "stop_s": ("<=", 0.05),
    "p50_s": ("<=", 0.0001),
    "p99_s": ("<=", 0.0005),
    "calls_per_s_8_threads": (">=", 20000.0),
    "argument_10mib": ("<=", 0.05),
    "result_10mib": ("<=", 0.05),
}

#: Guard overhead: sandboxed time per operation over plain python's.
GUARDS: dict[str, Target] = {
    "open": ("<=", 1.5),
    "import_module": ("<=", 1.5),
    "connect": ("<=", 1.2),
}

#: pysandboxes 0.7.0 as measured in the anchor run: startup medians in seconds.
ANCHOR_STARTUP_S = {
    "subprocess": 0.684,
    "landlock": 0.607,
    "firejail": 0.795,
    "unshare": 1.963,
    "bwrap": 0.652,
}


def met(target: Target | None, value: float | None) -> bool | None:
    """True/False when a target applies to a figure, None when there is nothing to judge."""
    if target is None or value is None:
        return None
    op, limit = target
    return value <= limit if op == "<=" else value >= limit
