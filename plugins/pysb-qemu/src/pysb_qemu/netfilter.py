"""The nftables ruleset loaded inside the guest before the program, from the policy's rules.

The guest reaches the outside only through QEMU's user-mode network (slirp), so filtering
its one interface's *output* is enough: slirp forwards nothing inbound unless asked to, and
the replies of an allowed outbound connection match the same rule. A ``deny`` rule is
emitted before every ``allow`` (deny beats allow, whatever the order); everything else is
refused with a TCP reset or an ICMP error, so a refused connect fails fast with
``ECONNREFUSED`` instead of hanging.

slirp's gateway 10.0.2.2 is the host's loopback. It has its own chain: only rules on the
loopback reach it (``allow tcp 127.0.0.1 8000 out`` is NATed from the guest's 127.0.0.1 to
10.0.2.2, so the program reaches the host's service as on every provider), never ``*``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from pysb_core.providerkit import NetworkRule, Policy


class UnsupportedRuleError(ValueError):
    """A rule this filter cannot express (the provider refuses to start: fail closed)."""


def _ports(rule: NetworkRule) -> str:
    parts = []
    for p in rule.ports:
        if p.low == 0 and p.high == 65535:
            return ""
        parts.append(str(p.low) if p.low == p.high else f"{p.low}-{p.high}")
    return f"th dport {{ {', '.join(parts)} }} " if parts else ""


def _protocols(rule: NetworkRule) -> str:
    protos = sorted(set(rule.protocols) & {"tcp", "udp"})
    if not protos:
        raise UnsupportedRuleError(f"unsupported protocol in rule '{rule}'")
    return f"meta l4proto {{ {', '.join(protos)} }} "


def _addresses(rule: NetworkRule, pins: dict[str, tuple[str, ...]]) -> list[str] | None:
    """The destination networks of a rule; ``None`` means any address."""
    if rule.network in ("*", "any"):
        return None
    if rule.is_host:
        return list(pins.get(rule.network, ()))
    return [rule.network]


#: slirp's name for the host's 127.0.0.1. Reachable only through rules on the loopback.
HOST_LOOPBACK = ipaddress.ip_network("10.0.2.2/32")
_LOOPBACK4 = ipaddress.ip_network("127.0.0.0/8")


def _networks(texts: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    out: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for text in texts:
        net = ipaddress.ip_network(text, strict=False)
        if isinstance(net, ipaddress.IPv6Network) and net.network_address.ipv4_mapped:
            mapped = net.network_address.ipv4_mapped
            net = ipaddress.ip_network(f"{mapped}/{max(net.prefixlen - 96, 0)}", strict=False)
        out.append(net)
    return out


def _daddr(nets: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> list[str]:
    v4 = sorted({str(n) for n in nets if n.version == 4})
    v6 = sorted({str(n) for n in nets if n.version == 6})
    out = []
    if v4:
        out.append(f"ip daddr {{ {', '.join(v4)} }} ")
    if v6:
        out.append(f"ip6 daddr {{ {', '.join(v6)} }} ")
    return out


Net = ipaddress.IPv4Network | ipaddress.IPv6Network


def _within(inner: Net, outer: Net) -> bool:
    """``inner.subnet_of(outer)`` for IPv4 networks; False for anything else."""
    if isinstance(inner, ipaddress.IPv4Network) and isinstance(outer, ipaddress.IPv4Network):
        return inner.subnet_of(outer)
    return False


def _is_host_loopback(net: Net) -> bool:
    """A network meaning the host's loopback: 127/8 (the SPEC's loopback) or slirp's alias."""
    return _within(net, _LOOPBACK4) or net == HOST_LOOPBACK


