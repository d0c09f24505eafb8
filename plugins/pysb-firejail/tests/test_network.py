"""Network allow rules under firejail: filtered on a bridge, or refused -- never the host's.

The bridged test runs entirely inside a network namespace the test creates
(``unshare --net --mount``, with its own sysfs so that firejail sees that namespace's
interfaces): a bridge at 10.0.2.1 (slirp's range, never routed anywhere), two servers on
it, and pysb with ``providers: {firejail: {bridge: ...}}``. No packet leaves the test's
namespace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from pysb_core.testing import BASE_ENV, LoopbackServer, Project, pysb_command, require_provider

BRIDGE_ADDR = "10.0.2.1"  # inside the test's own network namespace only
ALLOWED, BLOCKED = 18001, 18002


@pytest.fixture(autouse=True)
def _firejail() -> None:
    require_provider("firejail")


SERVER = """
import socket, sys, threading, time
socks = []
for port in map(int, sys.argv[2:]):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], port)); s.listen(8); socks.append(s)
def serve(s):
    while True:
        c, _ = s.accept(); c.sendall(b"ok"); c.close()
for s in socks:
    threading.Thread(target=serve, args=(s,), daemon=True).start()
print("listening", flush=True)
time.sleep(60)
"""

CLIENT = f"""
import socket
for port in ({ALLOWED}, {BLOCKED}):
    s = socket.socket()
    s.settimeout(5)
    rc = s.connect_ex(("{BRIDGE_ADDR}", port))
    print(port, rc, s.recv(2).decode() if rc == 0 else "-")
"""


@pytest.mark.skipif(os.getuid() != 0, reason="builds a bridge in a network namespace: root only")
def test_allow_rule_is_filtered_by_firejails_netfilter(project: Project) -> None:
    for tool in ("unshare", "ip", "mount"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is needed to build the test's own network namespace")
    project.profile(
        "version: 1\n"
        "providers: {firejail: {bridge: pysbtest0}}\n"
        "network:\n"
        f"  - allow tcp {BRIDGE_ADDR} {ALLOWED} out\n"
    )
    (project.root / "client.py").write_text(CLIENT)
    (project.root / "server.py").write_text(textwrap.dedent(SERVER))
    pysb = " ".join(pysb_command())
    script = f"""
        set -e
        mount -t sysfs sysfs /sys
        ip link set lo up
        ip link add pysbtest0 type bridge
        ip addr add {BRIDGE_ADDR}/24 dev pysbtest0
        ip link set pysbtest0 up
        {sys.executable} server.py {BRIDGE_ADDR} {ALLOWED} {BLOCKED} > server.out 2>&1 &
        server=$!
        trap 'kill $server' EXIT
        for i in $(seq 50); do grep -q listening server.out 2>/dev/null && break; sleep 0.1; done
        {pysb} run --provider firejail --no-python-guards client.py
    """
    res = subprocess.run(
        ["unshare", "--net", "--mount", "--fork", "--kill-child", "sh", "-c", script],
        cwd=project.root,
        env=BASE_ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    assert lines[str(ALLOWED)] == "0 ok"  # the allowed port, through the bridge
    assert lines[str(BLOCKED)] == "111 -"  # same host, other port: rejected inside


def test_rule_on_the_hosts_loopback_is_refused(
    project: Project, loopback_server: LoopbackServer
) -> None:
    project.profile(
        "version: 1\n"
        "providers: {firejail: {bridge: lo}}\n"
        f"network:\n  - allow tcp 127.0.0.1 {loopback_server.port} out\n"
    )
    res = project.run("run", "--provider", "firejail", "-c", "print('ran')")
    assert res.returncode == 125
    assert "ran" not in res.stdout
    assert "loopback" in res.stderr
    assert loopback_server.accepted == 0


def test_missing_bridge_names_the_host_setting(project: Project) -> None:
    project.profile(
        "version: 1\n"
        "providers: {firejail: {bridge: pysbnosuch0}}\n"
        f"network:\n  - allow tcp {BRIDGE_ADDR} {ALLOWED} out\n"
    )
    res = project.run("run", "--provider", "firejail", "-c", "print('ran')")
    assert res.returncode == 125
    assert "ran" not in res.stdout
    assert "pysbnosuch0" in res.stderr and "ip link add" in res.stderr
    check = project.run("check", "--provider", "firejail", "--no-python-guards")
    assert check.returncode == 125
    assert "ip link add" in check.stdout + check.stderr
