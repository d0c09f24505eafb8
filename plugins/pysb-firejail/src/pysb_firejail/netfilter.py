"""Compile the profile's network rules into firejail ``--netfilter`` files (pure).

firejail loads these with ``iptables-restore`` / ``ip6tables-restore`` inside the
sandbox's new network namespace before the program starts, so they hold for native code
too. The ruleset, for each IP version:

1. default policy DROP on INPUT, OUTPUT and FORWARD;
2. the sandbox's own loopback and the replies of allowed connections pass;
3. every ``deny`` rule, rejected (a matching deny beats any allow, whatever the order);
4. every ``allow`` rule, accepted: ``out`` rules on OUTPUT by destination address and
   port, ``in`` rules on INPUT by the bound (destination) address and port;
5. whatever is left is rejected on OUTPUT (an immediate ``ECONNREFUSED`` rather than a
   time-out) and dropped on INPUT.

Host names are replaced by their pinned addresses (SPEC §6); a name that did not resolve
contributes nothing (its allow rule allows nothing).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pysb_core.providerkit import NetworkRule

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


@dataclass(frozen=True)
class Rulesets:
    """``iptables-restore`` text for IPv4 and for IPv6."""

    v4: str
    v6: str


def rule_networks(rule: NetworkRule, pins: Mapping[str, Sequence[str]]) -> list[IPNetwork]:
    """The address sets ``rule`` covers (IPv4-mapped IPv6 judged as IPv4)."""
    if rule.network == "*":
        return [ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")]
    try:
        nets = [ipaddress.ip_network(rule.network, strict=False)]
    except ValueError:
        name = rule.network.lower().rstrip(".")
        nets = [ipaddress.ip_network(a) for a in pins.get(name, pins.get(rule.network, ()))]
    out: list[IPNetwork] = []
    for n in nets:
        if isinstance(n, ipaddress.IPv6Network) and n.subnet_of(_MAPPED):
            low = int(n.network_address) & 0xFFFFFFFF
            out.append(ipaddress.IPv4Network((low, max(0, n.prefixlen - 96))))
        else:
            out.append(n)
    return out


def is_loopback_rule(rule: NetworkRule, pins: Mapping[str, Sequence[str]]) -> bool:
    """True when the rule names loopback addresses (the host's, in SPEC §4's meaning)."""
    if rule.network == "*":
        return False
    return any(n.network_address.is_loopback for n in rule_networks(rule, pins))


def _ports(rule: NetworkRule) -> list[str | None]:
    out: list[str | None] = []
    for p in rule.ports:
        if p.low == 0 and p.high == 65535:
            return [None]
        out.append(str(p.low) if p.low == p.high else f"{p.low}:{p.high}")
    return out


def _lines(
    rules: Iterable[NetworkRule], pins: Mapping[str, Sequence[str]], version: int, action: str
) -> list[str]:
    lines = []
    for rule in rules:
        nets = [n for n in rule_networks(rule, pins) if n.version == version]
        for proto in rule.protocols:
            for net in nets:
                addr = None if net.prefixlen == 0 else str(net)
                for port in _ports(rule):
                    match = f"-p {proto}" + (f" --dport {port}" if port else "")
                    if rule.direction in ("out", "any"):
                        dst = f" -d {addr}" if addr else ""
                        lines.append(f"-A OUTPUT {match}{dst} -j {action}")
                    if rule.direction in ("in", "any"):
                        dst = f" -d {addr}" if addr else ""
                        target = "DROP" if action != "ACCEPT" else "ACCEPT"
                        lines.append(f"-A INPUT {match}{dst} -j {target}")
    return lines


def _table(rules: Sequence[NetworkRule], pins: Mapping[str, Sequence[str]], version: int) -> str:
    reject = "REJECT"
    lines = [
        "*filter",
        ":INPUT DROP [0:0]",
        ":FORWARD DROP [0:0]",
        ":OUTPUT DROP [0:0]",
        "-A INPUT -i lo -j ACCEPT",
        "-A OUTPUT -o lo -j ACCEPT",
        "-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
        "-A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
    ]
    if version == 6:
        # Neighbour discovery: without it no IPv6 address on the bridge works at all.
        for t in (133, 134, 135, 136):
            lines.append(f"-A INPUT -p ipv6-icmp --icmpv6-type {t} -j ACCEPT")
            lines.append(f"-A OUTPUT -p ipv6-icmp --icmpv6-type {t} -j ACCEPT")
    lines += _lines([r for r in rules if r.action == "deny"], pins, version, reject)
    lines += _lines([r for r in rules if r.action == "allow"], pins, version, "ACCEPT")
    lines += ["-A OUTPUT -j REJECT", "COMMIT", ""]
    return "\n".join(lines)


def compile_rules(rules: Sequence[NetworkRule], pins: Mapping[str, Sequence[str]]) -> Rulesets:
    """Both rulesets for ``rules`` (a profile's network section, pins applied)."""
    return Rulesets(_table(rules, pins, 4), _table(rules, pins, 6))
