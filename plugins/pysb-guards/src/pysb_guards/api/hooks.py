"""The API guard's parent-side hooks: profile validation, ``pysb check``, learned rules.

This module is the ``api`` entry point of the ``pysb.guards`` group. It is imported by
every ``pysb run`` on the host, so it stays light: the registry of sensitive functions
(:mod:`pysb_guards.registry`) is read only when a profile names ``api`` targets or a
learning run ends, and the guard itself lives in :mod:`pysb_guards.api.guard`, which only the
sandboxed interpreter imports (``PYSB_CHILD_MODULE``).
"""

from __future__ import annotations

from pysb_core.guardkit import hookimpl

TYPE_CHECKING = False  # typing costs milliseconds at every start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from pysb_core.guardkit import CheckReport, Event, Policy, ProfileSchema, Provider

GUARD = "api"
#: The module the sandboxed interpreter imports to install this family's guard.
PYSB_CHILD_MODULE = "pysb_guards.api.guard"
#: The guard kit this family is written against (:mod:`pysb_core.kitversion`).
PYSB_GUARDKIT = "1.2"


@hookimpl
def pysb_add_profile_keys(schema: ProfileSchema) -> None:
    """Reject ``api`` targets that are not in the registry: a typo must not leave a hole."""
    schema.add_validator("api", validate_api_section)


def validate_api_section(value: Any, location: str) -> list[str]:
    """One message per unknown target (with a "did you mean" hint)."""
    if not isinstance(value, dict):
        return []
    from pysb_guards import registry

    valid = registry.targets()
    messages = []
    for key in ("allow", "deny"):
        items = value.get(key) or []
        if isinstance(items, str):
            items = [items]
        if not isinstance(items, list):
            continue
        for item in items:
            target = str(item).strip()
            if target in valid:
                continue
            where = getattr(item, "location", None) or location
            messages.append(
                f"{where}: api: unknown target '{target}'{_did_you_mean(target, valid)}; "
                "a target is '*', a category "
                f"({', '.join(registry.CATEGORIES)}) or a function of the registry "
                "(docs/api-registry.md)"
            )
    return messages


def _did_you_mean(word: str, choices: frozenset[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


@hookimpl
def pysb_check(policy: Policy, provider: Provider | None, report: CheckReport) -> None:
    """API rules are a Python-layer rule only."""
    for rule in policy.api:
        report.add(f"api: {rule.action}: {rule.target}", rule.source, ["python"], family=GUARD)
    if not policy.api:
        report.add(
            "api: (none: every registered function denied)", "<default>", ["python"], family=GUARD
        )
    for note in python_layer_limits(policy):
        report.note(note)


def python_layer_limits(policy: Policy) -> list[str]:
    """What the profile grants that the Python layer cannot hold against the program
    (docs/security.md, "Outside review"): said by ``pysb check``, never silently."""
    imports = set(policy.imports or ())
    star = "*" in imports
    notes = []
    if (star or imports & {"ctypes", "_ctypes"}) and not _native_allowed(policy):
        notes.append(
            "imports allow ctypes while `native` is denied: ctypes' own types (a Union of "
            "c_void_p and a POINTER, c_char_p(address)) read and write any address without a "
            "call the Python layer sees, so it holds `native` only against programs that do "
            "not use ctypes; an OS provider still confines the process"
        )
    return notes


@hookimpl
def pysb_learned(records: Sequence[Event], profile: Any) -> None:
    """A whole category when every applicable function of it was used, else each one."""
    for value, comment in learned_api(records):
        profile.add("api", "allow", value, comment)


def learned_api(records: Sequence[Event]) -> list[tuple[str, str | None]]:
    from pysb_guards import registry

    used: dict[str, set[str]] = {}
    for r in records:
        if r.guard != GUARD or r.action != "learn":
            continue
        entry = registry.BY_NAME.get(r.target)
        if entry is None:
            continue
        used.setdefault(entry.category, set()).add(entry.group)
    out: list[tuple[str, str | None]] = []
    for category, groups in used.items():
        every = {e.group for e in registry.applicable() if e.category == category}
        warn = "⚠ " if category in registry.DANGEROUS_CATEGORIES else ""
        comment = f"{warn}{category}: {registry.CATEGORIES[category]}"
        if every and every <= groups:
            out.append((category, comment))
        else:
            out += [(name, comment) for name in sorted(groups)]
    return out


def _native_allowed(policy: Policy) -> bool:
    """True when the rules allow ``native`` (what decides ``_ctypes.dlopen``)."""
    if not policy.api:
        return False
    from pysb_guards import registry

    verdicts = registry.resolve([(r.action, r.target) for r in policy.api])
    return verdicts.get("_ctypes.dlopen", False)
