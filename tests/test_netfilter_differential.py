"""Differential test of the one network-rule compiler (:mod:`pysb_core.net.netfilter`), for every
back end and every provider's target: the kernel, running the compiled rules, decides every
probe exactly as pysb's reference matcher (``pysb_core.policy.netrules.NetworkMatcher``) does.

Back ends: nftables and iptables for the namespace providers (unshare, bwrap: slirp4netns
or pasta in front), nftables for the qemu guest (QEMU's slirp), iptables for firejail's
bridge. Random rule sets (seeded, so a failure reproduces) are compiled and loaded one
after the other into namespaces the test creates (:mod:`pysb_core.testing.netfilter`);
each probe is a real TCP connect or UDP exchange. No packet leaves those namespaces.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from pysb_core.net.netfilter import SLIRP4NETNS, FilterTarget, compile_iptables, compile_nft
from pysb_core.policy.netrules import NetworkMatcher, parse_rule
from pysb_core.testing.netfilter import SANDBOX_ADDRESSES, Load, probe, require_tools

ADDRESSES = ["192.0.2.7", "192.0.2.9", "192.0.2.130", "198.51.100.5", "198.51.100.200"]
PORTS = [8001, 8002, 8003, 8004]
PROTOCOLS = ("tcp", "udp")
NETWORKS = [
    "*",
    "0.0.0.0/0",
    "192.0.2.0/24",
    "192.0.2.7",
    "192.0.2.128/25",
    "198.51.100.0/25",
    "198.51.100.200",
    "::ffff:192.0.2.9",
    "h1.test",
]
PINS = {"h1.test": ("192.0.2.7", "198.51.100.200")}
PORT_SPECS = ["*", "8001", "8001-8003", "8002,8004", "8003-", "8004"]

Compile = Callable[[list[str]], list[Load]]


def nft_loads(target: FilterTarget) -> Compile:
    """The loads of the nftables back end for ``target`` (a fresh ruleset each case)."""

    def compile_case(rules: list[str]) -> list[Load]:
        text = compile_nft([parse_rule(r) for r in rules], PINS, target).ruleset
        return [(["nft", "flush", "ruleset"], ""), (["nft", "-f", "-"], text)]

    return compile_case


def iptables_loads(target: FilterTarget) -> Compile:
    """The loads of the iptables back end for ``target`` (restore replaces the tables)."""

    def compile_case(rules: list[str]) -> list[Load]:
        v4, v6 = compile_iptables([parse_rule(r) for r in rules], PINS, target)
        return [(["iptables-restore"], v4), (["ip6tables-restore"], v6)]

    return compile_case


def _back_ends() -> dict[str, tuple[Compile, str]]:
    from pysb_firejail.network import bridge_network
    from pysb_qemu.netfilter import GUEST_NETWORK

    from pysb_core.net.netns.usernet import Pasta

    return {
        "slirp4netns-nft": (nft_loads(SLIRP4NETNS), "nft"),
        "slirp4netns-iptables": (iptables_loads(SLIRP4NETNS), "iptables-restore"),
        "pasta-nft": (nft_loads(Pasta.layout), "nft"),
        "qemu-guest-nft": (nft_loads(GUEST_NETWORK), "nft"),
        "firejail-bridge-iptables": (iptables_loads(bridge_network()), "iptables-restore"),
        "bridge-nft": (nft_loads(FilterTarget.bridge()), "nft"),
    }


BACK_ENDS = _back_ends()


def random_rules(rng: random.Random) -> list[str]:
    rules = []
    for _ in range(rng.randint(1, 5)):
        action = rng.choice(["allow", "allow", "deny"])
        proto = rng.choice(["tcp", "tcp", "udp", "any"])
        rules.append(f"{action} {proto} {rng.choice(NETWORKS)} {rng.choice(PORT_SPECS)} out")
    return rules


#: Local addresses for ``in`` rules: the sandbox's own two, its link, wildcards.
#: The wildcard a server binds (``0.0.0.0``, ``::``) stands for every local address.
IN_NETWORKS = [
    *("*", "0.0.0.0/0", "203.0.113.0/24", "203.0.113.1", "203.0.113.10", "::/0"),
    *("0.0.0.0", "::"),
]
#: Targets on which inbound connections reach the sandbox's own addresses (no helper).
BRIDGED = ("bridge-nft", "firejail-bridge-iptables")


def random_inbound_rules(rng: random.Random) -> list[str]:
    rules = []
    for _ in range(rng.randint(1, 5)):
        action = rng.choice(["allow", "allow", "deny"])
        proto = rng.choice(["tcp", "tcp", "udp", "any"])
        direction = rng.choice(["in", "in", "any"])
        network = rng.choice(IN_NETWORKS)
        rules.append(f"{action} {proto} {network} {rng.choice(PORT_SPECS)} {direction}")
    return rules


@pytest.mark.slow
@pytest.mark.parametrize("back_end", BRIDGED)
def test_inbound_connections_to_a_bridged_sandbox_agree_with_the_reference_matcher(
    back_end: str,
) -> None:
    """On a bridge the world connects to the sandbox's own addresses: the kernel admits a
    connection to ``address:port`` exactly when the matcher allows binding there."""
    compile_case, tool = BACK_ENDS[back_end]
    require_tools(tool)
    rng = random.Random(20264)
    cases = [random_inbound_rules(rng) for _ in range(40)]
    inbound = [(a, p) for a in SANDBOX_ADDRESSES for p in PORTS]
    results = probe([compile_case(r) for r in cases], [], PORTS, inbound=inbound)
    mismatches = []
    for rules, row in zip(cases, results, strict=True):
        matcher = NetworkMatcher([parse_rule(r) for r in rules], PINS)
        for (a, p), kernel in zip(inbound, row, strict=True):
            expected = matcher.check("tcp", a, p, "in")[0]
            if kernel != expected:
                mismatches.append((rules, a, p, kernel, expected))
    assert not mismatches, mismatches[:5]
    flat = [x for row in results for x in row]
    assert any(flat) and not all(flat)  # the cases are not trivial: both outcomes occur


@pytest.mark.slow
@pytest.mark.parametrize("back_end", sorted(BACK_ENDS))
def test_kernel_running_the_rules_agrees_with_the_reference_matcher(back_end: str) -> None:
    compile_case, tool = BACK_ENDS[back_end]
    require_tools(tool)
    rng = random.Random(20262)
    cases = [random_rules(rng) for _ in range(40)]
    results = probe([compile_case(r) for r in cases], ADDRESSES, PORTS, protocols=PROTOCOLS)
    mismatches = []
    for rules, row in zip(cases, results, strict=True):
        matcher = NetworkMatcher([parse_rule(r) for r in rules], PINS)
        probes = [(proto, a, p) for proto in PROTOCOLS for a in ADDRESSES for p in PORTS]
        for (proto, a, p), kernel in zip(probes, row, strict=True):
            expected = matcher.check(proto, a, p, "out")[0]
            if kernel != expected:
                mismatches.append((rules, proto, a, p, kernel, expected))
    assert not mismatches, mismatches[:5]
    flat = [x for row in results for x in row]
    assert any(flat) and not all(flat)  # the cases are not trivial: both outcomes occur
