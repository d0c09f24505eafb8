"""End to end through the real CLI: ``pysb run --provider unshare --no-python-guards``.

Only the OS layer is active, so every refusal below is the kernel's: the mount namespace for
files, the nftables ruleset in the sandbox's network namespace for traffic. Clients are C
programs (bash's /dev/tcp, getent, cat). Traffic goes only to the host's 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from pysb_core.testing import LoopbackServer, pysb_command

pytestmark = [pytest.mark.provider("unshare")]


@pytest.fixture(autouse=True)
def _unshare(project):
    from pysb_core.testing import require_provider

    require_provider("unshare")


def profile(*lines: str, network: list[str] = (), files: str = "") -> str:
    text = "version: 1\nlearn: false\nimports: ['*']\napi: {allow: [process-exec]}\n"
    if network:
        text += "network:\n" + "".join(f"  - {r}\n" for r in network)
    if files:
        text += "files:\n" + files
    return text + "".join(f"{ln}\n" for ln in lines)


def run(project, code: str, *args: str, env=None, guards: bool = False):
    flags = [] if guards else ["--no-python-guards"]
    return project.run("run", "--provider", "unshare", *flags, "-c", code, *args, env=env)


PROBES = (
    "import subprocess, sys\n"
    "for target in sys.argv[1:]:\n"
    "    host, port = target.split(':')\n"
    "    r = subprocess.run(['timeout', '10', 'bash', '-c',\n"
    "        f'head -1 < /dev/tcp/{host}/{port} || echo REFUSED'],\n"
    "        capture_output=True, text=True)\n"
    "    print(r.stdout.strip() or 'NOTHING')\n"
)


def test_c_client_reaches_allowed_port_only(project):
    a, b, c = LoopbackServer(), LoopbackServer(), LoopbackServer()
    try:
        ports = sorted([a.port, b.port, c.port])
        project.profile(
            profile(
                network=[
                    f"allow tcp 127.0.0.1 {ports[0]}-{ports[2]} out",
                    f"deny tcp 127.0.0.1 {ports[1]} out",
                ]
            )
        )
        targets = [f"127.0.0.1:{p}" for p in ports] + [f"127.0.0.1:{ports[2] + 1}"]
        r = run(project, PROBES, *targets)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["ok", "REFUSED", "ok", "REFUSED"], r
        assert sorted(s.accepted for s in (a, b, c)) == [0, 1, 1]
    finally:
        for s in (a, b, c):
            s.close()


def test_host_name_rule_resolves_to_the_pin_inside(project, tmp_path):
    srv = LoopbackServer()
    try:
        hosts = tmp_path / "hosts"
        hosts.write_text("127.0.0.1 svc.pysb.test\n127.0.0.1 unlisted.pysb.test\n")
        project.profile(profile(network=[f"allow tcp svc.pysb.test {srv.port} out"]))
        code = (
            "import socket, subprocess\n"
            "g = subprocess.run(['getent', 'hosts', 'svc.pysb.test'], capture_output=True,\n"
            "                   text=True)\n"
            "print(g.stdout.split()[0])\n"
            "print(sorted({a[4][0] for a in socket.getaddrinfo('svc.pysb.test', 80)}))\n"
            "print(subprocess.run(['getent', 'hosts', 'unlisted.pysb.test']).returncode)\n"
            + PROBES.replace("sys.argv[1:]", f"['svc.pysb.test:{srv.port}']")
        )
        r = run(project, code, env={"PYSB_HOSTS_FILE": str(hosts)})
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["127.0.0.1", "['127.0.0.1']", "2", "ok"], r
    finally:
        srv.close()


def test_files_env_and_writes(project, tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.pem").write_text("TOP-SECRET\n")
    rw = project.root / "out"
    rw.mkdir()
    project.profile(profile("env: {KEPT: yes}", files="  expose-ro: [.]\n  expose-rw: [./out]\n"))
    code = (
        "import os, subprocess, sys\n"
        "r = subprocess.run(['/bin/cat', sys.argv[1]], capture_output=True, text=True)\n"
        "print('cat', r.returncode, 'TOP-SECRET' in r.stdout)\n"
        "open('out/w.txt', 'w').write('ok')\n"
        "try:\n"
        "    open('elsewhere.txt', 'w')\n"
        "except OSError as e:\n"
        "    print('write', e.errno)\n"
        "print(sorted(k for k in os.environ if k not in ('LC_CTYPE',)))\n"
    )
    r = run(project, code, str(secret / "key.pem"), env={"LEAKY_SECRET": "x", "KEPT": "1"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "cat 1 False", r
    assert lines[1] == "write 30", r  # EROFS: the exposure is read-only
    assert "LEAKY_SECRET" not in lines[2] and "'KEPT'" in lines[2]
    assert (rw / "w.txt").read_text() == "ok"
    assert not (project.root / "elsewhere.txt").exists()


def test_exit_status_and_signal(project):
    project.profile(profile())
    assert run(project, "import sys; sys.exit(7)").returncode == 7
    r = run(project, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert r.returncode == 128 + signal.SIGTERM


def test_check_shows_the_ruleset(project):
    project.profile(profile(network=["allow tcp 127.0.0.1 8000 out", "deny any 10.0.0.0/8 * out"]))
    r = project.run("check", "--provider", "unshare", "--no-python-guards")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "table inet pysb" in r.stdout
    assert "dnat ip to 10.0.2.2" in r.stdout


def test_bad_provider_option_is_a_profile_error(project):
    project.profile(profile("providers: {unshare: {network-helper: carrier-pigeon}}"))
    r = run(project, "pass")
    assert r.returncode == 125
    assert "network-helper" in r.stderr


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                kids = []
            out += kids
            todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_sigkill_of_pysb_leaves_no_helper_or_namespace(project):
    project.profile(profile(network=["allow tcp 127.0.0.1 9 out", "allow tcp 127.0.0.1 47321 in"]))
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    proc = subprocess.Popen(
        [
            *pysb_command(),
            "run",
            "--profile",  # named: this environment has no HOME for a trust store
            ".pysb.yaml",
            "--provider",
            "unshare",
            "--no-python-guards",
            "-c",
            "import time; print('up', flush=True); time.sleep(300)",
        ],
        cwd=project.root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout.readline() == b"up\n", proc.stderr.read(2000) if proc.poll() else ""
        tree = _descendants(proc.pid)
        names = []
        for p in tree:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                names.append(f.read().split(b"\0")[0])
        assert any(n.endswith((b"slirp4netns", b"pasta", b"sh")) for n in names), names
        assert len(tree) >= 4  # P0, P1, the program, the helper
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 20
    alive = [p for p in tree if _alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in tree if _alive(p)]
    assert alive == []


def test_providers_json_lists_unshare():
    r = subprocess.run([*pysb_command(), "providers", "--json"], capture_output=True, text=True)
    entry = next(p for p in json.loads(r.stdout) if p["name"] == "unshare")
    assert entry["available"] is True
    assert {"tcp-host", "udp-port", "ignore", "rename"} <= set(entry["enforces"])
