"""Differential test of the one network-rule compiler (:mod:`pysb_core.netfilter`), for every
back end and every provider's target: the kernel, running the compiled rules, decides every
probe exactly as pysb's reference matcher (``pysb_core.netrules.NetworkMatcher``) does.

Back ends: nftables and iptables for the namespace providers (unshare, bwrap: slirp4netns
or pasta in front), nftables for the qemu guest (QEMU's slirp), iptables for firejail's
bridge. Random rule sets (seeded, so a failure reproduces) are compiled and loaded one
after the other.

Each back end runs in a throwaway user+network namespace this test creates ("the
sandbox"), joined by a veth pair named ``eth0`` to a second namespace it creates inside
("the world"), where documentation addresses are put with listeners behind them. The
rules are loaded in the sandbox, and each probe is a real TCP connect from it. No packet
leaves the two namespaces.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest

from pysb_core.netfilter import SLIRP4NETNS, FilterTarget, compile_iptables, compile_nft
from pysb_core.netrules import NetworkMatcher, parse_rule

Load = tuple[list[str], str]  # (argv run in the sandbox, its standard input)
Compile = Callable[[list[str]], list[Load]]

ADDRESSES = ["192.0.2.7", "192.0.2.9", "192.0.2.130", "198.51.100.5", "198.51.100.200"]
PORTS = [8001, 8002, 8003, 8004]
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
SBIN = "/usr/sbin:/sbin:/usr/bin:/bin"

#: Runs in the sandbox namespace: builds the world namespace and probes each case.
PROBER = textwrap.dedent(
    """
    import json, os, socket, subprocess, sys, time
    cases, addresses, ports = json.load(sys.stdin)
    run = lambda *a: subprocess.run(list(a), check=True)
    world = subprocess.Popen(
        ["unshare", "--net", sys.executable, "-c", WORLD, json.dumps([addresses, ports])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    run("ip", "link", "set", "lo", "up")
    run("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "w0")
    run("ip", "link", "set", "w0", "netns", str(world.pid))
    run("ip", "addr", "add", "203.0.113.1/24", "dev", "eth0")
    run("ip", "link", "set", "eth0", "up")
    for net in ("192.0.2.0/24", "198.51.100.0/24"):
        run("ip", "route", "add", net, "via", "203.0.113.2")
    world.stdin.write("go\\n"); world.stdin.flush()
    assert world.stdout.readline() == "ready\\n"
    out = []
    for loads in cases:
        for argv, text in loads:
            subprocess.run(argv, input=text.encode(), check=True)
        row = []
        for a in addresses:
            for p in ports:
                c = socket.socket(); c.settimeout(3)
                try:
                    c.connect((a, p)); row.append(True)
                except OSError:
                    row.append(False)
                finally:
                    c.close()
        out.append(row)
    world.stdin.close(); world.wait(timeout=10)
    print(json.dumps(out))
    """
)

#: Runs in the world namespace: the addresses, and a listener on each port.
WORLD = textwrap.dedent(
    """
    import json, socket, subprocess, sys, threading
    addresses, ports = json.loads(sys.argv[1])
    assert sys.stdin.readline() == "go\\n"
    run = lambda *a: subprocess.run(list(a), check=True)
    run("ip", "link", "set", "lo", "up")
    run("ip", "addr", "add", "203.0.113.2/24", "dev", "w0")
    for a in addresses:
        run("ip", "addr", "add", a + "/32", "dev", "lo")
    run("ip", "link", "set", "w0", "up")
    def serve(s):
        while True:
            try:
                s.accept()[0].close()
            except OSError:
                return
    for p in ports:
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", p)); s.listen(64)
        threading.Thread(target=serve, args=(s,), daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()  # until the sandbox side is done
    """
)


def _nft(target: FilterTarget) -> Compile:
    def compile_case(rules: list[str]) -> list[Load]:
        text = compile_nft([parse_rule(r) for r in rules], PINS, target).ruleset
        return [(["nft", "flush", "ruleset"], ""), (["nft", "-f", "-"], text)]

    return compile_case


def _iptables(target: FilterTarget) -> Compile:
    def compile_case(rules: list[str]) -> list[Load]:
        v4, v6 = compile_iptables([parse_rule(r) for r in rules], PINS, target)
        return [(["iptables-restore"], v4), (["ip6tables-restore"], v6)]

    return compile_case


def _back_ends() -> dict[str, tuple[Compile, str]]:
    from pysb_firejail.network import BRIDGE_NETWORK
    from pysb_qemu.netfilter import GUEST_NETWORK

    from pysb_core.netns.usernet import Pasta

    return {
        "slirp4netns-nft": (_nft(SLIRP4NETNS), "nft"),
        "slirp4netns-iptables": (_iptables(SLIRP4NETNS), "iptables-restore"),
        "pasta-nft": (_nft(Pasta.layout), "nft"),
        "qemu-guest-nft": (_nft(GUEST_NETWORK), "nft"),
        "firejail-bridge-iptables": (_iptables(BRIDGE_NETWORK), "iptables-restore"),
    }


BACK_ENDS = _back_ends()


def random_rules(rng: random.Random) -> list[str]:
    rules = []
    for _ in range(rng.randint(1, 5)):
        action = rng.choice(["allow", "allow", "deny"])
        proto = rng.choice(["tcp", "tcp", "udp", "any"])
        rules.append(f"{action} {proto} {rng.choice(NETWORKS)} {rng.choice(PORT_SPECS)} out")
    return rules


@pytest.mark.slow
@pytest.mark.parametrize("back_end", sorted(BACK_ENDS))
def test_kernel_running_the_rules_agrees_with_the_reference_matcher(back_end: str) -> None:
    compile_case, tool = BACK_ENDS[back_end]
    for needed in ("unshare", "ip", tool):
        if shutil.which(needed, path=SBIN) is None:
            pytest.skip(f"{needed} missing")
    rng = random.Random(20262)
    cases = [random_rules(rng) for _ in range(30)]
    loads = [compile_case(rules) for rules in cases]
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--net", sys.executable, "-c",
         f"WORLD = {WORLD!r}\n{PROBER}"],
        input=json.dumps([loads, ADDRESSES, PORTS]),
        capture_output=True, text=True, timeout=600, check=False, env={"PATH": SBIN},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    mismatches = []
    for rules, row in zip(cases, results, strict=True):
        matcher = NetworkMatcher([parse_rule(r) for r in rules], PINS)
        probes = [(a, p) for a in ADDRESSES for p in PORTS]
        for (a, p), kernel in zip(probes, row, strict=True):
            expected = matcher.check("tcp", a, p, "out")[0]
            if kernel != expected:
                mismatches.append((rules, a, p, kernel, expected))
    assert not mismatches, mismatches[:5]
    flat = [x for row in results for x in row]
    assert any(flat) and not all(flat)  # the cases are not trivial: both outcomes occur
