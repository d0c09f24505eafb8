"""The network guard's parent-side hooks: the launch plan, ``pysb check``, learned rules.

This module is the ``network`` entry point of the ``pysb.guards`` group. It is imported by
every ``pysb run`` on the host, so it stays light (no ``socket``, no ``ipaddress``, no
:mod:`pysb_core.netrules`): the guard itself lives in :mod:`pysb_guards.network`, which only
the sandboxed interpreter imports (``PYSB_CHILD_MODULE``).
"""

from __future__ import annotations

from pysb_core.markers import hookimpl

TYPE_CHECKING = False  # typing costs milliseconds at every start
if TYPE_CHECKING:
    from collections.abc import Sequence

    from pysb_core.check import CheckReport
    from pysb_core.events import Event
    from pysb_core.learning import LearnedProfile
    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import Policy
    from pysb_core.provider import Provider

GUARD = "network"
#: The module the sandboxed interpreter imports to install this family's guard.
PYSB_CHILD_MODULE = "pysb_guards.network"


@hookimpl
def pysb_contribute(policy: Policy, plan: LaunchPlan) -> None:
    """Without the Python guards the interpreter still answers pinned names from the pins
    (SPEC §6): ask the bootstrap to install the resolver part alone
    (:func:`pysb_guards.network.pin_resolver`)."""
    if policy.python_guards or not policy.pins:
        return
    from pysb_core.plan import ChildSetup

    pins = {name: list(addresses) for name, addresses in policy.pins.items()}
    plan.add_child_setup(ChildSetup(PYSB_CHILD_MODULE, "pin_resolver", {"pins": pins}))


@hookimpl
def pysb_check(policy: Policy, provider: Provider | None, report: CheckReport) -> None:
    """Each network rule is enforced by this (Python) layer.

    The ``os`` layer of the same rule is reported by the core's OS-layer plugin from the
    provider's capabilities (``tcp-host``/``udp-host`` for any rule of that protocol, the port
    capabilities only for rules on every address); reports of one rule merge, so the text
    here must be the core's: ``network: RULE``.
    """
    for rule in policy.network:
        report.add(f"network: {rule}", rule.source, ["python"], family=GUARD)
    for name, addresses in sorted(policy.pins.items()):
        report.note(f"network: {name} pinned to {', '.join(addresses)}")


@hookimpl
def pysb_learned(records: Sequence[Event], profile: LearnedProfile) -> None:
    """Render learned connections and binds as ``network:`` rules (ports merged per host),
    and Unix socket paths as the read-write exposure of their directory."""
    import os.path

    for line in learned_rules(records):
        profile.add("network", None, line)
    for event in records:
        if event.guard == GUARD and event.action == "learn" and event.data.get("kind") == "unix":
            directory = os.path.dirname(str(event.data["path"]))
            form = getattr(profile, "path_form", None)
            profile.add("files", "expose-rw", form(directory) if form else directory)


def learned_rules(records: Sequence[Event]) -> list[str]:
    """The rule lines for the learned network accesses, in a stable order."""
    ports: dict[tuple[str, str, str], set[int]] = {}
    for event in records:
        if event.guard != GUARD or event.action != "learn" or event.data.get("kind") != "inet":
            continue
        data = event.data
        key = (str(data["proto"]), str(data["host"]), str(data["direction"]))
        ports.setdefault(key, set()).add(int(data["port"]))
    lines = []
    for (proto, host, direction), found in sorted(ports.items()):
        listed = ",".join(str(p) for p in sorted(found))
        lines.append(f"allow {proto} {host} {listed} {direction}")
    return lines
