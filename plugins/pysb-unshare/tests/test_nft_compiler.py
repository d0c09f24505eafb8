"""The nftables back end of pysb_core.net.netfilter (pure), and that nft accepts what it writes."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from pysb_core.net.netfilter import SLIRP4NETNS, Forward, compile_nft
from pysb_core.net.netns import NetnsNetwork
from pysb_core.net.netns.usernet import Pasta
from pysb_core.policy.netrules import parse_rule


def rules(*texts: str):
    return [parse_rule(t, f"p.yaml:{i + 1}") for i, t in enumerate(texts)]


def out_chain(ruleset: str) -> list[str]:
    body = ruleset.split("chain filter_out {", 1)[1].split("chain filter_in", 1)[0]
    return [ln.strip() for ln in body.strip().splitlines()[1:-1]]


def test_denies_come_before_allows_whatever_the_order():
    c = compile_nft(rules("allow tcp 0.0.0.0/0 443 out", "deny tcp 192.0.2.0/24 443 out"), {})
    lines = out_chain(c.ruleset)
    deny = next(i for i, ln in enumerate(lines) if "192.0.2.0/24" in ln)
    allow = next(i for i, ln in enumerate(lines) if "0.0.0.0/0" in ln)
    assert deny < allow
    assert "reject with tcp reset" in lines[deny]
    assert 'comment "p.yaml:2: deny tcp 192.0.2.0/24 443 out"' in lines[deny]


def test_default_is_reject_and_gateway_is_never_direct():
    lines = out_chain(compile_nft(rules("allow tcp * 443 out"), {}).ruleset)
    assert lines[0] == "ct state established,related accept"
    gateway = next(i for i, ln in enumerate(lines) if ln.startswith("ip daddr 10.0.2.0/24 reject"))
    allow = next(i for i, ln in enumerate(lines) if "dport { 443 } accept" in ln)
    assert gateway < allow
    assert lines[-2:] == ["meta l4proto tcp reject with tcp reset", "reject"]


def test_host_names_become_their_pinned_addresses():
    pins = {"api.example.com": ("192.0.2.7", "2001:db8::7")}
    c = compile_nft(rules("allow tcp api.example.com 443 out"), pins)
    text = c.ruleset
    assert "ip daddr { 192.0.2.7/32 } tcp dport { 443 } accept" in text
    assert "ip6 daddr { 2001:db8::7/128 } tcp dport { 443 } accept" in text
    assert not c.dns  # everything pinned: no resolver at all
    assert "udp dport 53" not in text


def test_unpinned_host_allows_nothing():
    c = compile_nft(rules("allow tcp nowhere.example 443 out"), {})
    assert "443" not in c.ruleset
    assert any("no pinned address" in n for n in c.notes)


def test_ipv4_mapped_rule_is_judged_as_ipv4():
    c = compile_nft(rules("allow udp ::ffff:192.0.2.9 53 out"), {})
    assert "ip daddr { 192.0.2.9/32 } udp dport { 53 } accept" in c.ruleset
    assert "ip6 daddr" not in c.ruleset


def test_wide_rule_opens_the_namespace_resolver_only():
    c = compile_nft(rules("allow tcp 0.0.0.0/0 80,443 out"), {})
    assert c.dns
    assert f"ip daddr {SLIRP4NETNS.resolver} udp dport 53 accept" in c.ruleset
    c2 = compile_nft(rules("allow tcp 0.0.0.0/0 80 out", "deny udp * 53 out"), {})
    assert not c2.dns and "dport 53 accept" not in c2.ruleset


def test_port_ranges_and_lists():
    c = compile_nft(rules("allow tcp 192.0.2.1 80,8000-8010,9000- out"), {})
    assert "tcp dport { 80, 8000-8010, 9000-65535 } accept" in c.ruleset


def test_deny_any_all_ports_blocks_every_protocol():
    c = compile_nft(rules("allow tcp * 443 out", "deny any 198.51.100.0/24 * out"), {})
    assert "ip daddr { 198.51.100.0/24 } reject comment" in c.ruleset


def test_host_loopback_rule_is_dnatted_to_the_gateway():
    c = compile_nft(rules("allow tcp 127.0.0.1 8000 out"), {})
    assert "ip daddr 127.0.0.1 tcp dport { 8000 } dnat ip to 10.0.2.2" in c.ruleset
    assert 'oifname "tap0" ip saddr 127.0.0.0/8 masquerade' in c.ruleset
    assert c.host_loopback and not c.inbound


def test_no_loopback_rule_no_dnat():
    c = compile_nft(rules("allow tcp 192.0.2.1 443 out"), {})
    assert "dnat" not in c.ruleset and not c.host_loopback


def test_inbound_rules_become_forwards_minus_denies():
    c = compile_nft(
        rules("allow tcp 127.0.0.1 8000-8002 in", "deny tcp * 8001 in", "allow udp * 5353 in"), {}
    )
    assert c.inbound == [Forward("tcp", 8000), Forward("tcp", 8002), Forward("udp", 5353)]
    assert 'iifname "tap0" tcp dport 8000 dnat ip to 127.0.0.1' in c.ruleset
    assert "tcp dport 8001 dnat" not in c.ruleset


def test_inbound_all_ports_is_not_forwarded():
    c = compile_nft(rules("allow tcp * * in"), {})
    assert c.inbound == []
    assert any("every port inbound" in n for n in c.notes)


def test_pasta_layout_has_no_nat():
    c = compile_nft(rules("allow tcp 127.0.0.1 8000 out"), {}, Pasta.layout)
    assert "nat" not in c.ruleset
    assert "ip daddr { 127.0.0.1/32 } tcp dport { 8000 } accept" in c.ruleset


def test_network_without_allow_rule_is_disabled():
    net = NetnsNetwork(rules("deny tcp * 22 out"))
    assert not net.enabled
    assert net.describe() == ["network: no allow rule -> own network namespace, loopback only"]
    assert "nameserver" not in net.resolv_text()


def test_hosts_and_resolv_files():
    net = NetnsNetwork(rules("allow tcp a.example 443 out"), {"a.example": ("192.0.2.3",)})
    assert "192.0.2.3\ta.example" in net.hosts_text()
    assert "nameserver" not in net.resolv_text()
    wide = NetnsNetwork(rules("allow tcp * 443 out"))
    assert "nameserver 10.0.2.3" in wide.resolv_text()


CASES = [
    ("allow tcp 127.0.0.1 8000 out",),
    ("allow tcp 0.0.0.0/0 80,443 out", "deny any 10.0.0.0/8 * out", "allow tcp 127.0.0.1 8000 in"),
    ("allow tcp,udp 2001:db8::/32 * out", "deny udp * 53 out", "allow udp * 5353 any"),
    ("allow any * * any", "deny tcp 127.0.0.1 22 out"),
]


@pytest.mark.parametrize("texts", CASES)
def test_nft_accepts_the_ruleset(texts):
    """``nft -c`` (check only) in a throwaway user+net namespace parses every ruleset."""
    if shutil.which("nft", path="/usr/sbin:/sbin:/usr/bin") is None or not shutil.which("unshare"):
        pytest.skip("nft or unshare missing")
    c = compile_nft(rules(*texts), {})
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--net", "nft", "-c", "-f", "-"],
        input=c.ruleset,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/sbin:/sbin:/usr/bin:/bin"},
    )
    assert done.returncode == 0, (done.stderr, c.ruleset)


@pytest.mark.parametrize("texts", CASES)
def test_iptables_restore_accepts_the_fallback(texts):
    """The iptables fallback parses too (``--test``: nothing is loaded)."""
    from pysb_core.net.netfilter import compile_iptables

    tools = [
        shutil.which(t, path="/usr/sbin:/sbin") for t in ("iptables-restore", "ip6tables-restore")
    ]
    if not all(tools) or not shutil.which("unshare"):
        pytest.skip("iptables-restore or unshare missing")
    v4, v6 = compile_iptables(rules(*texts), {})
    for tool, text in zip(tools, (v4, v6), strict=True):
        done = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--net", tool, "--test"],
            input=text,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, (tool, done.stderr, text)


def test_iptables_judges_the_original_destination():
    from pysb_core.net.netfilter import compile_iptables

    v4, _ = compile_iptables(rules("allow tcp 127.0.0.1 8000 out", "deny tcp * 22 out"), {})
    want = "-m conntrack --ctorigdst 127.0.0.1/32 -p tcp -m multiport --dports 8000 -j ACCEPT"
    assert f"-A OUTPUT {want}" in v4
    assert "-j DNAT --to-destination 10.0.2.2" in v4
    deny = v4.index("--dports 22 -j REJECT")
    allow = v4.index("--dports 8000 -j ACCEPT")
    assert deny < allow
