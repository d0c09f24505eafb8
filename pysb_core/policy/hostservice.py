"""A service on the host's loopback that a plugin runs for the sandbox.

Why its own record: the sandbox reaches such a service through a network rule that the
plugin, not the user, wrote, and that rule must say where it came from wherever pysb
shows it (``pysb check``, a refusal) and be enforced by every layer exactly like the
user's. :func:`service_rules` is the one place that turns services into rules.
"""

from __future__ import annotations

from pysb_core._startup.records import Record, record

TYPE_CHECKING = False  # imported by `pysb run` when a plugin offers a service
if TYPE_CHECKING:
    from collections.abc import Iterable

    from pysb_core.policy import NetworkRule

#: The host's loopback address the rules name: every provider forwards it (SPEC §4).
LOOPBACK = "127.0.0.1"


@record
class HostService(Record):
    """``name`` serves TCP on the host's ``127.0.0.1:port`` for the sandbox.

    ``name`` is shown as the rule's source (``<pysb-proxy>``); ``purpose`` is one line for
    ``pysb check``. ``withhold_env`` names variables the service uses on the sandbox's
    behalf (a secret it adds to requests): they are removed from the sandbox's
    environment, whatever ``env`` forwards.
    """

    name: str
    port: int
    purpose: str = ""
    withhold_env: tuple[str, ...] = ()


def service_rules(services: Iterable[HostService]) -> tuple[NetworkRule, ...]:
    """One ``allow tcp 127.0.0.1 PORT out`` rule per service, sourced by its name.

    A port outside 1-65535 or a name that is not a plain word is a plugin's bug: it raises
    ``ValueError`` (the run then stops with the plugin named, exit 125).
    """
    from pysb_core.policy import NetworkRule, PortRange

    rules = []
    for service in services:
        if not isinstance(service, HostService):
            raise ValueError(
                f"pysb_host_services returned {type(service).__name__}, not HostService"
            )
        port = service.port
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise ValueError(f"host service {service.name!r}: port {port!r} is not 1-65535")
        if not service.name or not all(c.isalnum() or c in "-_." for c in service.name):
            raise ValueError(f"host service name {service.name!r} is not a plain word")
        text = f"allow tcp {LOOPBACK} {port} out"
        rules.append(
            NetworkRule(
                action="allow",
                protocols=("tcp",),
                network=LOOPBACK,
                ports=(PortRange(port, port),),
                direction="out",
                source=f"<{service.name}>",
                text=text,
            )
        )
    return tuple(rules)


def service_ports(rules: Iterable[NetworkRule]) -> set[int]:
    """The ports of the rules :func:`service_rules` made (found by their exact shape)."""
    return {
        rule.ports[0].low
        for rule in rules
        if rule.network == LOOPBACK
        and rule.source.startswith("<")
        and rule.source.endswith(">")
        and rule.source != "<cli>"
        and rule.text == f"allow tcp {LOOPBACK} {rule.ports[0].low} out"
        and len(rule.ports) == 1
        and rule.ports[0].low == rule.ports[0].high
    }
