"""The kernel network filter of the unshare provider, with real traffic.

Traffic goes only to servers on the host's 127.0.0.1, reached through the host-loopback
mapping (DNAT to slirp4netns's gateway), or stays inside the sandbox's own namespace. No
Python guard is involved: the clients are bash's /dev/tcp and getent, i.e. C code.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from unshare_helpers import make_plan, py, run_plan, sh, unshare_ok

from pysb_core.errors import SandboxError
from pysb_core.testing import LoopbackServer

pytestmark = [pytest.mark.provider("unshare"), pytest.mark.usefixtures("unshare_ok")]
assert unshare_ok  # the fixture is used through usefixtures

# bash prints the server's line, or a marker when connect() fails; timeout bounds a DROP.
PROBE = "head -1 < /dev/tcp/{host}/{port} || echo REFUSED"


@pytest.fixture
def servers():
    made = [LoopbackServer() for _ in range(3)]
    try:
        yield made
    finally:
        for s in made:
            s.close()


def probe(host: str, port: int) -> str:
    return f"timeout 10 bash -c '{PROBE.format(host=host, port=port)}' 2>/dev/null; echo\n"


def test_allowed_port_reached_other_port_refused(servers):
    a, b, _ = servers
    res = run_plan(
        sh(
            probe("127.0.0.1", a.port) + probe("127.0.0.1", b.port),
            rules=[f"allow tcp 127.0.0.1 {a.port} out"],
        )
    )
    lines = [ln for ln in res.stdout.splitlines() if ln]
    assert lines == ["ok", "REFUSED"], res
    assert a.accepted == 1 and b.accepted == 0


def test_no_rule_means_loopback_only(servers):
    a, _, _ = servers
    res = run_plan(
        sh(
            probe("127.0.0.1", a.port) + "cat /sys/class/net/*/operstate 2>&1; "
            "ls /proc/sys/net/ipv4/conf"
        )
    )
    assert "REFUSED" in res.stdout, res
    assert a.accepted == 0
    assert "tap0" not in res.stdout  # no interface but lo


def test_range_minus_deny(servers):
    ports = sorted(s.port for s in servers)
    low, high = ports[0], ports[-1]
    denied = ports[1]
    res = run_plan(
        sh(
            "".join(probe("127.0.0.1", p) for p in ports),
            rules=[f"allow tcp 127.0.0.1 {low}-{high} out", f"deny tcp 127.0.0.1 {denied} out"],
        )
    )
    lines = [ln for ln in res.stdout.splitlines() if ln]
    assert lines == ["ok", "REFUSED", "ok"], res


def test_address_no_rule_allows_is_refused(servers):
    """Another loopback address, and the user-mode gateway itself, are refused in the
    namespace (nothing is sent out of it)."""
    a, _, _ = servers
    res = run_plan(
        sh(
            probe("127.0.0.2", a.port) + probe("10.0.2.2", a.port),
            rules=[f"allow tcp 127.0.0.1 {a.port} out", "allow tcp 0.0.0.0/0 1-65535 out"],
        )
    )
    lines = [ln for ln in res.stdout.splitlines() if ln]
    assert lines == ["REFUSED", "REFUSED"], res  # the gateway (the host's loopback) is never direct
    assert a.accepted == 0


def test_host_name_pinned_in_hosts_file(servers, tmp_path, monkeypatch):
    """The host resolves names through PYSB_HOSTS_FILE and pins them; inside, getent (C)
    and socket.getaddrinfo agree with the pins, and an unlisted name does not resolve."""
    a, b, _ = servers
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 pinned.pysb.test\n127.0.0.1 other.pysb.test\n")
    monkeypatch.setenv("PYSB_HOSTS_FILE", str(hosts))
    from pysb_core.builtin import dns
    from pysb_core.policy.netrules import parse_rule, pin_hosts

    rule = parse_rule(f"allow tcp pinned.pysb.test {a.port} out")
    pins, _, errors = pin_hosts([rule], dns.resolve(["pinned.pysb.test"]))
    assert pins == {"pinned.pysb.test": ("127.0.0.1",)} and not errors
    code = (
        "import socket,subprocess\n"
        "print(subprocess.run(['getent','hosts','pinned.pysb.test'],capture_output=True,text=True)"
        ".stdout.split()[:2])\n"
        f"print(sorted({{a[4][0] for a in socket.getaddrinfo('pinned.pysb.test', {a.port})}}))\n"
        "print(subprocess.run(['getent','hosts','other.pysb.test']).returncode)\n"
        "try:\n socket.getaddrinfo('other.pysb.test', 80); print('RESOLVED')\n"
        "except socket.gaierror: print('NORESOLVE')\n"
        "print(open('/etc/resolv.conf').read().count('nameserver'))\n"
        f"s=socket.create_connection(('pinned.pysb.test', {a.port}), 10); print(s.recv(3))\n"
        "try:\n"
        f" socket.create_connection(('pinned.pysb.test', {b.port}), 10); print('CONNECTED')\n"
        "except ConnectionRefusedError: print('REFUSED')\n"
    )
    res = run_plan(py(code, rules=[str(rule)], pins=pins))
    assert res.stdout.splitlines() == [
        "['127.0.0.1', 'pinned.pysb.test']",
        "['127.0.0.1']",
        "2",
        "NORESOLVE",
        "0",
        "b'ok\\n'",
        "REFUSED",
    ], res


def test_inbound_rule_forwards_host_port():
    """``allow tcp 127.0.0.1 P in``: the host's 127.0.0.1:P reaches a server bound inside."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "import socket,sys\n"
        f"srv=socket.create_server(('127.0.0.1',{port}))\n"
        "print('listening',flush=True)\n"
        "srv.settimeout(30)\n"
        "c,_=srv.accept(); c.sendall(b'inside\\n'); c.close()\n"
    )
    plan = py(code, rules=[f"allow tcp 127.0.0.1 {port} in"])
    from pysb_unshare import UnshareProvider

    proc = UnshareProvider().launch(plan, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"listening\n"
        got = b""
        for _ in range(50):  # the host-side listener of slirp4netns is already up
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
                    got = c.recv(16)
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
        assert got == b"inside\n"
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for fn in plan.cleanups:
            fn()
    # Once the sandbox is gone the host port is closed again (the helper was killed; the
    # kernel may take a moment to finish its exit).
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 5).close()
        except ConnectionRefusedError:
            break
        except ConnectionResetError:
            pass  # the helper's listener is going away while we connect: look again
        assert time.monotonic() < deadline, "the forwarded port stayed open"
        time.sleep(0.05)


