"""Compile network rules and pinned host names into one nftables ruleset for a namespace.

The ruleset is loaded into the sandbox's own network namespace before the program starts, so
it is the kernel, not the Python layer, that refuses traffic. Shape (one ``inet`` table)::

    chain filter_out   output hook, priority -150: before NAT, so it judges the address the
                       program asked for (127.0.0.1, not the 10.0.2.2 it is rewritten to)
        established/related accept
        [DNS to the namespace resolver, only when a rule allows a wide network]
        user-mode network's own addresses (gateway = host loopback, resolver) reject
        every deny rule (reject), then every allow rule (accept)
        reject everything else (TCP reset / ICMP port unreachable: fails fast, no timeout)
    chain filter_in    input hook: established, loopback, then the ``in`` rules
    chain nat_out      127.0.0.1:P of an allowed rule -> host gateway (host loopback), slirp only
    chain nat_pre      forwarded inbound ports -> 127.0.0.1, so a server bound there is reached
    chain nat_post     masquerade what leaves the tap device from a loopback address

Denies come first whatever the line order (SPEC §4), IPv4-mapped IPv6 networks are judged as
IPv4, host names appear as their pinned addresses, and a host name with no pin allows
nothing. The compiler is pure (no OS access) so unit tests can check every line.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence

from pysb_core.netrules import canonical_ip, is_hostname, normalize_host
from pysb_core.policy import NetworkRule, PortRange
from pysb_core.records import Record, field, mutable_record, record

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

TABLE = "pysb"
TAP = "tap0"
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_LOOP4 = ipaddress.IPv4Network("127.0.0.0/8")
_HOST_LOOPBACK = ipaddress.ip_address("127.0.0.1")
#: Forwarding more ports than this (per protocol) from the host is refused with a note:
#: every forwarded port is a listening socket on the host.
MAX_FORWARDED_PORTS = 256
#: The ephemeral port range of a new network namespace (Linux's default
#: ``ip_local_port_range``): where the sandbox's binds to port 0 land.
NAMESPACE_EPHEMERAL = (32768, 60999)


@record
class UserNetLayout(Record):
    """Addresses of the user-mode network, as the namespace sees them.

    ``gateway`` reaches the host's loopback (slirp4netns maps it to 127.0.0.1 on the host);
    ``resolver`` answers DNS by asking the host's resolvers; ``subnet`` holds both and the
    namespace's own address ``guest``. ``host_loopback_nat`` is true when reaching the host's
    loopback is done by rewriting 127.0.0.1 to ``gateway`` inside the namespace (slirp4netns);
    false when the user-mode helper listens on the namespace's loopback itself (pasta ``-T``).
    """

    name: str = "slirp4netns"
    subnet: str = "10.0.2.0/24"
    gateway: str = "10.0.2.2"
    resolver: str = "10.0.2.3"
    guest: str = "10.0.2.100"
    host_loopback_nat: bool = True


SLIRP4NETNS = UserNetLayout()


@record
class Forward(Record):
    """One port the user-mode helper must forward (``proto``, ``port``)."""

    proto: str
    port: int


@mutable_record
class CompiledNetwork(Record):
    """The result of :func:`compile_network`: ruleset text plus what the helper must do."""

    ruleset: str
    #: Ports of the host's loopback the namespace may reach (``allow ... 127.0.0.1 P out``).
    host_loopback: list[tuple[str, tuple[PortRange, ...]]] = field(default_factory=list)
    #: Host 127.0.0.1:P -> namespace P, for ``allow ... 127.0.0.1 P in`` rules.
    inbound: list[Forward] = field(default_factory=list)
    #: True when some rule allows a wide network, so names outside the pins may be resolved.
    dns: bool = False
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------
# Addresses and ports
# ---------------------------------------------------------------------------------------


def rule_networks(rule: NetworkRule, pins: Mapping[str, Sequence[str]]) -> list[IPNetwork]:
    """The networks a rule covers: ``*`` is everything, a name is its pinned addresses."""
    if rule.network == "*":
        return [ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")]
    if is_hostname(rule.network):
        raw = [str(canonical_ip(a)) for a in pins.get(normalize_host(rule.network), ())]
    else:
        raw = [rule.network]
    out: list[IPNetwork] = []
    for text in raw:
        net = ipaddress.ip_network(text, strict=False)
        if net.version == 6 and net.prefixlen >= 96 and net.subnet_of(_MAPPED):  # type: ignore[arg-type]
            net = ipaddress.IPv4Network((int(net.network_address) & 0xFFFFFFFF, net.prefixlen - 96))
        if net not in out:
            out.append(net)
    return out


def _is_all_ports(ports: Iterable[PortRange]) -> bool:
    return any(p.low == 0 and p.high == 65535 for p in ports)


def _port_set(ports: Sequence[PortRange]) -> str:
    items = [str(p.low) if p.low == p.high else f"{p.low}-{p.high}" for p in ports]
    return "{ " + ", ".join(items) + " }"


def _addr_set(nets: Sequence[IPNetwork]) -> str:
    return "{ " + ", ".join(str(n) for n in nets) + " }"


def _is_wide(rule: NetworkRule) -> bool:
    if rule.network == "*":
        return True
    if "/" not in rule.network:
        return False
    net = ipaddress.ip_network(rule.network, strict=False)
    return net.num_addresses > 1 and not _in_loopback(net)


def _covers(ports: Iterable[PortRange], span: tuple[int, int]) -> bool:
    return any(p.low <= span[0] and span[1] <= p.high for p in ports)


def _within(ports: Iterable[PortRange], span: tuple[int, int]) -> bool:
    return all(span[0] <= p.low and p.high <= span[1] for p in ports)


def _in_loopback(net: IPNetwork) -> bool:
    return isinstance(net, ipaddress.IPv4Network) and net.subnet_of(_LOOP4)


def _directions(rule: NetworkRule) -> tuple[str, ...]:
    return ("in", "out") if rule.direction == "any" else (rule.direction,)


# ---------------------------------------------------------------------------------------
# Statements
# ---------------------------------------------------------------------------------------


def _match_lines(
    rule: NetworkRule, nets: Sequence[IPNetwork], field_name: str, *, any_address: bool
) -> list[tuple[str, str | None]]:
    """The match part of one rule, one ``(line, protocol)`` per address family x protocol
    (protocol ``None``: every protocol)."""
    protos: list[str | None]
    all_ports = _is_all_ports(rule.ports)
    if all_ports and rule.action == "deny" and set(rule.protocols) == {"tcp", "udp"}:
        protos = [None]  # deny any: every protocol, ICMP included
    else:
        protos = list(rule.protocols)
    families: list[tuple[str, list[IPNetwork]] | None]
    if any_address:
        families = [None]
    else:
        v4: list[IPNetwork] = [n for n in nets if n.version == 4]
        v6: list[IPNetwork] = [n for n in nets if n.version == 6]
        families = [(fam, group) for fam, group in (("ip", v4), ("ip6", v6)) if group]
    lines: list[tuple[str, str | None]] = []
    for fam in families:
        addr = f"{fam[0]} {field_name} {_addr_set(fam[1])} " if fam else ""
        for proto in protos:
            if proto is None:
                lines.append((addr.rstrip() or "meta nfproto { ipv4, ipv6 }", None))
            elif all_ports:
                lines.append((f"{addr}meta l4proto {proto}", proto))
            else:
                lines.append((f"{addr}{proto} dport {_port_set(rule.ports)}", proto))
    return lines


def _statements(rule: NetworkRule, lines: list[tuple[str, str | None]]) -> list[str]:
    """Add the verdict and a comment naming the profile line to each match."""
    out = []
    for line, proto in lines:
        if rule.action == "allow":
            verdict = "accept"
        elif proto == "tcp":
            verdict = "reject with tcp reset"
        else:
            verdict = "reject"
        out.append(f"{line} {verdict} {_comment(rule)}")
    return out


def _comment(rule: NetworkRule) -> str:
    text = str(rule).replace('"', "'")
    return f'comment "{rule.source}: {text}"'[:250] if rule.source else f'comment "{text}"'


def _covers_everything(nets: Sequence[IPNetwork]) -> bool:
    return any(n.prefixlen == 0 for n in nets) and {n.version for n in nets} == {4, 6}


# ---------------------------------------------------------------------------------------
# The compiler
# ---------------------------------------------------------------------------------------


def compile_network(
    rules: Iterable[NetworkRule],
    pins: Mapping[str, Sequence[str]],
    layout: UserNetLayout = SLIRP4NETNS,
    ephemeral: tuple[int, int] = NAMESPACE_EPHEMERAL,
) -> CompiledNetwork:
    """Compile ``rules`` (with ``pins`` for host names) into a ruleset for ``layout``.

    The ephemeral port range (``ephemeral``) is the program's own when an ``in`` rule on a
    local address covers it (what learning writes for a bind to port 0, docs/learning.md):
    a server there is reached from inside the sandbox only (the host cannot know which
    port it got, so none is forwarded), and ``out`` rules to 127.0.0.1 that stay within
    that range reach those servers, not the host's loopback.
    """
    rules = tuple(rules)
    pins = {normalize_host(k): tuple(v) for k, v in pins.items()}
    result = CompiledNetwork(ruleset="")
    serves_ephemeral = any(
        r.action == "allow"
        and r.direction in ("in", "any")
        and not _is_all_ports(r.ports)
        and _covers(r.ports, ephemeral)
        for r in rules
    )
    out_deny: list[str] = []
    out_allow: list[str] = []
    in_deny: list[str] = []
    in_allow: list[str] = []
    lo_out_for_in: list[str] = []
    denied_in_ports: dict[str, set[int]] = {"tcp": set(), "udp": set()}
    wanted_in: dict[str, list[int]] = {"tcp": [], "udp": []}

    for rule in rules:
        nets = rule_networks(rule, pins)
        if not nets:
            result.notes.append(
                f"{rule.source}: rule '{rule}' names a host with no pinned address: "
                "it allows nothing"
            )
            continue
        everything = _covers_everything(nets)
        for direction in _directions(rule):
            if direction == "out":
                lines = _match_lines(rule, nets, "daddr", any_address=everything)
                target = out_deny if rule.action == "deny" else out_allow
                target.extend(_statements(rule, lines))
                own_servers = serves_ephemeral and _within(rule.ports, ephemeral)
                if rule.action == "allow" and any(_HOST_LOOPBACK in n for n in nets):
                    if own_servers:
                        result.notes.append(
                            f"{rule.source}: '{rule}' reaches the sandbox's own servers on "
                            "ephemeral ports, not the host's loopback"
                        )
                    else:
                        result.host_loopback.append((",".join(rule.protocols), rule.ports))
                if rule.action == "allow" and _is_wide(rule):
                    result.dns = True
            else:
                # ``in``: the network is the local address a server binds. Inside the
                # namespace every inbound connection arrives through the user-mode helper,
                # so the address only matters when it is not a wildcard or loopback.
                local_any = everything or all(
                    n.num_addresses > 2**24
                    or _in_loopback(n)
                    or n == ipaddress.ip_network("::1/128")
                    or n.prefixlen == 0
                    for n in nets
                )
                lines = _match_lines(rule, nets, "daddr", any_address=local_any)
                target = in_deny if rule.action == "deny" else in_allow
                target.extend(_statements(rule, lines))
                ephemeral_only = _covers(rule.ports, ephemeral) and not _is_all_ports(rule.ports)
                if local_any and ephemeral_only and rule.action == "allow":
                    result.notes.append(
                        f"{rule.source}: '{rule}' covers the ephemeral ports (a bind to port "
                        "0): reached from inside the sandbox only, no port of the host is "
                        "forwarded for it"
                    )
                elif local_any and not _is_all_ports(rule.ports):
                    for proto in rule.protocols:
                        ports = [p for r in rule.ports for p in range(r.low, r.high + 1)]
                        if rule.action == "deny":
                            denied_in_ports[proto].update(ports)
                        else:
                            wanted_in[proto].extend(ports)
                            lo_out_for_in.append(
                                f'oifname "lo" {proto} dport {_port_set(rule.ports)} accept '
                                f"{_comment(rule)}"
                            )
                elif local_any and rule.action == "allow":
                    result.notes.append(
                        f"{rule.source}: '{rule}' allows every port inbound: no port of the "
                        "host is forwarded for it (name the ports to forward them)"
                    )

    for proto in ("tcp", "udp"):
        ports = sorted(set(wanted_in[proto]) - denied_in_ports[proto])
        if len(ports) > MAX_FORWARDED_PORTS:
            result.notes.append(
                f"{len(ports)} inbound {proto} ports requested: only the first "
                f"{MAX_FORWARDED_PORTS} are forwarded from the host"
            )
            ports = ports[:MAX_FORWARDED_PORTS]
        result.inbound.extend(Forward(proto, p) for p in ports)

    # A deny rule that names port 53 explicitly means "no DNS", even to our resolver.
    dns_denied = any(
        r.action == "deny"
        and r.direction in ("out", "any")
        and not _is_all_ports(r.ports)
        and any(53 in p for p in r.ports)
        for r in rules
    )
    result.dns = result.dns and not dns_denied

    out: list[str] = ["ct state established,related accept"]
    if result.dns:
        out += [
            f'ip daddr {layout.resolver} udp dport 53 accept comment "namespace resolver"',
            f'ip daddr {layout.resolver} tcp dport 53 accept comment "namespace resolver"',
        ]
    out.append(
        f'ip daddr {layout.subnet} reject comment "user-mode network: use 127.0.0.1 for the host"'
    )
    out += out_deny + out_allow + lo_out_for_in
    out += ["meta l4proto tcp reject with tcp reset", "reject"]

    inn: list[str] = ["ct state established,related accept", 'iifname "lo" accept']
    inn += in_deny + in_allow
    inn += ["meta l4proto tcp reject with tcp reset", "reject"]

    body = [f"table inet {TABLE} {{"]
    body += _chain("filter_out", "filter", "output", -150, "drop", out)
    body += _chain("filter_in", "filter", "input", 0, "drop", inn)
    nat_out: list[str] = []
    if layout.host_loopback_nat:
        for protos, ranges in result.host_loopback:
            for proto in protos.split(","):
                match = "" if _is_all_ports(ranges) else f" dport {_port_set(ranges)}"
                m = f"{proto}{match}" if match else f"meta l4proto {proto}"
                nat_out.append(f"ip daddr 127.0.0.1 {m} dnat ip to {layout.gateway}")
    nat_pre = (
        [
            f'iifname "{TAP}" {fwd.proto} dport {fwd.port} dnat ip to 127.0.0.1'
            for fwd in result.inbound
        ]
        if layout.host_loopback_nat
        else []
    )
    if nat_out or nat_pre:
        body += _chain("nat_out", "nat", "output", -100, "accept", nat_out)
        body += _chain("nat_pre", "nat", "prerouting", -100, "accept", nat_pre)
        body += _chain(
            "nat_post",
            "nat",
            "postrouting",
            100,
            "accept",
            [f'oifname "{TAP}" ip saddr 127.0.0.0/8 masquerade'],
        )
    body.append("}")
    result.ruleset = "\n".join(body) + "\n"
    return result


def _chain(name: str, kind: str, hook: str, prio: int, policy: str, lines: list[str]) -> list[str]:
    head = f"  chain {name} {{\n    type {kind} hook {hook} priority {prio}; policy {policy};"
    return [head, *(f"    {ln}" for ln in lines), "  }"]
