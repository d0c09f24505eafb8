"""The host side of the ``signals`` guard family: the profile section, what pysb check
reports, and the rules a learning run writes. pysb never imports the guard itself here."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any

from pysb_core.guardkit import CheckReport, Event, LearnedProfile, Policy, ProfileSchema, hookimpl

#: The guard kit this module is written for (pysb refuses it if it offers another).
PYSB_GUARDKIT = "1.0"
#: The module pysb's bootstrap imports inside the sandbox to install this family.
PYSB_CHILD_MODULE = "pysb_signals.guard"

FAMILY = "signals"


def validate(value: Any, location: str) -> list[str]:
    """``signals:`` is a list of signal names (``SIGINT``, ``SIGTERM``, ...)."""
    if not isinstance(value, list):
        return [f"signals: expected a list of signal names, got {value!r}"]
    known = {s.name for s in signal.Signals}
    return [f"signals: unknown signal {name!r}" for name in value if name not in known]


@hookimpl
def pysb_add_profile_keys(schema: ProfileSchema) -> None:
    schema.add_validator(FAMILY, validate)


@hookimpl
def pysb_check(policy: Policy, report: CheckReport) -> None:
    names = policy.extra.get(FAMILY)
    if names is not None:
        rule = f"signals: [{', '.join(names)}]"
        report.add(rule, policy.profile_path or "profile", ["python"], family=FAMILY)


@hookimpl
def pysb_learned(records: Sequence[Event], profile: LearnedProfile) -> None:
    for event in records:
        if event.guard == FAMILY:
            profile.add(FAMILY, None, event.target, "a handler the program installed")
