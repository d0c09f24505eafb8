"""The decisions of the packet filter, before any back end's syntax.

:func:`plan_filter` reads the rules and the pins once and says, for a :class:`FilterTarget`,
which statements go in which chain, which ports the helper forwards, whether the sandbox
may ask the helper's resolver, and what the user should be told. The nftables and
iptables back ends (:mod:`~pysb_core.net.netfilter.nft`, :mod:`~pysb_core.net.netfilter.iptables`)
only write these decisions down, so they cannot disagree with each other, and every
provider (unshare, bwrap, qemu, firejail) gets the same decisions for its target.

Semantics (SPEC §4): denies come before allows whatever the line order, IPv4-mapped IPv6
networks are judged as IPv4, host names appear as their pinned addresses, and a host name
with no pin allows nothing. Pure: no OS access, so unit tests can check every decision.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence

from pysb_core._startup.records import Record, field, mutable_record, record
from pysb_core.net.netfilter.target import FilterTarget
from pysb_core.policy import NetworkRule, PortRange
from pysb_core.policy.netmatch import bind_scope
from pysb_core.policy.netrules import normalize_host, rule_networks

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_LOOP4 = ipaddress.IPv4Network("127.0.0.0/8")
_LOOP6 = ipaddress.IPv6Network("::1/128")
_HOST_LOOPBACK = ipaddress.ip_address("127.0.0.1")
#: Forwarding more ports than this (per protocol) from the host is refused with a note:
#: every forwarded port is a listening socket on the host.
MAX_FORWARDED_PORTS = 256
#: The ephemeral port range of a new network namespace or guest kernel (Linux's default
#: ``ip_local_port_range``): where the sandbox's binds to port 0 land.
NAMESPACE_EPHEMERAL = (32768, 60999)


@record
class Forward(Record):
    """One port the user-mode helper must forward (``proto``, ``port``)."""

    proto: str
    port: int


@record
class Match(Record):
    """One filter statement: what it matches, for the rule it comes from.

    ``networks`` empty means any address; ``protocols`` ``None`` means every protocol
    (ICMP too: a deny of ``any`` on every port); ``ports`` ``None`` means every port. The
    verdict follows from ``rule.action`` (allow: accept; deny: reject).
    """

    rule: NetworkRule
    networks: tuple[IPNetwork, ...]
    protocols: tuple[str, ...] | None
    ports: tuple[PortRange, ...] | None

    @property
    def accepts(self) -> bool:
        return self.rule.action == "allow"


@mutable_record
class FilterPlan(Record):
    """What the filter holds and what the helper must do (see :func:`plan_filter`)."""

    target: FilterTarget
    #: Outgoing statements: denies first, then allows (SPEC §4: deny beats allow).
    out_deny: list[Match] = field(default_factory=list)
    out_allow: list[Match] = field(default_factory=list)
    #: Incoming statements, judged by the local (destination) address and port.
    in_deny: list[Match] = field(default_factory=list)
    in_allow: list[Match] = field(default_factory=list)
    #: Loopback traffic the sandbox sends to its own forwarded servers (``oif lo``).
    loopback_out: list[Match] = field(default_factory=list)
    #: Ports of the host's loopback the sandbox may reach (``allow ... 127.0.0.1 P out``).
    host_loopback: list[tuple[str, tuple[PortRange, ...]]] = field(default_factory=list)
    #: Host 127.0.0.1:P -> sandbox P, for ``allow ... 127.0.0.1 P in`` rules.
    inbound: list[Forward] = field(default_factory=list)
    #: True when the sandbox may ask the helper's resolver (some rule allows a wide network).
    dns: bool = False
    notes: list[str] = field(default_factory=list)
    #: The ephemeral range when an ``in`` rule lets the program serve there: loopback traffic
    #: to it stays in the sandbox (its own servers), never NATed to the host's loopback.
    own_ephemeral: tuple[int, int] | None = None

    @property
    def nat(self) -> bool:
        """True when the filter rewrites addresses (host loopback or forwarded ports)."""
        return self.target.host_loopback_nat and bool(self.host_loopback or self.inbound)


# ---------------------------------------------------------------------------------------
# Addresses and ports
# ---------------------------------------------------------------------------------------


def is_all_ports(ports: Iterable[PortRange]) -> bool:
    return any(p.low == 0 and p.high == 65535 for p in ports)


def _covers(ports: Iterable[PortRange], span: tuple[int, int]) -> bool:
    return any(p.low <= span[0] and span[1] <= p.high for p in ports)


def keeps_own_servers(plan: FilterPlan, ports: Iterable[PortRange]) -> bool:
    """Whether the host-loopback NAT of ``ports`` (an entry of ``plan.host_loopback``)
    leaves out the program's own ephemeral range: only for a rule that covers all of it
    (a wide rule); the ports a rule names one by one are the host's."""
    own = plan.own_ephemeral
    return own is not None and _covers(ports, own)