class _Chains:
    """The statements of the two filter chains and the NAT chain, built rule by rule."""

    def __init__(
        self, pins: dict[str, tuple[str, ...]], own_ephemeral: tuple[int, int] | None = None
    ) -> None:
        self.pins = pins
        #: The ephemeral range when an ``in`` rule serves it (the program's own servers on
        #: port 0): loopback ``out`` rules within it stay in the guest (not NATed to the host).
        self.own_ephemeral = own_ephemeral
        self.main: list[str] = []
        self.hostlo: list[str] = []
        self.dnat: list[str] = []

    def add(self, rule: NetworkRule) -> None:
        if rule.direction == "in":
            return
        deny = rule.action == "deny"
        verdict = "jump pysb_refuse" if deny else "accept"
        match = _protocols(rule) + _ports(rule)
        comment = f"  # {rule}"
        texts = _addresses(rule, self.pins)
        if texts is None:
            self.main.append(f"{match}{verdict}{comment}")
            if deny:
                self.hostlo.append(f"{match}{verdict}{comment}")
            return
        nets = _networks(texts)
        loop = [n for n in nets if _is_host_loopback(n)]
        other = [n for n in nets if not _is_host_loopback(n)]
        self.main += [f"{d}{match}{verdict}{comment}" for d in _daddr(other)]
        covers_alias = any(_within(HOST_LOOPBACK, n) for n in other)
        if loop or (deny and covers_alias):
            self.hostlo.append(f"{match}{verdict}{comment}")
        local = [n for n in loop if _within(n, _LOOPBACK4)]
        own = self.own_ephemeral
        if own is not None and all(own[0] <= p.low and p.high <= own[1] for p in rule.ports):
            local = []  # the guest's own servers on ephemeral ports: `oif "lo" accept`
        if local and not deny:
            self.dnat += [
                f"{d}{match}dnat to {HOST_LOOPBACK.network_address}{comment}" for d in _daddr(local)
            ]


#: The ephemeral port range of the guest's kernel (Linux's default ``ip_local_port_range``).
GUEST_EPHEMERAL = (32768, 60999)


def own_ephemeral(policy: Policy) -> tuple[int, int] | None:
    """The guest's ephemeral range when an ``in`` rule covers it all: what learning writes for
    a bind to port 0 (docs/learning.md). Servers there are reached from inside the guest only
    (the host cannot know the port: nothing is forwarded)."""
    low, high = GUEST_EPHEMERAL
    for rule in policy.network:
        if rule.action != "allow" or rule.direction not in ("in", "any"):
            continue
        if any(p.low <= low and high <= p.high for p in rule.ports) and not any(
            p.low == 0 and p.high == 65535 for p in rule.ports
        ):
            return GUEST_EPHEMERAL
    return None


def needs_nat(policy: Policy) -> bool:
    """True when a rule allows the host's loopback (127.0.0.0/8) or forwards a port in."""
    chains = _Chains(policy.pins, own_ephemeral(policy))
    for rule in policy.network:
        chains.add(rule)
    return bool(chains.dnat) or bool(inbound_ports(policy)[0])


def _inbound_lines(forwarded: list[tuple[str, int]]) -> tuple[list[str], list[str]]:
    """(replies accepted towards slirp, prerouting DNAT to the guest's loopback)."""
    replies, dnat = [], []
    for proto in ("tcp", "udp"):
        ports = sorted({p for pr, p in forwarded if pr == proto})
        if ports:
            listed = ", ".join(str(p) for p in ports)
            replies.append(f"meta l4proto {proto} th sport {{ {listed} }} accept  # in rules")
            dnat.append(
                f'iifname "eth0" meta l4proto {proto} th dport {{ {listed} }} dnat to 127.0.0.1'
            )
    return replies, dnat


