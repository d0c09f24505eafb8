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

Past :data:`~pysb_core.net.netfilter.merge.MERGE_ABOVE` statements of one kind in a chain
(``ip daddr . tcp dport``, accept), one lookup of a named set holds them all
(:mod:`~pysb_core.net.netfilter.merge`); below it the text is what it always was. A large
ruleset is also written as several inputs (:mod:`~pysb_core.net.netfilter.ruleset`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from pysb_core._startup.records import Record, field, mutable_record
from pysb_core.net.netfilter.merge import (
    MERGE_ABOVE,
    address_text,
    disjoint_rectangles,
    merge_intervals,
    network_interval,
    port_text,
)
from pysb_core.net.netfilter.plan import (
    NAMESPACE_EPHEMERAL,
    FilterPlan,
    Forward,
    IPNetwork,
    Match,
    is_all_ports,
    keeps_own_servers,
    plan_filter,
)
from pysb_core.net.netfilter.ruleset import Chain, NftSet, Ruleset, split_batches
from pysb_core.net.netfilter.target import SLIRP4NETNS, FilterTarget
from pysb_core.policy import NetworkRule, PortRange

_NEIGHBOUR_DISCOVERY = (
    "icmpv6 type { nd-router-solicit, nd-router-advert, nd-neighbor-solicit, "
    "nd-neighbor-advert } accept"
)


@mutable_record
class CompiledNetwork(Record):
    """The result of :func:`compile_nft`: ruleset text plus what the helper must do."""

    #: The whole ruleset as one ``nft -f`` input (one transaction: a privileged loader).
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
    #: The same ruleset as ``nft -f`` inputs to load one after the other, each small enough
    #: for the socket buffer of an ``nft`` in a user namespace (:mod:`~.batches`); one
    #: input, equal to ``ruleset``, when the ruleset is small.
    batches: list[str] = field(default_factory=list)


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
    ruleset = build(plan)
    return CompiledNetwork(
        ruleset=ruleset.text(),
        host_loopback=plan.host_loopback,
        inbound=plan.inbound,
        dns=plan.dns,
        nat=plan.nat,
        notes=plan.notes,
        batches=split_batches(ruleset),
    )


def render(plan: FilterPlan) -> str:
    """The ``nft -f`` text of ``plan``."""
    return build(plan).text()


def build(plan: FilterPlan) -> Ruleset:
    """The chains and sets of ``plan``."""
    target = plan.target
    sets: list[NftSet] = []
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
    out += _statements(plan.out_deny, sets, "out_deny")
    if target.open_loopback:
        out.append('oifname "lo" accept')
    out += _statements(plan.out_allow, sets, "out_allow")
    out += _statements(plan.loopback_out, sets, "loopback_out", prefix='oifname "lo" ')
    out += ["meta l4proto tcp reject with tcp reset", "reject"]
    inn = [
        *first,
        'iifname "lo" accept',
        *_statements(plan.in_deny, sets, "in_deny"),
        *_statements(plan.in_allow, sets, "in_allow"),
    ]
    inn += ["meta l4proto tcp reject with tcp reset", "reject"]
    chains = [
        Chain("filter_out", "filter", "output", -150, "drop", out),
        Chain("filter_in", "filter", "input", 0, "drop", inn),
    ]
    if plan.nat:
        chains += _nat_chains(plan, sets)
    return Ruleset(target.table, sets, chains)


def _nat_chains(plan: FilterPlan, sets: list[NftSet]) -> list[Chain]:
    target = plan.target
    own = plan.own_ephemeral  # the program's own servers stay in the sandbox
    #: (protocol, "proto dport != own" or "", ports or None for every port)
    entries: list[tuple[str, str, tuple[PortRange, ...] | None]] = []
    for protos, ranges in plan.host_loopback:
        for proto in protos.split(","):
            keep = ""
            if own and keeps_own_servers(plan, ranges):
                keep = f" {proto} dport != {own[0]}-{own[1]}"
            entries.append((proto, keep, None if is_all_ports(ranges) else ranges))
    counts = Counter((proto, keep) for proto, keep, spec in entries if spec is not None)
    gateway = target.gateway
    # The sandbox's own servers on forwarded ports: the host's 127.0.0.1:P is the helper's
    # forward back to them, so a connection from inside stays inside (the same server,
    # without two trips through the user-mode helper: ~0.6 ms each under slirp4netns).
    nat_out: list[str] = []
    nat_pre_sets: dict[str, str] = {}
    for proto in ("tcp", "udp"):
        forwarded = [fwd.port for fwd in plan.inbound if fwd.proto == proto]
        if not forwarded:
            continue
        if len(forwarded) > MERGE_ABOVE:
            name = f"nat_pre_{proto}"
            spans = merge_intervals((p, p) for p in forwarded)
            sets.append(NftSet(name, "inet_service", tuple(port_text(*p) for p in spans)))
            nat_pre_sets[proto] = name
            ports = f"@{name}"
        else:
            listed = ", ".join(map(str, forwarded))
            ports = listed if len(forwarded) == 1 else "{ " + listed + " }"
        nat_out.append(f"ip daddr 127.0.0.1 {proto} dport {ports} accept")
    done: set[tuple[str, str]] = set()
    for proto, keep, spec in entries:
        if spec is None:
            nat_out.append(f"ip daddr 127.0.0.1 meta l4proto {proto}{keep} dnat ip to {gateway}")
        elif counts[(proto, keep)] <= MERGE_ABOVE:
            nat_out.append(
                f"ip daddr 127.0.0.1 {proto} dport {_ports(spec)}{keep} dnat ip to {gateway}"
            )
        elif (proto, keep) not in done:
            done.add((proto, keep))
            name = f"nat_out_{proto}" + ("_keep" if keep else "")
            spans = merge_intervals(
                (p.low, p.high)
                for pr, kp, rs in entries
                if (pr, kp) == (proto, keep) and rs is not None
                for p in rs
            )
            sets.append(NftSet(name, "inet_service", tuple(port_text(*p) for p in spans)))
            nat_out.append(f"ip daddr 127.0.0.1 {proto} dport @{name}{keep} dnat ip to {gateway}")
    nat_pre = []
    for proto in ("tcp", "udp"):
        forwarded = [fwd.port for fwd in plan.inbound if fwd.proto == proto]
        if proto in nat_pre_sets:
            name = nat_pre_sets[proto]
            nat_pre.append(f'iifname "{target.uplink}" {proto} dport @{name} dnat ip to 127.0.0.1')
        else:
            nat_pre += [
                f'iifname "{target.uplink}" {proto} dport {port} dnat ip to 127.0.0.1'
                for port in forwarded
            ]
    post = [f'oifname "{target.uplink}" ip saddr 127.0.0.0/8 masquerade']
    return [
        Chain("nat_out", "nat", "output", -100, "accept", nat_out),
        Chain("nat_pre", "nat", "prerouting", -100, "accept", nat_pre),
        Chain("nat_post", "nat", "postrouting", 100, "accept", post),
    ]


class _Atom:
    """One statement of today's shape: a match, for one address family and one protocol
    (a plain class: a profile may make tens of thousands)."""

    __slots__ = ("family", "key", "match", "networks", "proto")

    def __init__(
        self, match: Match, family: str | None, networks: tuple[IPNetwork, ...], proto: str | None
    ) -> None:
        self.match = match
        self.family = family  # "ip", "ip6"; None: any address
        self.networks = networks
        self.proto = proto
        #: Statements with equal keys merge into one set lookup (None: never merged).
        self.key: tuple[str, str, bool, bool] | None = None
        if proto is not None and (family is not None or match.ports is not None):
            self.key = (family or "", proto, family is not None, match.ports is not None)

    def line(self) -> str:
        m, proto = self.match, self.proto
        addr = f"{self.family} daddr {_set(self.networks)} " if self.family else ""
        if proto is None:
            line = addr.rstrip() or "meta nfproto { ipv4, ipv6 }"
        elif m.ports is None:
            line = f"{addr}meta l4proto {proto}"
        else:
            line = f"{addr}{proto} dport {_ports(m.ports)}"
        return f"{line} {_verdict(m, proto)} {_comment(m.rule)}"


def _atoms(matches: Iterable[Match]) -> list[_Atom]:
    out = []
    for m in matches:
        families: list[tuple[str | None, tuple[IPNetwork, ...]]] = [(None, ())]
        if m.networks:
            families = [
                (family, nets)
                for family, version in (("ip", 4), ("ip6", 6))
                if (nets := tuple(n for n in m.networks if n.version == version))
            ]
        for family, nets in families:
            for proto in m.protocols or (None,):
                out.append(_Atom(m, family, nets, proto))
    return out


def _statements(
    matches: Iterable[Match], sets: list[NftSet], section: str, prefix: str = ""
) -> list[str]:
    """Each match as nft statements: one per address family x protocol, with the verdict
    and a comment naming the profile line; past :data:`~.merge.MERGE_ABOVE` statements of
    one kind, one lookup of a set of them (:mod:`~.merge`), in place of the first."""
    atoms = _atoms(matches)
    counts = Counter(a.key for a in atoms if a.key is not None)
    out = []
    groups: dict[tuple[str, str, bool, bool], list[_Atom]] = {}
    for atom in atoms:
        if atom.key is not None and counts[atom.key] > MERGE_ABOVE:
            groups.setdefault(atom.key, []).append(atom)
    for atom in atoms:
        key = atom.key
        if key is None or key not in groups:
            out.append(prefix + atom.line())
        elif groups[key][0] is atom:
            out.append(prefix + _set_lookup(section, key, groups[key], sets))
    return out


def _set_lookup(
    section: str, key: tuple[str, str, bool, bool], group: list[_Atom], sets: list[NftSet]
) -> str:
    family, proto, by_address, by_port = key
    name = f"{section}_{family or 'any'}_{proto}" + ("" if by_port else "_every_port")
    version = 6 if family == "ip6" else 4
    addr_type = "ipv6_addr" if version == 6 else "ipv4_addr"
    if by_address and by_port:
        boxes = [
            (network_interval(n), (p.low, p.high))
            for a in group
            for n in a.networks
            for p in a.match.ports or ()
        ]
        items = [
            f"{address_text(*addrs, version)} . {port_text(*ports)}"
            for addrs, runs in disjoint_rectangles(boxes)
            for ports in runs
        ]
        sets.append(NftSet(name, f"{addr_type} . inet_service", tuple(items)))
        lookup = f"{family} daddr . {proto} dport @{name}"
    elif by_address:
        merged = merge_intervals(network_interval(n) for a in group for n in a.networks)
        sets.append(NftSet(name, addr_type, tuple(address_text(*i, version) for i in merged)))
        lookup = f"{family} daddr @{name} meta l4proto {proto}"
    else:
        merged = merge_intervals((p.low, p.high) for a in group for p in a.match.ports or ())
        sets.append(NftSet(name, "inet_service", tuple(port_text(*i) for i in merged)))
        lookup = f"{proto} dport @{name}"
    sources = [a.match.rule.source or str(a.match.rule) for a in group]
    unique = list(dict.fromkeys(sources))
    shown = ", ".join(unique[:2]) + (f" ... {unique[-1]}" if len(unique) > 2 else "")
    text = f"{len(unique)} rules in set {name}: {shown}"
    return f"{lookup} {_verdict(group[0].match, proto)} {_comment_text(text)}"


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
    return _comment_text(f"{rule.source}: {rule}" if rule.source else str(rule))


def _comment_text(text: str) -> str:
    text = text.replace('"', "'")
    data = text.encode()
    if len(data) > _COMMENT_MAX:
        text = "..." + data[-(_COMMENT_MAX - 3) :].decode(errors="ignore")
    return f'comment "{text}"'
