"""The network guard's parent-side hooks: the launch plan, ``pysb check``, learned rules.

This module is the ``network`` entry point of the ``pysb.guards`` group. It is imported by
every ``pysb run`` on the host, so it stays light (no ``socket``, no ``ipaddress``, no
:mod:`pysb_core.policy.netrules`): the guard itself lives in :mod:`pysb_guards.network.guard`, which
only
the sandboxed interpreter imports (``PYSB_CHILD_MODULE``).
"""

from __future__ import annotations

from pysb_core.guardkit import hookimpl

TYPE_CHECKING = False  # typing costs milliseconds at every start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from pysb_core.guardkit import CheckReport, Event, LaunchPlan, LearnedProfile, Policy, Provider

GUARD = "network"
#: The module the sandboxed interpreter imports to install this family's guard.
PYSB_CHILD_MODULE = "pysb_guards.network.guard"
#: The guard kit this family is written against (:mod:`pysb_core.kitversion`).
PYSB_GUARDKIT = "1.2"


@hookimpl
def pysb_contribute(policy: Policy, plan: LaunchPlan) -> None:
    """Without the Python guards the interpreter still answers pinned names from the pins
    (SPEC §6): ask the bootstrap to install the resolver part alone
    (:func:`pysb_guards.network.guard.pin_resolver`)."""
    if policy.python_guards or not policy.pins:
        return
    from pysb_core.guardkit import ChildSetup

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

    from pysb_guards.learned_fields import path_problem

    drop = getattr(profile, "drop", None)
    for line in learned_rules(records, drop=drop):
        profile.add("network", None, line)
    for event in records:
        if event.guard == GUARD and event.action == "learn" and event.data.get("kind") == "unix":
            problem = path_problem(event.data.get("path"))
            if problem is not None:
                if drop is not None:
                    drop(GUARD, event.data.get("path"), problem)
                continue
            directory = os.path.dirname(str(event.data["path"]))
            form = getattr(profile, "path_form", None)
            profile.add("files", "expose-rw", form(directory) if form else directory)


def learned_rules(
    records: Sequence[Event], ephemeral: tuple[int, int] | None = None, drop: Any = None
) -> list[str]:
    """The rule lines for the learned network accesses, in a stable order.

    A bind to port 0 gets whatever port the kernel picks, a different one each run: it is
    learned as the ephemeral range (``ip_local_port_range``), never as port 0. So is a
    connection to an ephemeral port one of the program's own servers listened on (the
    guard records the port at ``listen``): the next run's server will not get that port.
    A record whose fields are not one protocol, one host, one port and one direction (a
    host ``*`` would allow every address) is skipped, and ``drop(family, what, why)`` told.
    """
    inet = [
        e.data
        for e in records
        if e.guard == GUARD
        and e.action == "learn"
        and e.data.get("kind") in ("inet", "own")
        and _usable(e.data, drop)
    ]
    own_records = [d for d in inet if d.get("kind") == "own"]
    inet = [d for d in inet if d.get("kind") == "inet"]
    if ephemeral is None:
        from pysb_core.guardkit import ephemeral_ports

        ephemeral = ephemeral_ports()
    low, high = ephemeral
    own = {(str(d["proto"]), int(d["port"])) for d in own_records}  # the program's servers
    ports: dict[tuple[str, str, str], set[int | str]] = {}
    for data in inet:
        proto, host, direction = str(data["proto"]), str(data["host"]), str(data["direction"])
        number = int(data["port"])
        own_server = direction == "in" and number == 0
        talks_to_itself = direction == "out" and (proto, number) in own and low <= number <= high
        port: int | str = f"{low}-{high}" if own_server or talks_to_itself else number
        ports.setdefault((proto, host, direction), set()).add(port)
    lines = []
    for (proto, host, direction), found in sorted(ports.items()):
        ranges = {p for p in found if isinstance(p, str)}
        singles = sorted(
            p for p in found if isinstance(p, int) and not _inside(p, low, high, ranges)
        )
        listed = ",".join([*(str(p) for p in singles), *sorted(ranges)])
        lines.append(f"allow {proto} {host} {listed} {direction}")
    return lines


def _usable(data: dict, drop: Any) -> bool:
    """Whether one ``inet`` / ``own`` record holds a protocol, a host, a port, a direction."""
    from pysb_guards.learned_fields import host_problem, port_problem

    problem = None
    if data.get("proto") not in ("tcp", "udp"):
        problem = "not a protocol (tcp or udp)"
    elif port_problem(data.get("port")) is not None:
        problem = "not a port"
    elif data.get("kind") == "inet":
        if data.get("direction") not in ("in", "out"):
            problem = "not a direction (in or out)"
        else:
            problem = host_problem(data.get("host"))
    if problem is not None and drop is not None:
        drop(GUARD, {k: data.get(k) for k in ("proto", "host", "port", "direction")}, problem)
    return problem is None


def _inside(port: int, low: int, high: int, ranges: set[str]) -> bool:
    return bool(ranges) and low <= port <= high
