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

from pysb_core.policy import NetworkRule, Policy


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


def _is_host_loopback(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    """A network meaning the host's loopback: 127/8 (the SPEC's loopback) or slirp's alias."""
    return net.version == 4 and (net.subnet_of(_LOOPBACK4) or net == HOST_LOOPBACK)


class _Chains:
    """The statements of the two filter chains and the NAT chain, built rule by rule."""

    def __init__(self, pins: dict[str, tuple[str, ...]]) -> None:
        self.pins = pins
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
        if loop or (deny and any(n.version == 4 and HOST_LOOPBACK.subnet_of(n) for n in other)):
            self.hostlo.append(f"{match}{verdict}{comment}")
        local = [n for n in loop if n.subnet_of(_LOOPBACK4)]
        if local and not deny:
            self.dnat += [
                f"{d}{match}dnat to {HOST_LOOPBACK.network_address}{comment}" for d in _daddr(local)
            ]


def rule_lines(rule: NetworkRule, pins: dict[str, tuple[str, ...]]) -> list[str]:
    """The main-chain nft statements of one outbound rule (none for an ``in`` rule)."""
    chains = _Chains(pins)
    chains.add(rule)
    return chains.main


def needs_nat(policy: Policy) -> bool:
    """True when an allow rule names the host's loopback (127.0.0.0/8)."""
    chains = _Chains(policy.pins)
    for rule in policy.network:
        chains.add(rule)
    return bool(chains.dnat)


def ruleset(policy: Policy) -> str:
    """The complete ``nft -f`` input for the guest.

    ``10.0.2.2`` is slirp's gateway *and the host's loopback*: it is reachable only through
    rules on the loopback (127.0.0.0/8, NATed to it, as SPEC §4 wants the host's loopback
    on every provider) or naming it exactly, never through ``*`` or a wide CIDR.
    """
    chains = _Chains(policy.pins)
    for rule in [r for r in policy.network if r.action == "deny"]:
        chains.add(rule)
    for rule in [r for r in policy.network if r.action == "allow"]:
        chains.add(rule)
    lines = [
        "flush ruleset",
        "table inet pysb {",
        "  chain pysb_refuse {",
        "    meta l4proto tcp reject with tcp reset",
        "    reject with icmpx type admin-prohibited",
        "  }",
        "  chain pysb_hostlo {",
        *(f"    {line}" for line in chains.hostlo),
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
    if chains.dnat:
        lines += [
            "table ip pysb_nat {",
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


def inbound_rules(policy: Policy) -> list[NetworkRule]:
    """Allow rules for inbound traffic, which this provider does not forward (reported)."""
    return [r for r in policy.network if r.action == "allow" and r.direction in ("in", "any")]
