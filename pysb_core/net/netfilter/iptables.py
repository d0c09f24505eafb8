"""The iptables back end: a :class:`~pysb_core.net.netfilter.plan.FilterPlan` as two
``iptables-restore`` / ``ip6tables-restore`` inputs (hosts with iptables but no ``nft``, and
firejail's ``--netfilter`` files).

The statements are the nftables back end's, in the same order (:mod:`pysb_core.net.netfilter.nft`).
One difference of mechanism: iptables' filter table runs *after* NAT, so rules on the
destination use the conntrack original tuple (``-m conntrack --ctorigdst``): ``127.0.0.1:P``
is judged as written, not as the gateway address it is rewritten to. Ports are not
rewritten by our NAT, so ``--dport`` stays exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pysb_core.net.netfilter.plan import (
    NAMESPACE_EPHEMERAL,
    FilterPlan,
    Match,
    is_all_ports,
    keeps_own_servers,
    plan_filter,
)
from pysb_core.net.netfilter.ruleset import BATCH_BYTES, pack
from pysb_core.net.netfilter.target import SLIRP4NETNS, FilterTarget
from pysb_core.policy import NetworkRule, PortRange

_MULTIPORT_SLOTS = 15  # iptables' multiport limit (a range takes two slots)
_NEIGHBOUR_DISCOVERY = (133, 134, 135, 136)  # router/neighbour solicitation/advertisement
_REJECT_TCP = "-A {chain} -p tcp -j REJECT --reject-with tcp-reset"


def compile_iptables(
    rules: Iterable[NetworkRule],
    pins: Mapping[str, Sequence[str]],
    target: FilterTarget = SLIRP4NETNS,
    *,
    ephemeral: tuple[int, int] = NAMESPACE_EPHEMERAL,
) -> tuple[str, str]:
    """``(iptables-restore input, ip6tables-restore input)`` for the rules and pins."""
    plan = plan_filter(rules, pins, target, ephemeral)
    return render(plan, 4), render(plan, 6)


def split_restore(text: str, limit: int = BATCH_BYTES) -> list[str]:
    """One ``iptables-restore`` input as several of at most ``limit`` bytes (a rule longer
    than that alone): ``[text]`` when it fits. The first input makes every table with its
    chains' policies (``DROP``) and no rule; the others append rules, in order, and must
    be loaded with ``--noflush``. Why: ``iptables-restore`` (nf_tables) sends an input as
    one netlink batch, and in a user namespace its socket buffer holds about 250 rules
    (``Message too long``), as ``nft``'s does (:mod:`~pysb_core.net.netfilter.ruleset`)."""
    if len(text.encode()) <= limit:
        return [text]
    heads: list[list[str]] = []
    rules: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("*"):
            heads.append([line])
            rules.append([])
        elif line.startswith(":"):
            heads[-1].append(line)
        elif line.startswith("-A "):
            rules[-1].append(line)
    first = "".join("\n".join([*head, "COMMIT"]) + "\n" for head in heads)
    out = [first]
    for head, lines in zip(heads, rules, strict=True):
        table = head[0]
        out += [f"{table}\n{chunk}COMMIT\n" for chunk in pack(lines, limit - len(table) - 8)]
    return out


def render(plan: FilterPlan, version: int) -> str:
    """The ``iptables-restore`` (``version`` 4) or ``ip6tables-restore`` (6) text of ``plan``."""
    target = plan.target
    lines = [
        "*filter",
        ":INPUT DROP [0:0]",
        ":FORWARD DROP [0:0]",
        ":OUTPUT DROP [0:0]",
        "-A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
        *_neighbour_discovery("OUTPUT", version, target),
    ]
    if version == 4 and plan.dns:
        lines += [
            f"-A OUTPUT -d {target.resolver}/32 -p {proto} --dport 53 -j ACCEPT"
            for proto in ("udp", "tcp")
        ]
    if version == 4 and target.subnet is not None:
        lines.append(f"-A OUTPUT -m conntrack --ctorigdst {target.subnet} -j REJECT")
    lines += _statements(plan.out_deny, version, "OUTPUT")
    if target.open_loopback:
        lines.append("-A OUTPUT -o lo -j ACCEPT")
    lines += _statements(plan.out_allow, version, "OUTPUT")
    lines += _statements(plan.loopback_out, version, "OUTPUT", lead="-o lo ")
    lines += [_REJECT_TCP.format(chain="OUTPUT"), "-A OUTPUT -j REJECT"]
    lines += [
        "-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
        *_neighbour_discovery("INPUT", version, target),
        "-A INPUT -i lo -j ACCEPT",
        *_statements(plan.in_deny, version, "INPUT"),
        *_statements(plan.in_allow, version, "INPUT"),
        _REJECT_TCP.format(chain="INPUT"),
        "-A INPUT -j REJECT",
        "COMMIT",
    ]
    if version == 4 and plan.nat:
        lines += _nat_table(plan)
    return "\n".join(lines) + "\n"


