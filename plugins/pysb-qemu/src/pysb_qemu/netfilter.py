"""The nftables ruleset loaded inside the guest before the program, from the policy's rules.

The guest reaches the outside only through QEMU's user-mode network (slirp), so filtering
its one interface's *output* is enough: slirp forwards nothing inbound unless asked to, and
the replies of an allowed outbound connection match the same rule. A ``deny`` rule is
emitted before every ``allow`` (deny beats allow, whatever the order); everything else is
refused with a TCP reset or an ICMP error, so a refused connect fails fast with
``ECONNREFUSED`` instead of hanging.
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


def _address_matches(networks: Iterable[str]) -> list[str]:
    v4: list[str] = []
    v6: list[str] = []
    for text in networks:
        net = ipaddress.ip_network(text, strict=False)
        if isinstance(net, ipaddress.IPv6Network) and net.network_address.ipv4_mapped:
            mapped = net.network_address.ipv4_mapped
            net = ipaddress.ip_network(f"{mapped}/{max(net.prefixlen - 96, 0)}", strict=False)
        (v4 if net.version == 4 else v6).append(str(net))
    out = []
    if v4:
        out.append(f"ip daddr {{ {', '.join(sorted(set(v4)))} }} ")
    if v6:
        out.append(f"ip6 daddr {{ {', '.join(sorted(set(v6)))} }} ")
    return out


def rule_lines(rule: NetworkRule, pins: dict[str, tuple[str, ...]]) -> list[str]:
    """The nft statements of one outbound rule (none for an ``in`` rule)."""
    if rule.direction == "in":
        return []
    verdict = "accept" if rule.action == "allow" else "jump pysb_refuse"
    match = _protocols(rule) + _ports(rule)
    networks = _addresses(rule, pins)
    if networks is None:
        return [f"{match}{verdict}"]
    return [f"{addr}{match}{verdict}" for addr in _address_matches(networks)]


def ruleset(policy: Policy) -> str:
    """The complete ``nft -f`` input for the guest."""
    denies = [r for r in policy.network if r.action == "deny"]
    allows = [r for r in policy.network if r.action == "allow"]
    body = []
    for rule in [*denies, *allows]:
        body += [f"    {line}  # {rule}" for line in rule_lines(rule, policy.pins)]
    lines = [
        "flush ruleset",
        "table inet pysb {",
        "  chain pysb_refuse {",
        "    meta l4proto tcp reject with tcp reset",
        "    reject with icmpx type admin-prohibited",
        "  }",
        "  chain output {",
        "    type filter hook output priority 0; policy drop;",
        '    oif "lo" accept',
        *body,
        "    jump pysb_refuse",
        "  }",
        "}",
        "",
    ]
    return "\n".join(lines)


def inbound_rules(policy: Policy) -> list[NetworkRule]:
    """Allow rules for inbound traffic, which this provider does not forward (reported)."""
    return [r for r in policy.network if r.action == "allow" and r.direction in ("in", "any")]
