"""Acceptance: ``pysb run --provider firejail --no-python-guards`` enforces the profile.

Only the OS layer is active, and the probes are C programs (``/bin/cat``, ``/bin/sh``,
``/usr/bin/env``) started by the sandboxed interpreter, so nothing here depends on the
Python guards. A firejail that cannot run here is a skip, or a failure when CI requires
it (``PYSB_REQUIRE_PROVIDERS=firejail``).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from pysb_core.testing import LoopbackServer, Project, require_provider

RUN = ("run", "--provider", "firejail", "--no-python-guards")


@pytest.fixture(autouse=True)
def _firejail() -> None:
    require_provider("firejail")


def _profile(project: Project, *lines: str) -> None:
    project.profile(
        "\n".join(["version: 1", "api: {allow: [process-exec]}", 'imports: ["*"]', *lines]) + "\n"
    )


def _sh(project: Project, script: str, **kwargs: object):
    """Run ``/bin/sh -c script`` from a sandboxed Python program."""
    code = (
        "import subprocess, sys\n"
        f"r = subprocess.run(['/bin/sh', '-c', {script!r}])\n"
        "sys.exit(r.returncode)\n"
    )
    return project.run(*RUN, "-c", code, **kwargs)


def test_secret_outside_exposures_is_unreadable(project: Project, tmp_path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    (project.root / "data").mkdir()
    (project.root / "data" / "ok.txt").write_text("visible")
    _profile(project, "files: {expose-ro: [./data]}")
    res = _sh(project, f"cat {secret}; cat /etc/shadow; cat data/ok.txt")
    assert "TOP-SECRET" not in res.stdout
    assert "root:" not in res.stdout
    assert res.stdout.endswith("visible"), res.stderr
    assert res.stderr.count("No such file") == 2, res.stderr


def test_writes_only_inside_expose_rw(project: Project, tmp_path) -> None:
    (project.root / "out").mkdir()
    (project.root / "in").mkdir()
    # Straight in /tmp: the directories firejail makes to hold a whitelisted path below
    # /tmp are root's, so a normal user could not write next to the project there.
    outside = Path("/tmp") / f"pysb-outside-{os.getpid()}-{tmp_path.name}.txt"
    _profile(project, "files: {expose-ro: [./in], expose-rw: [./out]}")
    res = _sh(project, "echo written > out/new.txt")
    assert res.returncode == 0, res.stderr
    assert (project.root / "out" / "new.txt").read_text() == "written\n"
    # /pysb-x: the root mount itself (remounted read-only last, after the other steps)
    targets = ("in/x.txt", "/pysb-x", "/usr/pysb-x", "/etc/pysb-x", "/root/pysb-x", "/work/pysb-x")
    for target in targets:
        res = _sh(project, f"echo no > {target}")
        assert res.returncode != 0, target
        # read-only, absent, or (a top-level directory firejail blacklists because nothing
        # below it is exposed, e.g. when the checkout lives elsewhere) not accessible
        refusals = ("Read-only", "No such file", "Permission denied")
        assert any(r in res.stderr for r in refusals), res.stderr
        if target.startswith("/"):
            assert not os.path.exists(target), target
    assert not (project.root / "in" / "x.txt").exists()
    # /tmp is a private tmpfs: a write there succeeds but never reaches the host.
    res = _sh(project, f"echo no > {outside} && cat {outside}")
    assert res.stdout == "no\n"
    assert not outside.exists()
    # The profile file itself is never writable, even inside a read-write exposure.
    _profile(project, "files: {expose-rw: [.]}")
    before = (project.root / ".pysb.yaml").read_text()
    res = _sh(project, "echo 'files: {expose-rw: [/]}' >> .pysb.yaml")
    assert res.returncode != 0
    assert (project.root / ".pysb.yaml").read_text() == before


def test_ignored_file_and_directory_are_hidden(project: Project) -> None:
    (project.root / ".env").write_text("API_KEY=SECRET")
    (project.root / ".git").mkdir()
    (project.root / ".git" / "config").write_text("GIT-SECRET")
    (project.root / "app.txt").write_text("app")
    _profile(project, "files: {expose-rw: [.], ignore: [.env, .git]}")
    res = _sh(project, "cat app.txt; cat .env; cat .git/config; ls -A .git; echo x > .env")
    assert res.stdout.startswith("app")
    assert "SECRET" not in res.stdout
    assert "config" not in res.stdout
    assert res.returncode != 0  # the write
    assert (project.root / ".env").read_text() == "API_KEY=SECRET"


def test_environment_is_exactly_the_whitelist(project: Project) -> None:
    _profile(project, "env: {LANG: C.UTF-8, GREETING: hello, SHELL: /bin/zsh}")
    code = "import subprocess; subprocess.run(['/usr/bin/env'])"
    res = project.run(*RUN, "-c", code, env={"PYSB_HOST_ONLY_SECRET": "leak"})
    assert res.returncode == 0, res.stderr
    seen = dict(line.split("=", 1) for line in res.stdout.splitlines())
    # firejail's own additions (container, PROMPT_COMMAND, FIREJAIL_QUIET...) are gone and
    # the values it overrides (SHELL) are the profile's again.
    # TMPDIR: the private temporary directory every sandbox gets (pysb_core.launch.tmpdir).
    assert seen.pop("TMPDIR") == "/tmp"
    assert seen == {"LANG": "C.UTF-8", "GREETING": "hello", "SHELL": "/bin/zsh"}


def test_no_network_without_a_rule(project: Project, loopback_server: LoopbackServer) -> None:
    _profile(project)
    code = (
        "import socket, sys\n"
        "s = socket.socket()\n"
        "s.settimeout(5)\n"
        f"rc = s.connect_ex(('127.0.0.1', {loopback_server.port}))\n"
        "print('connect', rc)\n"
        "sys.exit(0 if rc else 1)\n"
    )
    res = project.run(*RUN, "-c", code)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "connect 111" in res.stdout  # ECONNREFUSED: the sandbox's own loopback
    assert loopback_server.accepted == 0
    res = project.run(*RUN, "-c", "import socket; print(socket.if_nameindex())")
    assert res.stdout.strip() == "[(1, 'lo')]", res.stderr


def test_network_allow_rule_is_filtered_or_refused_never_run_unfiltered(
    project: Project, loopback_server: LoopbackServer
) -> None:
    """Without a bridge: as root, the namespace pysb builds and filters (pysb_firejail.nsnet)
    lets the allowed port through and nothing else; as a normal user the run is refused
    with pysb's reason and fix (only root can configure firejail's namespace)."""
    other = LoopbackServer()
    try:
        _profile(project, "network:", f"  - allow tcp 127.0.0.1 {loopback_server.port} out")
        code = (
            "import socket\n"
            f"for port in ({loopback_server.port}, {other.port}):\n"
            "    s = socket.socket(); s.settimeout(5)\n"
            "    print(port, s.connect_ex(('127.0.0.1', port)))\n"
        )
        res = project.run(*RUN, "-c", code)
        if os.getuid() == 0:
            assert res.returncode == 0, res.stderr
            assert res.stdout.split() == [str(loopback_server.port), "0", str(other.port), "111"]
            assert loopback_server.accepted == 1
        else:
            assert res.returncode == 125
            assert res.stdout == ""
            assert "firejail" in res.stderr and "bwrap or unshare" in res.stderr, res.stderr
            assert loopback_server.accepted == 0
        assert other.accepted == 0
    finally:
        other.close()


def test_memory_limit_stops_an_allocation_bomb(project: Project) -> None:
    _profile(project, "limits: {memory: 256M}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    res = project.run(*RUN, "-c", "x = bytearray(2 * 1024**3); print('allocated')")
    assert res.returncode != 0
    assert "allocated" not in res.stdout
    assert "MemoryError" in res.stderr
    assert "memory" in res.stderr
    # The host process is unaffected: it runs on, and the bomb never got its 2 GiB.
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert after - before < 1024 * 1024  # KiB: less than 1 GiB resident in any child
    ok = project.run(*RUN, "-c", "x = bytearray(16 * 1024**2); print('fine')")
    assert ok.returncode == 0 and "fine" in ok.stdout, ok.stderr


def test_processes_limit_stops_a_fork_bomb(project: Project) -> None:
    _profile(project, "limits: {processes: 8}")
    # As root RLIMIT_NPROC does not apply: the provider's pids cgroup does the counting.
    res = _sh(project, "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 1 & done; wait")
    assert "fork" in res.stderr.lower() or "resource" in res.stderr.lower(), res.stderr
    ok = _sh(project, "for i in 1 2 3; do sleep 0.1 & done; wait")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("import sys; sys.exit(3)", 3),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 137),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 143),
    ],
)
def test_exit_status_and_signals_pass_through(project: Project, code: str, status: int) -> None:
    _profile(project)
    assert project.run(*RUN, "-c", code).returncode == status


def test_inherited_descriptors_keep_their_numbers(project: Project) -> None:
    """The payload fd (and any other in plan.pass_fds) reaches the program under its own
    number: the bootstrap reads the policy from it, so a run at all proves it; the
    program's stdin/stdout/stderr are its own."""
    _profile(project)
    res = project.run(*RUN, "-c", "import sys; print(sys.stdin.read().upper())", input="abc")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ABC"


