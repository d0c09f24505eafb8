"""The same filter as :mod:`pysb_core.netns.nft`, for hosts with iptables but no ``nft``.

Output is two ``iptables-restore`` / ``ip6tables-restore`` inputs. Semantics match the nft
ruleset line for line: denies first, the user-mode subnet rejected, refused traffic rejected
(TCP reset / ICMP) rather than dropped. One difference of mechanism: iptables' filter table
runs *after* NAT, so rules on the destination use the conntrack original tuple
(``-m conntrack --ctorigdst``): ``127.0.0.1:P`` is judged as written, not as the gateway
address it is rewritten to. Ports are not rewritten by our NAT, so ``--dport`` stays exact.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence

from pysb_core.netns.nft import (
    SLIRP4NETNS,
    TAP,
    UserNetLayout,
    _covers_everything,
    _directions,
    _in_loopback,
    _is_all_ports,
    compile_network,
    rule_networks,
)
from pysb_core.netrules import normalize_host
from pysb_core.policy import NetworkRule, PortRange

_MULTIPORT_SLOTS = 15  # iptables' multiport limit (a range takes two slots)


def _port_groups(ports: Sequence[PortRange]) -> list[str]:
    """``--dports`` lists of at most 15 slots each (``a:b`` for a range)."""
    groups: list[str] = []
    current: list[str] = []
    used = 0
    for p in ports:
        item, cost = (str(p.low), 1) if p.low == p.high else (f"{p.low}:{p.high}", 2)
        if used + cost > _MULTIPORT_SLOTS:
            groups.append(",".join(current))
            current, used = [], 0
        current.append(item)
        used += cost
    if current:
        groups.append(",".join(current))
    return groups


def _comment(rule: NetworkRule) -> str:
    text = f"{rule.source}: {rule}".replace('"', "'")[:250]
    return f'-m comment --comment "{text}"'


def _rule_lines(
    rule: NetworkRule,
    nets: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network],
    version: int,
    chain: str,
    *,
    any_address: bool,
) -> list[str]:
    family = [n for n in nets if n.version == version]
    if not any_address and not family:
        return []
    addr_field = "--ctorigdst" if chain == "OUTPUT" else "-d"
    addrs: list[str | None] = (
        [None] if any_address else [str(n) for n in family]  # one line per network
    )
    all_ports = _is_all_ports(rule.ports)
    protos: list[str | None]
    if all_ports and rule.action == "deny" and set(rule.protocols) == {"tcp", "udp"}:
        protos = [None]
    else:
        protos = list(rule.protocols)
    out: list[str] = []
    for addr in addrs:
        if addr is None:
            match_addr = ""
        elif chain == "OUTPUT":
            match_addr = f"-m conntrack {addr_field} {addr} "
        else:
            match_addr = f"{addr_field} {addr} "
        for proto in protos:
            if rule.action == "allow":
                verdict = "-j ACCEPT"
            elif proto == "tcp":
                verdict = "-j REJECT --reject-with tcp-reset"
            else:
                verdict = "-j REJECT"
            if proto is None:
                out.append(f"-A {chain} {match_addr}{verdict} {_comment(rule)}")
            elif all_ports:
                out.append(f"-A {chain} {match_addr}-p {proto} {verdict} {_comment(rule)}")
            else:
                for group in _port_groups(rule.ports):
                    out.append(
                        f"-A {chain} {match_addr}-p {proto} -m multiport --dports {group} "
                        f"{verdict} {_comment(rule)}"
                    )
    return out


def compile_iptables(
    rules: Iterable[NetworkRule],
    pins: Mapping[str, Sequence[str]],
    layout: UserNetLayout = SLIRP4NETNS,
) -> tuple[str, str]:
    """``(iptables-restore input, ip6tables-restore input)`` for the rules and pins."""
    rules = tuple(rules)
    pins = {normalize_host(k): tuple(v) for k, v in pins.items()}
    meta = compile_network(rules, pins, layout)  # forwards, DNS, loopback: one decision
    texts: list[str] = []
    for version in (4, 6):
        out_deny: list[str] = []
        out_allow: list[str] = []
        in_deny: list[str] = []
        in_allow: list[str] = []
        lo_in: list[str] = []
        for rule in rules:
            nets = rule_networks(rule, pins)
            if not nets:
                continue
            everything = _covers_everything(nets)
            for direction in _directions(rule):
                if direction == "out":
                    lines = _rule_lines(rule, nets, version, "OUTPUT", any_address=everything)
                    (out_deny if rule.action == "deny" else out_allow).extend(lines)
                    continue
                local_any = everything or all(
                    n.num_addresses > 2**24
                    or _in_loopback(n)
                    or n == ipaddress.ip_network("::1/128")
                    or n.prefixlen == 0
                    for n in nets
                )
                lines = _rule_lines(rule, nets, version, "INPUT", any_address=local_any)
                (in_deny if rule.action == "deny" else in_allow).extend(lines)
                if local_any and rule.action == "allow" and not _is_all_ports(rule.ports):
                    for proto in rule.protocols:
                        for group in _port_groups(rule.ports):
                            lo_in.append(
                                f"-A OUTPUT -o lo -p {proto} -m multiport --dports {group} "
                                f"-j ACCEPT {_comment(rule)}"
                            )
        reject_tcp = "-A {c} -p tcp -j REJECT --reject-with tcp-reset"
        filt = [
            "*filter",
            ":INPUT DROP [0:0]",
            ":FORWARD DROP [0:0]",
            ":OUTPUT DROP [0:0]",
            "-A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
        ]
        if version == 4:
            if meta.dns:
                filt += [
                    f"-A OUTPUT -d {layout.resolver}/32 -p {p} --dport 53 -j ACCEPT"
                    for p in ("udp", "tcp")
                ]
            filt.append(f"-A OUTPUT -m conntrack --ctorigdst {layout.subnet} -j REJECT")
        filt += out_deny + out_allow + lo_in
        filt += [reject_tcp.format(c="OUTPUT"), "-A OUTPUT -j REJECT"]
        filt += [
            "-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
            "-A INPUT -i lo -j ACCEPT",
            *in_deny,
            *in_allow,
            reject_tcp.format(c="INPUT"),
            "-A INPUT -j REJECT",
            "COMMIT",
        ]
        if version == 4 and layout.host_loopback_nat and (meta.host_loopback or meta.inbound):
            filt += [
                "*nat",
                ":PREROUTING ACCEPT [0:0]",
                ":INPUT ACCEPT [0:0]",
                ":OUTPUT ACCEPT [0:0]",
                ":POSTROUTING ACCEPT [0:0]",
            ]
            for protos, ranges in meta.host_loopback:
                for proto in protos.split(","):
                    groups: list[str | None] = (
                        [None] if _is_all_ports(ranges) else list(_port_groups(ranges))
                    )
                    for grp in groups:
                        ports = f"-m multiport --dports {grp} " if grp else ""
                        filt.append(
                            f"-A OUTPUT -d 127.0.0.1/32 -p {proto} {ports}"
                            f"-j DNAT --to-destination {layout.gateway}"
                        )
            filt += [
                f"-A PREROUTING -i {TAP} -p {f.proto} --dport {f.port} "
                "-j DNAT --to-destination 127.0.0.1"
                for f in meta.inbound
            ]
            filt += [f"-A POSTROUTING -o {TAP} -s 127.0.0.0/8 -j MASQUERADE", "COMMIT"]
        texts.append("\n".join(filt) + "\n")
    return texts[0], texts[1]
