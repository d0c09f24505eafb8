"""The nftables back end: a :class:`~pysb_core.net.netfilter.plan.FilterPlan` as ``nft -f`` input.

Loaded into the sandbox's own network namespace (unshare, bwrap) or guest kernel (qemu)
before the program starts, so it is the kernel, not the Python layer, that refuses
traffic. Shape (one ``inet`` table, named by the target)::

    chain filter_out   output hook, priority -150: before NAT, so it judges the address the
                       program asked for (127.0.0.1, not the gateway it is rewritten to)
        established/related accept
        [IPv6 neighbour discovery, on a bridge]
        [DNS to the helper's resolver, only when a rule allows a wide network]
        the helper's own addresses (gateway = host loopback, resolver) reject
        every deny rule (reject)
        [the sandbox's own loopback accept, when the target's loopback is not the host's]
        every allow rule (accept), loopback to the sandbox's forwarded servers
        reject everything else (TCP reset / ICMP port unreachable: fails fast, no timeout)
    chain filter_in    input hook: established, loopback, then the ``in`` rules
    chain nat_out      127.0.0.1:P of an allowed rule -> host gateway (host loopback NAT only)
    chain nat_pre      forwarded inbound ports -> 127.0.0.1, so a server bound there is reached
    chain nat_post     masquerade what leaves the uplink from a loopback address
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pysb_core._startup.records import Record, field, mutable_record
from pysb_core.net.netfilter.plan import (
    NAMESPACE_EPHEMERAL,
    FilterPlan,
    Forward,
    Match,
    is_all_ports,
    keeps_own_servers,
    plan_filter,
)
from pysb_core.net.netfilter.target import SLIRP4NETNS, FilterTarget
from pysb_core.policy import NetworkRule, PortRange

_NEIGHBOUR_DISCOVERY = (
    "icmpv6 type { nd-router-solicit, nd-router-advert, nd-neighbor-solicit, "
    "nd-neighbor-advert } accept"
)


@mutable_record
class CompiledNetwork(Record):
    """The result of :func:`compile_nft`: ruleset text plus what the helper must do."""

    ruleset: str
    #: Ports of the host's loopback the sandbox may reach (``allow ... 127.0.0.1 P out``).
    host_loopback: list[tuple[str, tuple[PortRange, ...]]] = field(default_factory=list)
    #: Host 127.0.0.1:P -> sandbox P, for ``allow ... 127.0.0.1 P in`` rules.
    inbound: list[Forward] = field(default_factory=list)
    #: True when some rule allows a wide network, so names outside the pins may be resolved.
    dns: bool = False
    #: True when the ruleset rewrites addresses (the kernel needs NAT and ``route_localnet``).
    nat: bool = False
    notes: list[str] = field(default_factory=list)


def compile_nft(
    rules: Iterable[NetworkRule],
    pins: Mapping[str, Sequence[str]],
    target: FilterTarget = SLIRP4NETNS,
    *,
    ephemeral: tuple[int, int] = NAMESPACE_EPHEMERAL,
) -> CompiledNetwork:
    """Compile ``rules`` (with ``pins`` for host names) into an nftables ruleset for
    ``target`` (:func:`~pysb_core.net.netfilter.plan.plan_filter` says what ``ephemeral`` is)."""
    plan = plan_filter(rules, pins, target, ephemeral)
    return CompiledNetwork(
        ruleset=render(plan),
        host_loopback=plan.host_loopback,
        inbound=plan.inbound,
        dns=plan.dns,
        nat=plan.nat,
        notes=plan.notes,
    )


def render(plan: FilterPlan) -> str:
    """The ``nft -f`` text of ``plan``."""
    target = plan.target
    first = ["ct state established,related accept"]
    if target.bridged:
        first.append(_NEIGHBOUR_DISCOVERY)
    out = list(first)
    if plan.dns:
        out += [
            f'ip daddr {target.resolver} {proto} dport 53 accept comment "namespace resolver"'
            for proto in ("udp", "tcp")
        ]
    if target.subnet is not None:
        out.append(
            f'ip daddr {target.subnet} reject comment "user-mode network: use 127.0.0.1 '
            'for the host"'
        )
    out += _statements(plan.out_deny)
    if target.open_loopback:
        out.append('oifname "lo" accept')
    out += _statements(plan.out_allow)
    out += _statements(plan.loopback_out, prefix='oifname "lo" ')
    out += ["meta l4proto tcp reject with tcp reset", "reject"]
    inn = [*first, 'iifname "lo" accept', *_statements(plan.in_deny), *_statements(plan.in_allow)]
    inn += ["meta l4proto tcp reject with tcp reset", "reject"]
    body = [f"table inet {target.table} {{"]
    body += _chain("filter_out", "filter", "output", -150, "drop", out)
    body += _chain("filter_in", "filter", "input", 0, "drop", inn)
    if plan.nat:
        body += _nat_chains(plan)
    body.append("}")
    return "\n".join(body) + "\n"


def _nat_chains(plan: FilterPlan) -> list[str]:
    target = plan.target
    nat_out = []
    for protos, ranges in plan.host_loopback:
        for proto in protos.split(","):
            m = (
                f"meta l4proto {proto}"
                if is_all_ports(ranges)
                else f"{proto} dport {_ports(ranges)}"
            )
            own = plan.own_ephemeral  # the program's own servers stay in the sandbox
            if own and keeps_own_servers(plan, ranges):
                m += f" {proto} dport != {own[0]}-{own[1]}"
            nat_out.append(f"ip daddr 127.0.0.1 {m} dnat ip to {target.gateway}")
    nat_pre = [
        f'iifname "{target.uplink}" {fwd.proto} dport {fwd.port} dnat ip to 127.0.0.1'
        for fwd in plan.inbound
    ]
    post = [f'oifname "{target.uplink}" ip saddr 127.0.0.0/8 masquerade']
    return [
        *_chain("nat_out", "nat", "output", -100, "accept", nat_out),
        *_chain("nat_pre", "nat", "prerouting", -100, "accept", nat_pre),
        *_chain("nat_post", "nat", "postrouting", 100, "accept", post),
    ]


def _statements(matches: Iterable[Match], prefix: str = "") -> list[str]:
    """Each match as nft statements: one per address family x protocol, with the verdict
    and a comment naming the profile line."""
    out = []
    for m in matches:
        for addr in _address_matches(m):
            for proto in m.protocols or (None,):
                if proto is None:
                    line = addr.rstrip() or "meta nfproto { ipv4, ipv6 }"
                elif m.ports is None:
                    line = f"{addr}meta l4proto {proto}"
                else:
                    line = f"{addr}{proto} dport {_ports(m.ports)}"
                out.append(f"{prefix}{line} {_verdict(m, proto)} {_comment(m.rule)}")
    return out


def _address_matches(m: Match) -> list[str]:
    """``ip daddr {...} `` and ``ip6 daddr {...} `` (the families the match names), or one
    empty match for any address."""
    if not m.networks:
        return [""]
    out = []
    for family, version in (("ip", 4), ("ip6", 6)):
        nets = [n for n in m.networks if n.version == version]
        if nets:
            out.append(f"{family} daddr {_set(nets)} ")
    return out


def _verdict(m: Match, proto: str | None) -> str:
    if m.accepts:
        return "accept"
    return "reject with tcp reset" if proto == "tcp" else "reject"


def _ports(ports: Sequence[PortRange]) -> str:
    return _set(str(p.low) if p.low == p.high else f"{p.low}-{p.high}" for p in ports)


def _set(items: Iterable[object]) -> str:
    return "{ " + ", ".join(str(i) for i in items) + " }"


#: nft refuses a comment longer than this (and with it the whole ruleset).
_COMMENT_MAX = 128


def _comment(rule: NetworkRule) -> str:
    """The profile line a statement comes from; a long path keeps its end (file, line)."""
    text = (f"{rule.source}: {rule}" if rule.source else str(rule)).replace('"', "'")
    data = text.encode()
    if len(data) > _COMMENT_MAX:
        text = "..." + data[-(_COMMENT_MAX - 3) :].decode(errors="ignore")
    return f'comment "{text}"'


def _chain(name: str, kind: str, hook: str, prio: int, policy: str, lines: list[str]) -> list[str]:
    head = f"  chain {name} {{\n    type {kind} hook {hook} priority {prio}; policy {policy};"
    return [head, *(f"    {ln}" for ln in lines), "  }"]