def _binds_host_loopback(rule: NetworkRule, pins: Mapping[str, Sequence[str]]) -> bool:
    """An ``in`` rule under which a server can be bound where 127.0.0.1 reaches it."""
    local = rule_networks(rule.replace(network=bind_scope(rule.network)), pins)
    return any(_HOST_LOOPBACK in n for n in local)


def _within(ports: Iterable[PortRange], span: tuple[int, int]) -> bool:
    return all(span[0] <= p.low and p.high <= span[1] for p in ports)


def _in_loopback(net: IPNetwork) -> bool:
    return isinstance(net, ipaddress.IPv4Network) and net.subnet_of(_LOOP4)


def _is_wide(rule: NetworkRule) -> bool:
    """A network beyond one address and the loopback: names outside the pins may resolve."""
    if rule.network == "*":
        return True
    if "/" not in rule.network:
        return False
    net = ipaddress.ip_network(rule.network, strict=False)
    return net.num_addresses > 1 and not _in_loopback(net)


def _covers_everything(nets: Sequence[IPNetwork]) -> bool:
    return any(n.prefixlen == 0 for n in nets) and {n.version for n in nets} == {4, 6}


def _directions(rule: NetworkRule) -> tuple[str, ...]:
    return ("in", "out") if rule.direction == "any" else (rule.direction,)


def _networks(rule: NetworkRule, pins: Mapping[str, Sequence[str]]) -> list[IPNetwork]:
    """The rule's networks (:func:`pysb_core.policy.netrules.rule_networks`), each once."""
    out: list[IPNetwork] = []
    for net in rule_networks(rule, pins):
        if net not in out:
            out.append(net)
    return out


def _match(rule: NetworkRule, nets: Sequence[IPNetwork], *, any_address: bool) -> Match:
    all_ports = is_all_ports(rule.ports)
    every_protocol = all_ports and rule.action == "deny" and set(rule.protocols) == {"tcp", "udp"}
    return Match(
        rule=rule,
        networks=() if any_address else tuple(nets),
        protocols=None if every_protocol else tuple(rule.protocols),
        ports=None if all_ports else tuple(rule.ports),
    )


def _local_any(nets: Sequence[IPNetwork], target: FilterTarget) -> bool:
    """An ``in`` rule judged by its port alone.

    Behind a user-mode helper every inbound connection arrives through the helper, so the
    local address only matters when it is not a wildcard or loopback. On a bridge the
    address is real and always matters.
    """
    if _covers_everything(nets):
        return True
    if target.bridged:
        return False
    return all(
        n.num_addresses > 2**24 or _in_loopback(n) or n == _LOOP6 or n.prefixlen == 0 for n in nets
    )


# ---------------------------------------------------------------------------------------
# The planner
# ---------------------------------------------------------------------------------------


def plan_filter(
    rules: Iterable[NetworkRule],
    pins: Mapping[str, Sequence[str]],
    target: FilterTarget,
    ephemeral: tuple[int, int] = NAMESPACE_EPHEMERAL,
) -> FilterPlan:
    """Plan the filter of ``rules`` (with ``pins`` for host names) on ``target``.

    The ephemeral port range (``ephemeral``) is the program's own when an ``in`` rule on a
    local address covers it (what learning writes for a bind to port 0, docs/learning.md):
    a server there is reached from inside the sandbox only (the host cannot know which
    port it got, so none is forwarded), and ``out`` rules to 127.0.0.1 that stay within
    that range reach those servers, not the host's loopback.
    """
    rules = tuple(rules)
    pins = {normalize_host(k): tuple(v) for k, v in pins.items()}
    plan = FilterPlan(target=target)
    # A rule for every port counts too: `allow any 127.0.0.1 * any` lets the program serve
    # on port 0, and its own clients must reach that server, not the host's loopback. Only
    # a server the IPv4 loopback reaches counts: the host's loopback is reached as
    # 127.0.0.1, and a bind of ::1 port 0 (urllib3's IPv6 probe) serves nobody there.
    serves_ephemeral = any(
        r.action == "allow"
        and r.direction in ("in", "any")
        and _covers(r.ports, ephemeral)
        and _binds_host_loopback(r, pins)
        for r in rules
    )
    if serves_ephemeral:
        plan.own_ephemeral = ephemeral
    wanted_in: dict[str, list[int]] = {"tcp": [], "udp": []}
    denied_in: dict[str, set[int]] = {"tcp": set(), "udp": set()}
    for rule in rules:
        nets = _networks(rule, pins)
        if not nets:
            plan.notes.append(
                f"{rule.source}: rule '{rule}' names a host with no pinned address: "
                "it allows nothing"
            )
            continue
        for direction in _directions(rule):
            if direction == "out":
                _plan_out(plan, rule, nets, own_servers=serves_ephemeral, ephemeral=ephemeral)
            else:
                local = _networks(rule.replace(network=bind_scope(rule.network)), pins)
                _plan_in(plan, rule, local, ephemeral, wanted_in, denied_in)
    _plan_forwards(plan, wanted_in, denied_in)
    plan.dns = plan.dns and target.resolver is not None and not _dns_denied(rules)
    return plan