def test_firejails_host_directory_is_not_writable(project: Project) -> None:
    _profile(project)
    res = _sh(project, "touch /run/firejail/pysb-test-x")
    assert res.returncode != 0
    assert not os.path.exists("/run/firejail/pysb-test-x")


def test_exposing_tmp_read_write_reaches_the_host(project: Project, tmp_path) -> None:
    target = tmp_path / "through-tmp.txt"
    _profile(project, "files: {expose-rw: [/tmp]}", "providers: {firejail: {hostname: pysbbox}}")
    res = _sh(project, f"echo via-tmp > {target} && hostname")
    assert res.returncode == 0, res.stderr
    assert target.read_text() == "via-tmp\n"
    assert res.stdout.strip() == "pysbbox"


def test_the_reaper_is_the_programs_parent_and_no_child_of_it(project: Project) -> None:
    """The process that kills what the program leaves behind (``pysb_firejail.child``)
    is the program's parent, the only child of firejail's PID 1: ``os.wait()`` in a
    program that started nothing fails at once as under ``python``; the reaper holds none
    of the program's descriptors, blocks every signal, and its memory is not the
    program's to read (not dumpable: ``/proc/PPID/mem`` is refused)."""
    _profile(project)
    code = (
        "import os\n"
        "try:\n"
        "    os.wait()\n"
        "except ChildProcessError:\n"
        "    print('no child')\n"
        "ppid = os.getppid()\n"
        "comm = open(f'/proc/{ppid}/comm').read().strip()\n"
        "status = dict(l.split(':', 1) for l in open(f'/proc/{ppid}/status'))\n"
        "print(ppid, comm, status['PPid'].strip(), status['SigBlk'].strip())\n"
        "try:\n"
        "    print(sorted(os.listdir(f'/proc/{ppid}/fd')))\n"
        "except PermissionError:\n"
        "    print('fd hidden')\n"
        "try:\n"
        "    open(f'/proc/{ppid}/mem', 'rb').read(1)\n"
        "    print('mem read')\n"
        "except OSError as exc:\n"
        "    print('mem refused', exc.errno)\n"
    )
    res = project.run(*RUN, "-c", code, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "no child"
    ppid, comm, grandparent, blocked = lines[1].split()
    assert (comm, grandparent) == ("pysb-reaper", "1"), lines
    assert int(ppid) != 1
    assert int(blocked, 16) & (1 << 14), lines  # SIGTERM among the blocked
    assert lines[2] in ("[]", "fd hidden"), lines
    assert lines[3].startswith("mem refused"), lines


def test_the_reaper_passes_the_programs_exit_status_on(project: Project) -> None:
    """firejail reports its child's status, which is the reaper's: the reaper exits as
    the program did (``N``, or ``128 + N`` for signal N, as firejail words a signal)."""
    _profile(project)
    for code, expected in (
        ("import sys; sys.exit(7)", 7),
        ("import os; os._exit(0)", 0),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 128 + 15),
        ("raise SystemExit('words')", 1),
    ):
        res = project.run(*RUN, "-c", code, timeout=60)
        assert res.returncode == expected, (code, res.returncode, res.stderr)
