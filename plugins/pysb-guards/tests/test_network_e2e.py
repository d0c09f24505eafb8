"""``pysb run`` / ``pysb check`` end to end with network rules (subprocess provider).

Real ``pysb`` processes, a real loopback server, real pinning through the built-in resolver
(names come from a test hosts file; the DNS step is pointed at loopback so that no query
ever leaves the machine).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, require_provider, run_pysb, trust_profile


@pytest.fixture
def server() -> Iterator[int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[1]
    s.close()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 svc.pysb.test\n")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    return {"PYSB_HOSTS_FILE": str(hosts), "PYSB_RESOLV_CONF": str(resolv)}


def write_profile(directory: Path, *rules: str) -> Path:
    lines = ["imports: [socket, json]", "network:" if rules else "network: []"]
    lines += [f"  - {r}" for r in rules]
    path = directory / ".pysb.yaml"
    path.write_text("\n".join(lines) + "\n")
    trust_profile(path)  # found, not named: used once trusted
    return path


CONNECT = (
    "import socket, sys\n"
    "socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)\n"
    "print('connected')\n"
)


def test_allowed_and_refused_connections(tmp_path: Path, server: int, env) -> None:
    write_profile(tmp_path, f"allow tcp 127.0.0.1 {server} out")
    ok = run_pysb("run", "-c", CONNECT, "127.0.0.1", str(server), cwd=tmp_path, env=env)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "connected"
    refused = run_pysb("run", "-c", CONNECT, "127.0.0.1", str(server + 1), cwd=tmp_path, env=env)
    assert refused.returncode == 1
    assert "NetworkDeniedError" in refused.stderr
    assert f"allow tcp 127.0.0.1 {server + 1} out" in refused.stderr


def test_denials_reach_the_events_file(tmp_path: Path, server: int, env) -> None:
    write_profile(tmp_path)
    events = tmp_path / "events.jsonl"
    out = run_pysb(
        "run", f"--events={events}", "-c", CONNECT, "127.0.0.1", str(server),
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert out.returncode == 1
    lines = [json.loads(x) for x in events.read_text().splitlines()]
    denials = [e for e in lines if e["guard"] == "network" and e["action"] == "deny"]
    assert len(denials) == 1
    assert denials[0]["layer"] == "python"
    assert denials[0]["suggested_rule"] == f"allow tcp 127.0.0.1 {server} out"
    assert {"time", "pid", "target", "detail"} <= set(denials[0])


def test_net_option_adds_a_rule(tmp_path: Path, server: int, env) -> None:
    write_profile(tmp_path)
    rule = f"allow tcp 127.0.0.1 {server} out"
    ok = run_pysb(
        "run", "--net", rule, "-c", CONNECT, "127.0.0.1", str(server), cwd=tmp_path, env=env
    )
    assert ok.returncode == 0, ok.stderr
    bad = run_pysb(
        "run", "--net", "allow tcp 127.0.0.1 80,, out", "-c", "pass", cwd=tmp_path, env=env
    )
    assert bad.returncode == 125
    assert "empty port" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_deny_beats_allow_end_to_end(tmp_path: Path, server: int, env) -> None:
    write_profile(tmp_path, f"allow tcp 127.0.0.1 {server} out", "deny tcp 127.0.0.0/8 * out")
    out = run_pysb("run", "-c", CONNECT, "127.0.0.1", str(server), cwd=tmp_path, env=env)
    assert out.returncode == 1
    assert "deny tcp 127.0.0.0/8 * out" in out.stderr
    assert ".pysb.yaml:4" in out.stderr


def test_pinned_name_inside_the_sandbox(tmp_path: Path, server: int, env) -> None:
    write_profile(tmp_path, f"allow tcp svc.pysb.test {server} out")
    code = (
        "import json, socket, sys\n"
        "port = int(sys.argv[1])\n"
        "print(json.dumps(sorted({a[4][0] for a in socket.getaddrinfo('svc.pysb.test', port)})))\n"
        "socket.create_connection(('svc.pysb.test', port), 5)\n"
        "try:\n"
        "    socket.getaddrinfo('svc.pysb.test', port + 1)\n"
        "except ConnectionRefusedError as e:\n"
        "    print(type(e).__name__)\n"
    )
    out = run_pysb("run", "-c", code, str(server), cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert json.loads(lines[0]) == ["127.0.0.1"]
    assert lines[1] == "NetworkDeniedError"


def test_unresolvable_hosts(tmp_path: Path, env) -> None:
    write_profile(tmp_path, "allow tcp gone.pysb.test 443 out")
    dropped = run_pysb("run", "-c", "print('ran')", cwd=tmp_path, env=env)
    assert dropped.returncode == 0, dropped.stderr
    assert "gone.pysb.test" in dropped.stderr and "allows nothing" in dropped.stderr
    write_profile(tmp_path, "deny tcp gone.pysb.test * out")
    fatal = run_pysb("run", "-c", "print('ran')", cwd=tmp_path, env=env)
    assert fatal.returncode == 125
    assert "ran" not in fatal.stdout
    assert ".pysb.yaml:3" in fatal.stderr and "gone.pysb.test" in fatal.stderr


def test_check_reports_network_layers(tmp_path: Path, env) -> None:
    write_profile(tmp_path, "allow tcp svc.pysb.test 443 out", "deny any * 25 any")
    # The Python layer's report alone (subprocess, named; the default would add "os").
    out = run_pysb("check", "--json", "--provider", "subprocess", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    rules = {r["rule"]: r for r in report["rules"]}
    assert rules["network: allow tcp svc.pysb.test 443 out"]["layers"] == ["python"]
    assert rules["network: allow tcp svc.pysb.test 443 out"]["source"].endswith(".pysb.yaml:3")
    assert rules["network: deny any * 25 any"]["layers"] == ["python"]


def test_learning_writes_network_rules_by_name(tmp_path: Path, server: int, env) -> None:
    profile = tmp_path / "learned.yaml"
    code = (
        "import socket, sys\nsocket.create_connection(('localhost', int(sys.argv[1])), 5).close()\n"
    )
    out = run_pysb("run", f"--learn={profile}", "-c", code, str(server), cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert f"allow tcp localhost {server} out" in profile.read_text()


def test_partial_mode_denial_crosses_back(tmp_path: Path, server: int, env) -> None:
    (tmp_path / "tools.py").write_text(
        "from pysb_core import sandbox\n\n"
        "@sandbox\n"
        "def reach(port):\n"
        "    import socket\n"
        "    socket.create_connection(('127.0.0.1', port), 5).close()\n"
        "    return 'ok'\n"
    )
    (tmp_path / ".pysb.yaml").write_text(
        f"imports: [socket]\nfiles:\n  expose-ro: [.]\nnetwork:\n"
        f"  - allow tcp 127.0.0.1 {server} out\n"
    )
    (tmp_path / "app.py").write_text(
        "import sys\n"
        "from pysb_core import NetworkDeniedError, sandboxes\n"
        "from tools import reach\n"
        "port = int(sys.argv[1])\n"
        "with sandboxes(profile='.pysb.yaml'):\n"
        "    print(reach(port))\n"
        "    try:\n"
        "        reach(port + 1)\n"
        "    except NetworkDeniedError as e:\n"
        "        print(isinstance(e, ConnectionRefusedError), e.suggested_rule)\n"
    )
    out = subprocess.run(
        [sys.executable, "app.py", str(server)],
        cwd=tmp_path,
        env={**BASE_ENV, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["ok", f"True allow tcp 127.0.0.1 {server + 1} out"]


PINNED_PROBE = (
    "import socket, sys\n"
    "port = int(sys.argv[1])\n"
    "print(sorted({a[4][0] for a in socket.getaddrinfo('svc.pysb.test', port)}))\n"
    "socket.create_connection(('svc.pysb.test', port), 10).close()\n"
    "print('connected')\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', port + 1), 5)\n"
    "    print('reached', port + 1)\n"
    "except OSError as e:\n"
    "    print('refused', type(e).__name__)\n"
)


@pytest.mark.parametrize("guards", [True, False], ids=["guards", "os-only"])
@pytest.mark.parametrize(
    "provider", ["bwrap", "unshare", "landlock", pytest.param("qemu", marks=pytest.mark.slow)]
)
def test_pinned_name_under_os_providers(
    tmp_path: Path, server: int, env, provider: str, guards: bool
) -> None:
    """The pins reach every layer: the Python resolver, the provider's hosts file and filter.
    Without the Python guards the refusal comes from the OS (a plain ConnectionRefusedError),
    or the run does not start when the provider cannot filter by host (Landlock)."""
    require_provider(provider)
    (tmp_path / ".pysb.yaml").write_text(
        "imports: [socket]\nfiles:\n  expose-ro: [.]\nnetwork:\n"
        f"  - allow tcp svc.pysb.test {server} out\n"
    )
    trust_profile(tmp_path / ".pysb.yaml")
    flags = [] if guards else ["--no-python-guards"]
    out = run_pysb(
        "run", "--provider", provider, *flags, "-c", PINNED_PROBE, str(server),
        cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    if provider == "landlock" and not guards:
        assert out.returncode == 125
        assert "svc.pysb.test" in out.stderr
        return
    assert out.returncode == 0, out.stdout + out.stderr
    expected = "NetworkDeniedError" if guards else "ConnectionRefusedError"
    assert out.stdout.splitlines() == ["['127.0.0.1']", "connected", f"refused {expected}"]
