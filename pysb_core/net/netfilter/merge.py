"""Many rules as one set lookup: the disjoint elements of an nftables interval set.

A profile may hold any number of network rules (a learned one, thousands of ports). One
nftables statement per rule makes a ruleset the kernel walks rule by rule, and whose
netlink batch overflows the socket buffer an unprivileged ``nft`` gets (``Message too
long`` at about 250 statements in a user namespace: ``SO_SNDBUFFORCE`` is refused there).
So statements of one kind with one verdict (accept, or reject of one protocol) are merged,
past :data:`MERGE_ABOVE`, into a single lookup of a named set: ``ip daddr . tcp dport
@set``. Their union is what the statements matched, so the verdicts are the same: all of
them are terminal and equal.

The kernel refuses overlapping elements in an interval set of concatenations (``File
exists``), and addresses and ports overlap freely in a profile (``10.0.0.0/8 1-100`` and
``10.1.0.0/16 50-200``), so :func:`disjoint_rectangles` cuts the union into disjoint
address x port boxes first. Pure: no OS access.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections import Counter
from collections.abc import Iterable

#: A group of statements of one kind is merged into a set when it has more than this many:
#: below it the ruleset is what it always was (one statement per rule, each naming its line).
MERGE_ABOVE = 16

Interval = tuple[int, int]


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of closed integer intervals, as sorted disjoint intervals (touching ones
    joined: ``1-3`` and ``4-5`` are ``1-5``)."""
    out: list[Interval] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def disjoint_rectangles(
    boxes: Iterable[tuple[Interval, Interval]],
) -> list[tuple[Interval, list[Interval]]]:
    """The union of ``(address interval, port interval)`` boxes as address runs, each with
    the disjoint port intervals it has: ``[(addresses, [ports, ...]), ...]``.

    A sweep over the address boundaries: between two boundaries the same boxes are open, so
    the ports there are the union of theirs; neighbouring runs with equal ports are joined.
    """
    starts: dict[int, list[Interval]] = {}
    ends: dict[int, list[Interval]] = {}
    for (a_lo, a_hi), ports in boxes:
        starts.setdefault(a_lo, []).append(ports)
        ends.setdefault(a_hi + 1, []).append(ports)
    points = sorted(set(starts) | set(ends))
    active: Counter[Interval] = Counter()
    out: list[tuple[Interval, list[Interval]]] = []
    for here, after in itertools.pairwise(points):
        for ports in ends.get(here, ()):
            active[ports] -= 1
            if not active[ports]:
                del active[ports]
        for ports in starts.get(here, ()):
            active[ports] += 1
        if not active:
            continue
        union = merge_intervals(active)
        if out and out[-1][0][1] + 1 == here and out[-1][1] == union:
            out[-1] = ((out[-1][0][0], after - 1), union)
        else:
            out.append(((here, after - 1), union))
    return out


def address_text(lo: int, hi: int, version: int) -> str:
    """An address interval as nft writes it: ``a``, ``net/len`` when it is one prefix,
    else ``a-b``."""
    make = ipaddress.IPv4Address if version == 4 else ipaddress.IPv6Address
    if lo == hi:
        return str(make(lo))
    nets = list(ipaddress.summarize_address_range(make(lo), make(hi)))
    if len(nets) == 1:
        return str(nets[0])
    return f"{make(lo)}-{make(hi)}"


def port_text(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def network_interval(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> Interval:
    return int(net.network_address), int(net.broadcast_address)