def _plan_out(
    plan: FilterPlan,
    rule: NetworkRule,
    nets: Sequence[IPNetwork],
    *,
    own_servers: bool,
    ephemeral: tuple[int, int],
) -> None:
    """An ``out`` rule: judged by the address the program asked for."""
    match = _match(rule, nets, any_address=_covers_everything(nets))
    (plan.out_allow if match.accepts else plan.out_deny).append(match)
    if rule.action != "allow":
        return
    if any(_HOST_LOOPBACK in n for n in nets):
        # Exactly the ephemeral range (what learning writes for a client of the program's
        # own port-0 server): the sandbox's own servers. Any other port, one inside that
        # range included, is a host service the rule names: it reaches the host whatever
        # the `in` rules say (issue 27: a host server on an ephemeral port was unreachable).
        if own_servers and _within(rule.ports, ephemeral) and _covers(rule.ports, ephemeral):
            plan.notes.append(
                f"{rule.source}: '{rule}' reaches the sandbox's own servers on "
                "ephemeral ports, not the host's loopback"
            )
        else:
            plan.host_loopback.append((",".join(rule.protocols), rule.ports))
            if own_servers and _covers(rule.ports, ephemeral):
                plan.notes.append(
                    f"{rule.source}: '{rule}' reaches the host's loopback outside the "
                    f"ephemeral ports {ephemeral[0]}-{ephemeral[1]}, which are the "
                    "sandbox's own servers"
                )
    if _is_wide(rule):
        plan.dns = True


def _plan_in(
    plan: FilterPlan,
    rule: NetworkRule,
    nets: Sequence[IPNetwork],
    ephemeral: tuple[int, int],
    wanted: dict[str, list[int]],
    denied: dict[str, set[int]],
) -> None:
    """An ``in`` rule: the network is the local address a server binds (``nets``), the
    wildcard address standing for every local one (:func:`~pysb_core.policy.netmatch.bind_scope`),
    so a server bound there gets the host's loopback forward of its ports."""
    local_any = _local_any(nets, plan.target)
    match = _match(rule, nets, any_address=local_any)
    (plan.in_allow if match.accepts else plan.in_deny).append(match)
    allow = rule.action == "allow"
    if plan.target.bridged:
        return  # nothing is forwarded: the bridge reaches the sandbox's addresses itself
    if not local_any:
        if allow:
            plan.notes.append(
                f"{rule.source}: '{rule}' names a local address other than the loopback: "
                "no port of the host is forwarded"
            )
        return
    if is_all_ports(rule.ports):
        if allow:
            plan.notes.append(
                f"{rule.source}: '{rule}' allows every port inbound: no port of the "
                "host is forwarded for it (name the ports to forward them)"
            )
        return
    if allow and _covers(rule.ports, ephemeral):
        plan.notes.append(
            f"{rule.source}: '{rule}' covers the ephemeral ports (a bind to port "
            "0): reached from inside the sandbox only, no port of the host is "
            "forwarded for it"
        )
        return
    ports = [p for r in rule.ports for p in range(max(r.low, 1), r.high + 1)]  # never port 0
    for proto in rule.protocols:
        if allow:
            wanted[proto].extend(ports)
        else:
            denied[proto].update(ports)
    if allow:
        plan.loopback_out.append(_match(rule, nets, any_address=True))


def _plan_forwards(
    plan: FilterPlan, wanted: dict[str, list[int]], denied: dict[str, set[int]]
) -> None:
    for proto in ("tcp", "udp"):
        ports = sorted(set(wanted[proto]) - denied[proto])
        if len(ports) > MAX_FORWARDED_PORTS:
            plan.notes.append(
                f"{len(ports)} inbound {proto} ports requested: only the first "
                f"{MAX_FORWARDED_PORTS} are forwarded from the host"
            )
            ports = ports[:MAX_FORWARDED_PORTS]
        plan.inbound.extend(Forward(proto, p) for p in ports)


def _dns_denied(rules: Sequence[NetworkRule]) -> bool:
    """A deny rule that names port 53 explicitly means "no DNS", even to our resolver."""
    return any(
        r.action == "deny"
        and r.direction in ("out", "any")
        and not is_all_ports(r.ports)
        and any(53 in p for p in r.ports)
        for r in rules
    )