def ruleset(policy: Policy) -> str:
    """The complete ``nft -f`` input for the guest.

    ``10.0.2.2`` is slirp's gateway *and the host's loopback*: it is reachable only through
    rules on the loopback (127.0.0.0/8, NATed to it, as SPEC §4 wants the host's loopback
    on every provider) or naming it exactly, never through ``*`` or a wide CIDR.
    """
    chains = _Chains(policy.pins, own_ephemeral(policy))
    for rule in [r for r in policy.network if r.action == "deny"]:
        chains.add(rule)
    for rule in [r for r in policy.network if r.action == "allow"]:
        chains.add(rule)
    replies, dnat_in = _inbound_lines(inbound_ports(policy)[0])
    lines = [
        "flush ruleset",
        "table inet pysb {",
        "  chain pysb_refuse {",
        "    meta l4proto tcp reject with tcp reset",
        "    reject with icmpx type admin-prohibited",
        "  }",
        "  chain pysb_hostlo {",
        *(f"    {line}" for line in [*replies, *chains.hostlo]),
        "    jump pysb_refuse",
        "  }",
        "  chain output {",
        "    type filter hook output priority 0; policy drop;",
        '    oif "lo" accept',
        f"    ip daddr {HOST_LOOPBACK.network_address} jump pysb_hostlo",
        *(f"    {line}" for line in chains.main),
        "    jump pysb_refuse",
        "  }",
        "}",
    ]
    if chains.dnat or dnat_in:
        lines += [
            "table ip pysb_nat {",
            "  chain prerouting {",
            "    type nat hook prerouting priority -100; policy accept;",
            *(f"    {line}" for line in dnat_in),
            "  }",
            "  chain output {",
            "    type nat hook output priority -100; policy accept;",
            *(f"    {line}" for line in chains.dnat),
            "  }",
            "  chain postrouting {",
            "    type nat hook postrouting priority 100; policy accept;",
            '    oifname "eth0" ip saddr 127.0.0.0/8 masquerade',
            "  }",
            "}",
        ]
    return "\n".join([*lines, ""])


#: Inbound rules forward at most this many ports (one QEMU ``hostfwd`` each).
MAX_FORWARDED_PORTS = 64


def inbound_ports(policy: Policy) -> tuple[list[tuple[str, int]], list[str]]:
    """``(forwarded, problems)``: the (protocol, port) pairs that ``in`` rules open.

    SPEC §4: ``allow tcp 127.0.0.1 P in`` lets the host's ``127.0.0.1:P`` reach a server
    bound inside on port P. QEMU forwards the host's loopback port (never another host
    interface) to the guest, which NATs it to its own 127.0.0.1. A rule on ``*`` forwards
    the same way; rules on other addresses cannot be honoured (nothing else reaches the
    VM) and are reported. A matching ``in`` deny removes the port.
    """
    forwarded: list[tuple[str, int]] = []
    problems: list[str] = []
    for rule in policy.network:
        # Only explicit ``in`` rules: forwarding every port of an ``any`` rule would make
        # QEMU bind host ports nobody asked for.
        if rule.action != "allow" or rule.direction != "in":
            continue
        texts = _addresses(rule, policy.pins)
        if texts is not None and not all(_is_host_loopback(n) for n in _networks(texts)):
            problems.append(f"inbound rule '{rule}' is not forwarded (only loopback or *)")
            continue
        if own_ephemeral(policy) and all(
            GUEST_EPHEMERAL[0] <= r.low and r.high <= GUEST_EPHEMERAL[1] for r in rule.ports
        ):
            problems.append(
                f"inbound rule '{rule}' covers the ephemeral ports (a bind to port 0): "
                "reached from inside the sandbox only, no port of the host is forwarded"
            )
            continue
        ports = [p for r in rule.ports for p in range(max(r.low, 1), r.high + 1)]
        if len(ports) > MAX_FORWARDED_PORTS:
            problems.append(f"inbound rule '{rule}' opens too many ports to forward")
            continue
        for proto in sorted(set(rule.protocols) & {"tcp", "udp"}):
            for port in ports:
                if not _denied_inbound(policy, proto, port) and (proto, port) not in forwarded:
                    forwarded.append((proto, port))
    return forwarded, problems


def _denied_inbound(policy: Policy, proto: str, port: int) -> bool:
    return any(
        r.action == "deny"
        and r.direction in ("in", "any")
        and proto in r.protocols
        and any(port in p for p in r.ports)
        for r in policy.network
    )
