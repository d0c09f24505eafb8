"""Differential test of the iptables back end (``pysb_core.netns.iptables``, what firejail's
network namespace loads): the kernel, running the compiled rulesets, decides every probe
exactly as pysb's reference matcher (``pysb_core.netrules.NetworkMatcher``) does -- as
plugins/pysb-unshare/tests/test_nft_differential.py checks for the nftables back end.

Random rule sets (seeded, so a failure reproduces) are compiled and loaded with
``iptables-restore`` / ``ip6tables-restore`` into a throwaway user+network namespace that
this test creates; documentation addresses are put on its loopback with listeners behind
them, and each probe is a real TCP connect. No packet leaves that namespace.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import textwrap

import pytest

from pysb_core.netns.iptables import compile_iptables
from pysb_core.netrules import NetworkMatcher, parse_rule

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

PROBER = textwrap.dedent(
    """
    import json, socket, subprocess, sys
    cases, addresses, ports = json.load(sys.stdin)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for a in addresses:
        subprocess.run(["ip", "addr", "add", a + "/32", "dev", "lo"], check=True)
    servers = []
    for p in ports:
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", p)); s.listen(64); servers.append(s)
    out = []
    for v4, v6 in cases:
        subprocess.run(["iptables-restore"], input=v4.encode(), check=True)
        subprocess.run(["ip6tables-restore"], input=v6.encode(), check=True)
        row = []
        for a in addresses:
            for p in ports:
                c = socket.socket(); c.settimeout(3)
                try:
                    c.connect((a, p)); row.append(True)
                    for s in servers:
                        s.setblocking(False)
                        try:
                            s.accept()[0].close()
                        except OSError:
                            pass
                except OSError:
                    row.append(False)
                finally:
                    c.close()
        out.append(row)
    print(json.dumps(out))
    """
)


def random_rules(rng: random.Random) -> list[str]:
    rules = []
    for _ in range(rng.randint(1, 5)):
        action = rng.choice(["allow", "allow", "deny"])
        proto = rng.choice(["tcp", "tcp", "udp", "any"])
        rules.append(f"{action} {proto} {rng.choice(NETWORKS)} {rng.choice(PORT_SPECS)} out")
    return rules


@pytest.mark.slow
def test_kernel_running_the_iptables_rulesets_agrees_with_the_reference_matcher() -> None:
    for tool in ("unshare", "ip"):
        if shutil.which(tool, path=SBIN) is None:
            pytest.skip(f"{tool} missing")
    if shutil.which("iptables-restore", path=SBIN) is None:
        pytest.skip("iptables-restore missing")
    rng = random.Random(20261)
    cases = [random_rules(rng) for _ in range(40)]
    compiled = [compile_iptables([parse_rule(r) for r in rules], PINS) for rules in cases]
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--net", sys.executable, "-c", PROBER],
        input=json.dumps([compiled, ADDRESSES, PORTS]),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"PATH": SBIN},
    )
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