def test_filter_failure_fails_closed(tmp_path, monkeypatch):
    """If the ruleset cannot be loaded, the program never runs and nothing is left."""
    from pysb_core.net.netfilter import nft

    real = nft.compile_nft

    def broken(*a, **kw):
        c = real(*a, **kw)
        c.ruleset = c.ruleset.replace("policy drop", "policy nonsense")
        return c

    monkeypatch.setattr("pysb_core.net.netfilter.nft.compile_nft", broken)
    marker = tmp_path / "ran"
    plan = sh(f"touch {marker}", rules=["allow tcp 127.0.0.1 9 out"], rw=[str(tmp_path)])
    with pytest.raises(SandboxError, match="network filter could not be loaded"):
        run_plan(plan)
    assert not marker.exists()


def test_missing_helper_is_unavailable(monkeypatch):
    """No slirp4netns/pasta: network rules are refused with the install command."""
    from pysb_core.errors import ProviderUnavailableError
    from pysb_core.net.netns import usernet

    monkeypatch.setattr(usernet.Slirp4netns, "binary", classmethod(lambda cls: None))
    monkeypatch.setattr(usernet.Pasta, "binary", classmethod(lambda cls: None))
    plan = sh("true", rules=["allow tcp 127.0.0.1 9 out"])
    with pytest.raises(ProviderUnavailableError) as info:
        run_plan(plan)
    assert "apt-get install slirp4netns nftables" in str(info.value)


def test_describe_shows_ruleset():
    from pysb_unshare import UnshareProvider

    plan = make_plan(["true"], rules=["allow tcp 127.0.0.1 8000 out", "deny any 10.0.0.0/8 * out"])
    text = "\n".join(UnshareProvider().describe(plan))
    assert "table inet pysb" in text
    assert "dnat ip to 10.0.2.2" in text
    assert "ip daddr { 10.0.0.0/8 } reject" in text