def _neighbour_discovery(chain: str, version: int, target: FilterTarget) -> list[str]:
    """On a bridge, IPv6 needs neighbour discovery: without it no IPv6 address works."""
    if version != 6 or not target.bridged:
        return []
    return [f"-A {chain} -p ipv6-icmp --icmpv6-type {t} -j ACCEPT" for t in _NEIGHBOUR_DISCOVERY]


def _nat_table(plan: FilterPlan) -> list[str]:
    target = plan.target
    lines = [
        "*nat",
        ":PREROUTING ACCEPT [0:0]",
        ":INPUT ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":POSTROUTING ACCEPT [0:0]",
    ]
    # The sandbox's own servers on forwarded ports stay reached from inside (nft.py).
    for proto in ("tcp", "udp"):
        forwarded = [PortRange(f.port, f.port) for f in plan.inbound if f.proto == proto]
        lines += [
            f"-A OUTPUT -d 127.0.0.1/32 -p {proto} -m multiport --dports {group} -j ACCEPT"
            for group in (_port_groups(forwarded) if forwarded else [])
        ]
    own = plan.own_ephemeral  # the program's own servers stay in the sandbox
    for protos, ranges in plan.host_loopback:
        keep = f"! --dport {own[0]}:{own[1]} " if own and keeps_own_servers(plan, ranges) else ""
        for proto in protos.split(","):
            groups = [""] if is_all_ports(ranges) else _port_groups(ranges)
            lines += [
                f"-A OUTPUT -d 127.0.0.1/32 -p {proto} "
                + (f"-m multiport --dports {group} " if group else "")
                + keep
                + f"-j DNAT --to-destination {target.gateway}"
                for group in groups
            ]
    lines += [
        f"-A PREROUTING -i {target.uplink} -p {f.proto} --dport {f.port} "
        "-j DNAT --to-destination 127.0.0.1"
        for f in plan.inbound
    ]
    return [*lines, f"-A POSTROUTING -o {target.uplink} -s 127.0.0.0/8 -j MASQUERADE", "COMMIT"]


def _statements(matches: Iterable[Match], version: int, chain: str, lead: str = "") -> list[str]:
    """Each match as iptables rules of this IP version: one per network x protocol x port
    group (``lead``: matches put before the address, such as ``-o lo``)."""
    out: list[str] = []
    for m in matches:
        family = [n for n in m.networks if n.version == version]
        if m.networks and not family:
            continue
        addresses: list[str | None] = [str(n) for n in family] if family else [None]
        for addr in addresses:
            if addr is None:
                where = ""
            elif chain == "OUTPUT":
                where = f"-m conntrack --ctorigdst {addr} "
            else:
                where = f"-d {addr} "
            for proto in m.protocols or (None,):
                verdict = f"{_verdict(m, proto)} {_comment(m.rule)}"
                if proto is None:
                    out.append(f"-A {chain} {lead}{where}{verdict}")
                elif m.ports is None:
                    out.append(f"-A {chain} {lead}{where}-p {proto} {verdict}")
                else:
                    out += [
                        f"-A {chain} {lead}{where}-p {proto} -m multiport --dports {group} "
                        f"{verdict}"
                        for group in _port_groups(m.ports)
                    ]
    return out


def _verdict(m: Match, proto: str | None) -> str:
    if m.accepts:
        return "-j ACCEPT"
    return "-j REJECT --reject-with tcp-reset" if proto == "tcp" else "-j REJECT"


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
