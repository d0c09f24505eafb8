"""Unit tests of the one network-rule compiler (pysb_core.net.netfilter): the decisions that
depend on the target, and the bugs fixed when the compilers became one. The kernel's view
is in test_netfilter_differential.py and test_netfilter_before_after.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from pysb_core.net.netfilter import (
    SLIRP4NETNS,
    FilterTarget,
    Forward,
    compile_iptables,
    compile_nft,
    plan_filter,
)
from pysb_core.policy import PortRange
from pysb_core.policy.netrules import parse_rule

BRIDGE = FilterTarget.bridge("eth0")
QEMU_LIKE = FilterTarget(name="guest", uplink="eth0", guest="10.0.2.15", open_loopback=True)


def rules(*texts: str, source: str = "p.yaml"):
    return [parse_rule(t, f"{source}:{i + 1}") for i, t in enumerate(texts)]


def chain(ruleset: str, name: str) -> list[str]:
    body = ruleset.split(f"chain {name} {{", 1)[1].split("}\n", 1)[0]
    return [ln.strip().split(" comment ")[0] for ln in body.strip().splitlines()[1:]]


def test_an_open_loopback_comes_after_the_denies_and_before_the_allows() -> None:
    rs = rules("allow tcp * 443 out", "deny tcp * 22 out")
    out = chain(compile_nft(rs, {}, QEMU_LIKE).ruleset, "filter_out")
    assert out.index("tcp dport { 22 } reject with tcp reset") < out.index('oifname "lo" accept')
    assert out.index('oifname "lo" accept') < out.index("tcp dport { 443 } accept")
    v4, _ = compile_iptables(rs, {}, QEMU_LIKE)
    lines = [ln.split(" -m comment")[0] for ln in v4.splitlines()]
    deny = lines.index(
        "-A OUTPUT -p tcp -m multiport --dports 22 -j REJECT --reject-with tcp-reset"
    )
    assert deny < lines.index("-A OUTPUT -o lo -j ACCEPT")
    assert 'oifname "lo" accept' not in compile_nft(rs, {}).ruleset  # the host's loopback


def test_a_bridge_judges_in_rules_by_their_real_address_and_forwards_nothing() -> None:
    rs = rules("allow tcp 127.0.0.1 8000 in", "allow tcp 0.0.0.0/0 9000 in")
    bridged = plan_filter(rs, {}, BRIDGE)
    assert [m.networks for m in bridged.in_allow] == [
        (parse_net("127.0.0.1/32"),),
        (parse_net("0.0.0.0/0"),),
    ]
    assert bridged.inbound == [] and not bridged.nat and not bridged.dns
    behind_helper = plan_filter(rs, {}, SLIRP4NETNS)
    assert [m.networks for m in behind_helper.in_allow] == [(), ()]  # by port alone
    assert behind_helper.inbound == [Forward("tcp", 8000), Forward("tcp", 9000)]


def parse_net(text: str):
    import ipaddress

    return ipaddress.ip_network(text)


def test_a_bridge_has_no_helper_addresses_and_lets_neighbour_discovery_through() -> None:
    rs = rules("allow tcp * 443 out")
    text = compile_nft(rs, {}, BRIDGE).ruleset
    assert "10.0.2" not in text and "nd-neighbor-solicit" in text
    v4, v6 = compile_iptables(rs, {}, BRIDGE)
    assert "10.0.2" not in v4 and "*nat" not in v4
    assert "-A INPUT -p ipv6-icmp --icmpv6-type 136 -j ACCEPT" in v6.splitlines()
    assert "icmpv6" not in compile_nft(rs, {}).ruleset  # behind a helper: no link to discover


def test_an_in_rule_on_another_local_address_is_noted_not_forwarded() -> None:
    compiled = compile_nft(rules("allow tcp 192.0.2.5 80 in"), {})
    assert compiled.inbound == []
    assert any("other than the loopback" in n and "p.yaml:1" in n for n in compiled.notes)


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::"])
def test_an_in_rule_on_the_wildcard_address_is_every_local_address(wildcard: str) -> None:
    """A server bound on the wildcard takes connections to every local address: behind a
    helper its ports are forwarded from the host's loopback as for ``127.0.0.1``; on a
    bridge its connections to the sandbox's real addresses are accepted. ``0.0.0.0`` is
    the IPv4 addresses, ``::`` every address (a dual-stack socket). Before, only packets
    addressed to the wildcard itself (none) matched and nothing was forwarded."""
    rs = rules(f"allow tcp {wildcard} 8000 in")
    behind_helper = plan_filter(rs, {}, SLIRP4NETNS)
    assert behind_helper.inbound == [Forward("tcp", 8000)] and behind_helper.nat
    assert [m.networks for m in behind_helper.in_allow] == [()] and not behind_helper.notes
    assert "tcp dport 8000 dnat ip to 127.0.0.1" in compile_nft(rs, {}).ruleset
    assert plan_filter(rs, {}, QEMU_LIKE).inbound == [Forward("tcp", 8000)]
    bridged = plan_filter(rs, {}, BRIDGE)
    every = () if wildcard == "::" else (parse_net("0.0.0.0/0"),)
    assert [m.networks for m in bridged.in_allow] == [every] and bridged.inbound == []
    # A deny on the wildcard denies every local address: no forward, whatever else allows.
    denied = rules("allow tcp 127.0.0.1 8000 in", f"deny tcp {wildcard} 8000 in")
    assert plan_filter(denied, {}, SLIRP4NETNS).inbound == []


def test_a_single_address_cidr_on_the_wildcard_is_not_widened() -> None:
    """Only the wildcard address as a server binds it: ``0.0.0.0/32`` is a CIDR and
    stands for itself (``0.0.0.0/0`` already means every address)."""
    compiled = compile_nft(rules("allow tcp 0.0.0.0/32 8000 in"), {})
    assert compiled.inbound == [] and "other than the loopback" in compiled.notes[0]


def test_port_zero_is_never_forwarded() -> None:
    """``allow tcp 127.0.0.1 0-2 in`` forwarded host port 0 (a random port, never the
    sandbox's) before the compilers became one."""
    compiled = compile_nft(rules("allow tcp 127.0.0.1 0-2 in"), {})
    assert compiled.inbound == [Forward("tcp", 1), Forward("tcp", 2)]


def test_iptables_keeps_an_ephemeral_in_rule_off_the_outgoing_loopback() -> None:
    """A learned ``allow ... 127.0.0.1 32768-60999 in`` (a bind to port 0) let the program
    connect out to any of those loopback ports in the iptables back end (the nft one and
    the reference matcher never did)."""
    rs = rules("allow tcp 127.0.0.1 32768-60999 in")
    v4, v6 = compile_iptables(rs, {})
    assert "-o lo" not in v4 + v6
    assert "-A INPUT -p tcp -m multiport --dports 32768:60999 -j ACCEPT" in v4
    assert 'oifname "lo"' not in compile_nft(rs, {}).ruleset


@pytest.mark.parametrize("target", [SLIRP4NETNS, QEMU_LIKE, BRIDGE], ids=lambda t: t.name)
def test_a_long_or_quoted_profile_path_still_makes_a_valid_ruleset(target: FilterTarget) -> None:
    """nft refuses a comment over 128 characters, the comments were cut at 250 with their
    closing quote, and a ``"`` in the profile's path ended them early: ``nft -f`` refused
    the whole ruleset (the run failed closed, but could not start at all)."""
    source = "/srv/" + "deep/" * 60 + 'say "hi"/.pysb.yaml'
    compiled = compile_nft(
        rules("allow tcp * 443 out", "deny udp * 53 out", source=source), {}, target
    )
    comments = [ln.split(" comment ", 1)[1] for ln in compiled.ruleset.splitlines() if "deep" in ln]
    assert len(comments) == 2
    for comment in comments:
        assert comment.startswith('"') and comment.endswith(' out"') and comment.count('"') == 2
        assert len(comment.encode()) <= 128 + 2  # nft's limit, and the quotes
    if shutil.which("nft", path="/usr/sbin:/sbin") is None or os.geteuid() != 0:
        pytest.skip("nft --check needs nft and root")
    check = subprocess.run(
        ["nft", "--check", "-f", "-"], input=compiled.ruleset, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


def test_naming_a_target_does_not_load_the_compiler() -> None:
    """A provider may build its FilterTarget at import time (every run imports it); the
    compiler (``ipaddress``, ``netrules``) loads only when a filtered run compiles."""
    code = (
        "import sys; from pysb_core.providerkit import FilterTarget; FilterTarget.bridge(); "
        "print(sorted({'ipaddress', 'pysb_core.policy.netrules', 'pysb_core.net.netfilter.plan'} "
        "& set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize(
    "in_rule", ["allow tcp ::1 32768-60999 in", "allow tcp 127.0.0.1 32768-60999 in"]
)
def test_an_out_rule_to_a_host_port_is_forwarded_whatever_the_in_rules_say(in_rule: str) -> None:
    """Issue 27: a learned ``in`` rule on the ephemeral range (urllib3's bind of ``::1``
    port 0) dropped the forward of ``allow tcp 127.0.0.1 44825 out`` (a host service on an
    ephemeral port), in both back ends: the learned client got ECONNREFUSED."""
    rs = rules("allow tcp 127.0.0.1 44825 out", in_rule)
    compiled = compile_nft(rs, {})
    assert compiled.host_loopback == [("tcp", (PortRange(44825, 44825),))], compiled.notes
    dnat = [ln.strip() for ln in compiled.ruleset.splitlines() if "dnat ip to" in ln]
    assert dnat == ["ip daddr 127.0.0.1 tcp dport { 44825 } dnat ip to 10.0.2.2"]
    v4, _ = compile_iptables(rs, {})
    assert "--dports 44825 -j DNAT --to-destination 10.0.2.2" in v4, v4


def test_the_ephemeral_range_out_rule_still_reaches_the_programs_own_servers() -> None:
    """What learning writes for a client of the program's own port-0 server stays inside."""
    rs = rules("allow tcp 127.0.0.1 32768-60999 in", "allow tcp 127.0.0.1 32768-60999 out")
    compiled = compile_nft(rs, {})
    assert compiled.host_loopback == [] and "dnat" not in compiled.ruleset
    # an IPv6-only server does not make the IPv4 loopback's ephemeral ports its own
    v6only = rules("allow tcp ::1 32768-60999 in", "allow tcp 127.0.0.1 * out")
    assert "!=" not in compile_nft(v6only, {}).ruleset
