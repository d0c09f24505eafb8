"""qemu's and firejail's packet filters did not change in effect when they moved to the one
network-rule compiler (:mod:`pysb_core.net.netfilter`).

tests/data/netfilter_before_one_compiler.json holds random rule sets (seeded) with the
rulesets the providers' own compilers wrote for them before (``pysb_qemu.netfilter.ruleset``,
``pysb_firejail.netfilter.compile_rules``, since deleted). Both the old and the new ruleset
of each case are loaded into namespaces this test creates (:mod:`pysb_core.testing.netfilter`)
and probed with real TCP connects: to addresses in a second namespace, and to listeners on
the sandbox's own loopback. Every probe must be decided alike, but for these differences on
purpose, where qemu and firejail now do what unshare and bwrap always did:

- a deny rule that covers the sandbox's own loopback applies to it (the old filters let all
  loopback traffic through before any rule; the reference matcher applies the deny);
- qemu: an allow rule whose network contains 127.0.0.1 (``*``, ``0.0.0.0/0``, not only
  ``127.0.0.1`` itself) reaches the host's loopback on its ports (NATed to slirp's
  10.0.2.2, docs/netns.md "Loopback means the host's loopback"; the old guest filter kept
  such ports on the guest's own loopback). The second namespace answers as the host there,
  except on a port an ``in`` rule forwards: the host's loopback port is then the helper's
  forward back to the sandbox, so the connect stays on the sandbox's own loopback.

No packet leaves the test's namespaces.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pysb_core.net.netfilter import compile_iptables, compile_nft
from pysb_core.policy.netrules import NetworkMatcher, parse_rule
from pysb_core.testing.netfilter import Load, probe, require_tools

BEFORE = json.loads((Path(__file__).parent / "data/netfilter_before_one_compiler.json").read_text())
PINS = {name: tuple(addresses) for name, addresses in BEFORE["pins"].items()}
ADDRESSES = ["192.0.2.7", "192.0.2.130", "198.51.100.5", "198.51.100.200", "127.0.0.1"]
PORTS = [8001, 8002, 8003, 8004]
#: The sandbox's own servers: a probe of 127.0.0.1 on another port succeeds only when the
#: filter sends it to the host's loopback (played by the second namespace).
LOCAL_PORTS = [8001, 8003]


def _qemu(case: dict[str, object]) -> tuple[list[Load], list[Load]]:
    from pysb_qemu.netfilter import GUEST_NETWORK

    new = compile_nft([parse_rule(r) for r in case["rules"]], PINS, GUEST_NETWORK).ruleset
    flush: Load = (["nft", "flush", "ruleset"], "")
    return [flush, (["nft", "-f", "-"], case["nft"])], [flush, (["nft", "-f", "-"], new)]


def _sent_to_the_host(provider: str, rules: list[str], port: int) -> bool:
    """Whether the new filter NATs a TCP connect to 127.0.0.1:port to the host's loopback."""
    if provider != "qemu":
        return False  # a bridge has no way to the host's loopback
    from pysb_qemu.netfilter import GUEST_NETWORK

    compiled = compile_nft([parse_rule(r) for r in rules], PINS, GUEST_NETWORK)
    return any(
        "tcp" in protos.split(",") and any(port in r for r in ranges)
        for protos, ranges in compiled.host_loopback
    )


def _firejail(case: dict[str, object]) -> tuple[list[Load], list[Load]]:
    from pysb_firejail.network import bridge_network

    old_v4, old_v6 = case["iptables"]
    new_v4, new_v6 = compile_iptables(
        [parse_rule(r) for r in case["rules"]], PINS, bridge_network()
    )
    restore = (["iptables-restore"], ["ip6tables-restore"])
    return (
        [(restore[0], old_v4), (restore[1], old_v6)],
        [(restore[0], new_v4), (restore[1], new_v6)],
    )


PROVIDERS = {"qemu": (_qemu, "nft"), "firejail": (_firejail, "iptables-restore")}


def _forwarded_inbound(provider: str, rules: list[str], port: int) -> bool:
    """Whether an ``in`` rule forwards the host's 127.0.0.1:port to the sandbox: the host's
    port is then the helper's forward back to the sandbox's own server, so a connect to it
    stays on the sandbox's loopback (reached when a local server listens there)."""
    if provider != "qemu":
        return False
    from pysb_qemu.netfilter import GUEST_NETWORK

    compiled = compile_nft([parse_rule(r) for r in rules], PINS, GUEST_NETWORK)
    return any(f.proto == "tcp" and f.port == port for f in compiled.inbound)


def _denied_on_own_loopback(rules: list[str], port: int) -> bool:
    """Whether a deny rule of the case covers a TCP connect to the sandbox's 127.0.0.1:port."""
    denies = [parse_rule(r) for r in rules if r.startswith("deny")]
    matcher = NetworkMatcher([*denies, parse_rule("allow tcp * * out")], PINS)
    return not matcher.check("tcp", "127.0.0.1", port, "out")[0]


@pytest.mark.slow
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_the_new_ruleset_decides_every_probe_as_the_old_one(provider: str) -> None:
    loads_of, tool = PROVIDERS[provider]
    require_tools(tool)
    cases = BEFORE[provider]
    pairs = [loads_of(case) for case in cases]
    old_and_new = probe(
        [old for old, _ in pairs] + [new for _, new in pairs],
        ADDRESSES,
        PORTS,
        local_ports=LOCAL_PORTS,
    )
    old_rows, new_rows = old_and_new[: len(cases)], old_and_new[len(cases) :]
    probes = [(a, p) for a in ADDRESSES for p in PORTS]
    differences = []
    for case, old_row, new_row in zip(cases, old_rows, new_rows, strict=True):
        for (address, port), old, new in zip(probes, old_row, new_row, strict=True):
            expected = old
            own_loopback = address == "127.0.0.1"
            if own_loopback and _denied_on_own_loopback(case["rules"], port):
                expected = False  # the first change on purpose (module docstring)
            elif own_loopback and _forwarded_inbound(provider, case["rules"], port):
                expected = port in LOCAL_PORTS  # the third: the sandbox's own server
            elif own_loopback and _sent_to_the_host(provider, case["rules"], port):
                expected = True  # the second one: the "host" answers
            if new != expected:
                differences.append((case["rules"], address, port, old, new))
    assert not differences, differences[:5]
    flat = [x for row in old_and_new for x in row]
    assert any(flat) and not all(flat)  # the cases are not trivial: both outcomes occur
    changed = sum(
        o != n
        for o_row, n_row in zip(old_rows, new_rows, strict=True)
        for o, n in zip(o_row, n_row, strict=True)
    )
    assert changed < len(flat) // 4  # the exception is the exception
