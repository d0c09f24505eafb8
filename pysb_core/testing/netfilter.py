"""Probe compiled packet filters in a real kernel, in namespaces the calling test creates.

For the tests of the network-rule compiler (pysb's tests/test_netfilter_differential.py
holds every target and back end to the reference matcher with it) and of a provider that
loads a filter of its own (:func:`pysb_core.providerkit.compile_nft`): a throwaway
user+network namespace ("the sandbox"), joined by a veth pair named ``eth0`` to a second
namespace it creates inside ("the world"), where the documentation addresses are put with
a listener on each port. Each case's loads (argv and standard input, such as ``nft -f -``
and the ruleset) run in the sandbox, then every probe is a real TCP connect from it. With
``local_ports`` the sandbox listens on its own 127.0.0.1 too, so probes of
``127.0.0.1`` show what the filter does to traffic that stays on the sandbox's loopback
(or is NATed to the host's loopback: :data:`HOST_LOOPBACK_GATEWAY`).
No packet leaves the two namespaces: :func:`probe` refuses any other address.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Sequence

import pytest

SBIN = "/usr/sbin:/sbin:/usr/bin:/bin"
#: Where the world is: every probed address outside the sandbox lies in these networks.
WORLD_NETWORKS = ("192.0.2.0/24", "198.51.100.0/24")

#: slirp's name for the host's loopback: the world answers there too, on the same ports, so
#: a probe of 127.0.0.1 that a filter NATs to the host's loopback (``allow ... 127.0.0.1 P
#: out`` behind slirp) succeeds when the world's listener answers.
HOST_LOOPBACK_GATEWAY = "10.0.2.2"

#: The sandbox's addresses on its link to the world (inbound probes connect to them).
SANDBOX_ADDRESSES = ("203.0.113.1", "203.0.113.10")

Load = tuple[list[str], str]  # (argv run in the sandbox, its standard input)

#: Both sides' TCP probe: whether a connect got through (a refusal answers at once).
_CONNECT = textwrap.dedent(
    """
    import socket
    def connect(a, p):
        c = socket.socket(); c.settimeout(1)
        try:
            c.connect((a, p)); return True
        except OSError:
            return False
        finally:
            c.close()
    """
)

#: Runs in the sandbox namespace: builds the world namespace and probes each case.
_PROBER = textwrap.dedent(
    """
    import json, socket, subprocess, sys
    cases, addresses, ports, local, protocols, inbound = json.load(sys.stdin)
    run = lambda *a: subprocess.run(list(a), check=True)
    world_addresses = [a for a in addresses if not a.startswith("127.")]
    world = subprocess.Popen(
        ["unshare", "--net", sys.executable, "-c", WORLD, json.dumps([world_addresses, ports])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    run("ip", "link", "set", "lo", "up")
    run("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "w0")
    run("ip", "link", "set", "w0", "netns", str(world.pid))
    run("ip", "addr", "add", "203.0.113.1/24", "dev", "eth0")
    run("ip", "addr", "add", "203.0.113.10/24", "dev", "eth0")
    run("ip", "link", "set", "eth0", "up")
    for net in NETWORKS:
        run("ip", "route", "add", net, "via", "203.0.113.2")
    # The world plays the host's loopback too, as slirp's gateway 10.0.2.2, where a filter
    # NATs 127.0.0.1 (with route_localnet, as the providers set it).
    run("ip", "route", "add", GATEWAY + "/32", "via", "203.0.113.2")
    with open("/proc/sys/net/ipv4/conf/all/route_localnet", "w") as f:
        f.write("1")
    servers = []
    for a, p in [("127.0.0.1", p) for p in local] + [tuple(t) for t in inbound]:
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((a, p)); s.listen(64); servers.append(s)
    world.stdin.write("go\\n"); world.stdin.flush()
    assert world.stdout.readline() == "ready\\n"
    def tcp(a, p):
        through = connect(a, p)
        drain()
        return through
    def drain():
        for s in servers:
            s.setblocking(False)
            try:
                while True:
                    s.accept()[0].close()
            except OSError:
                pass
    source_ports = iter(range(20000, 32000))
    def udp(a, p):  # the world echoes; a refusal is an ICMP error, seen by recv at once
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.settimeout(1)
        try:
            # A source port of its own: a flow an earlier case allowed is still in the
            # connection tracker (UDP has no close), and would pass as "established".
            c.bind(("0.0.0.0", next(source_ports)))
            c.connect((a, p)); c.send(b"probe"); return c.recv(16) == b"probe"
        except OSError:
            return False
        finally:
            c.close()
    out = []
    for loads in cases:
        for argv, text in loads:
            subprocess.run(argv, input=text.encode(), check=True)
        row = [
            (tcp if proto == "tcp" else udp)(a, p)
            for proto in protocols for a in addresses for p in ports
        ]
        if inbound:  # the world connects to the sandbox's servers
            world.stdin.write(json.dumps(inbound) + "\\n"); world.stdin.flush()
            row += json.loads(world.stdout.readline())
            drain()
        out.append(row)
    world.stdin.close(); world.wait(timeout=10)
    print(json.dumps(out))
    """
)

#: Runs in the world namespace: the addresses, and a listener on each port.
_WORLD = textwrap.dedent(
    """
    import json, socket, subprocess, sys, threading
    addresses, ports = json.loads(sys.argv[1])
    assert sys.stdin.readline() == "go\\n"
    run = lambda *a: subprocess.run(list(a), check=True)
    run("ip", "link", "set", "lo", "up")
    run("ip", "addr", "add", "203.0.113.2/24", "dev", "w0")
    for a in addresses + [GATEWAY]:
        run("ip", "addr", "add", a + "/32", "dev", "lo")
    run("ip", "link", "set", "w0", "up")
    def serve(s):
        while True:
            try:
                s.accept()[0].close()
            except OSError:
                return
    def echo(s):
        while True:
            try:
                data, peer = s.recvfrom(64); s.sendto(data, peer)
            except OSError:
                return
    for p in ports:
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", p)); s.listen(64)
        threading.Thread(target=serve, args=(s,), daemon=True).start()
        for a in addresses + [GATEWAY]:  # each address answers from itself
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((a, p))
            threading.Thread(target=echo, args=(u,), daemon=True).start()
    print("ready", flush=True)
    for line in sys.stdin:  # until the sandbox side is done: connect where it asks
        print(json.dumps([connect(a, p) for a, p in json.loads(line)]), flush=True)
    """
)


def require_tools(*tools: str) -> None:
    """Skip the calling test when a tool the harness or a back end needs is missing."""
    for tool in ("unshare", "ip", *tools):
        if shutil.which(tool, path=SBIN) is None:
            pytest.skip(f"{tool} missing")


def probe(
    cases: list[list[Load]],
    addresses: list[str],
    ports: list[int],
    *,
    local_ports: Sequence[int] = (),
    protocols: Sequence[str] = ("tcp",),
    inbound: Sequence[tuple[str, int]] = (),
) -> list[list[bool]]:
    """For each case (its loads, run in order in the sandbox), whether each probe got
    through: protocols outer, then addresses, ports inner. A TCP probe is a connect; a UDP
    probe is a datagram the world echoes (a refused one gets an ICMP error at once).
    ``127.x`` addresses are the sandbox's own loopback (TCP only: ``local_ports`` listen
    there); every other address must lie in :data:`WORLD_NETWORKS`. Then, for each of
    ``inbound`` (an address of the sandbox, :data:`SANDBOX_ADDRESSES`, and a port, where the
    sandbox listens), whether the world's TCP connect to it got through."""
    import ipaddress

    world = [ipaddress.ip_network(n) for n in WORLD_NETWORKS]
    for a in addresses:
        ip = ipaddress.ip_address(a)
        assert ip.is_loopback or any(ip in n for n in world), f"{a} is not the test's own"
    for a, _ in inbound:
        assert a in SANDBOX_ADDRESSES, f"{a} is not the sandbox's"
    common = f"GATEWAY = {HOST_LOOPBACK_GATEWAY!r}\n{_CONNECT}"
    world_script = common + _WORLD
    script = f"{common}WORLD = {world_script!r}\nNETWORKS = {list(WORLD_NETWORKS)!r}\n{_PROBER}"
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--net", sys.executable, "-c", script],
        input=json.dumps(
            [cases, addresses, ports, list(local_ports), list(protocols), list(inbound)]
        ),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={"PATH": SBIN},
    )
    assert done.returncode == 0, done.stderr
    results: list[list[bool]] = json.loads(done.stdout)
    return results