@pytest.mark.parametrize("helper", ["slirp4netns", "pasta"])
def test_each_helper_filters_and_forwards(helper, servers):
    """Both user-mode helpers: host loopback only on allowed ports, inbound forward works."""
    from pysb_unshare import UnshareProvider

    from pysb_core.net.netns.usernet import choose_helper

    try:
        choose_helper(helper)
    except Exception as exc:  # not installed here
        pytest.skip(str(exc))
    a, b, _ = servers
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    probes = probe("127.0.0.1", a.port) + probe("127.0.0.1", b.port)
    code = (
        "import socket,subprocess\n"
        f"r=subprocess.run(['bash','-c',{probes!r}],capture_output=True,text=True)\n"
        "print(r.stdout.split(), flush=True)\n"
        f"srv=socket.create_server(('127.0.0.1',{port})); srv.settimeout(30)\n"
        "print('listening',flush=True)\n"
        "c,_=srv.accept(); c.sendall(b'inside\\n'); c.close()\n"
    )
    plan = py(code, rules=[f"allow tcp 127.0.0.1 {a.port} out", f"allow tcp 127.0.0.1 {port} in"])
    provider = UnshareProvider({"network-helper": helper})
    proc = provider.launch(plan, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"['ok', 'REFUSED']\n"
        assert proc.stdout.readline() == b"listening\n"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            assert c.recv(16) == b"inside\n"
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for fn in plan.cleanups:
            fn()
    assert b.accepted == 0


class UdpEcho:
    """A UDP echo server on the host's 127.0.0.1 (bounded: closed by the test)."""

    def __init__(self) -> None:
        import threading

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(512)
            except OSError:
                continue
            self.seen += 1
            self.sock.sendto(b"echo:" + data, addr)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


def test_udp_rule_by_port():
    a, b = UdpEcho(), UdpEcho()
    try:
        code = (
            "import socket, sys\n"
            "for port in sys.argv[1:]:\n"
            "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)\n"
            "    s.connect(('127.0.0.1', int(port)))\n"
            "    try:\n"
            "        s.send(b'hi'); print(s.recv(64).decode())\n"
            "    except OSError as e:\n"
            "        print(type(e).__name__)\n"
        )
        plan = make_plan(
            [sys.executable, "-c", code, str(a.port), str(b.port)],
            rules=[f"allow udp 127.0.0.1 {a.port} out"],
        )
        res = run_plan(plan)
        # refused in the namespace: the kernel fails send() (EPERM) or reports the ICMP
        out = res.stdout.split()
        assert out[0] == "echo:hi", res
        assert out[1] in ("PermissionError", "ConnectionRefusedError"), res
        assert a.seen == 1 and b.seen == 0
    finally:
        a.close()
        b.close()


def test_describe_names_the_fix_when_helpers_are_missing(monkeypatch):
    from pysb_unshare import UnshareProvider

    from pysb_core.net.netns import usernet

    monkeypatch.setattr(usernet.Slirp4netns, "binary", classmethod(lambda cls: None))
    monkeypatch.setattr(usernet.Pasta, "binary", classmethod(lambda cls: None))
    plan = make_plan(["true"], rules=["allow tcp 127.0.0.1 8000 out"])
    text = "\n".join(UnshareProvider().describe(plan))
    assert "cannot be enforced here" in text
    assert "apt-get install slirp4netns nftables" in text


def test_iptables_fallback_without_nft(servers, monkeypatch):
    """No ``nft`` on the host: the same filter is loaded with iptables-restore."""
    import shutil as _shutil

    from pysb_core.net.netns import session

    if not (
        _shutil.which("iptables-restore", path="/usr/sbin:/sbin")
        and _shutil.which("ip6tables-restore", path="/usr/sbin:/sbin")
    ):
        pytest.skip("iptables-restore is not installed")
    real = session._which
    monkeypatch.setattr(session, "_which", lambda name: None if name == "nft" else real(name))
    a, b, c = servers
    ports = sorted([a.port, b.port, c.port])
    plan = sh(
        "".join(probe("127.0.0.1", p) for p in ports) + probe("10.0.2.2", ports[0]),
        rules=[
            f"allow tcp 127.0.0.1 {ports[0]}-{ports[2]} out",
            f"deny tcp 127.0.0.1 {ports[1]} out",
            "allow tcp 0.0.0.0/0 1-65535 out",
        ],
    )
    from pysb_unshare import UnshareProvider

    text = "\n".join(UnshareProvider().describe(plan))
    assert "iptables-restore" in text and "+ iptables" in text
    res = run_plan(plan)
    lines = [ln for ln in res.stdout.splitlines() if ln]
    assert lines == ["ok", "REFUSED", "ok", "REFUSED"], res
