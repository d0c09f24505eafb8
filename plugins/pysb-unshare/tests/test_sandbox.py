"""Files, environment, processes, fds and exit statuses under the unshare provider.

Real programs (``/bin/cat``, bash, the interpreter) run in real namespaces; the Python layer
is absent, so every refusal here is the kernel's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from unshare_helpers import make_plan, py, run_plan, sh, unshare_ok

pytestmark = [pytest.mark.provider("unshare"), pytest.mark.usefixtures("unshare_ok")]
assert unshare_ok


@pytest.fixture
def box(tmp_path):
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key.pem").write_text("TOP-SECRET\n")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "data.txt").write_text("readable\n")
    (tmp_path / "ro" / ".env").write_text("HIDDEN=1\n")
    (tmp_path / "ro" / "certs").mkdir()
    (tmp_path / "ro" / "certs" / "x.pem").write_text("HIDDEN-DIR\n")
    (tmp_path / "rw").mkdir()
    return tmp_path


def test_secret_outside_exposures_unreadable_by_cat(box):
    res = run_plan(
        sh(
            f"/bin/cat {box}/secret/key.pem; echo rc=$?; /bin/cat /etc/shadow; echo rc=$?",
            ro=[box / "ro"],
        )
    )
    assert "TOP-SECRET" not in res.stdout
    assert res.stdout.count("rc=1") == 2, res


def test_exposed_read_only_readable_not_writable(box):
    res = run_plan(
        sh(
            f"cat {box}/ro/data.txt; echo x > {box}/ro/new.txt; echo rc=$?; "
            f"rm {box}/ro/data.txt; echo rc=$?",
            ro=[box / "ro"],
        )
    )
    assert "readable" in res.stdout
    assert res.stdout.count("rc=1") == 2, res
    assert "Read-only file system" in res.stderr
    assert not (box / "ro" / "new.txt").exists()
    assert (box / "ro" / "data.txt").exists()


def test_writes_only_in_expose_rw(box):
    res = run_plan(
        sh(
            f"echo hi > {box}/rw/out.txt; echo rc=$?; echo no > /usr/pysb-probe; echo rc=$?; "
            "echo no > /pysb-probe; echo rc=$?; echo tmp > /tmp/x && cat /tmp/x",
            rw=[box / "rw"],
        )
    )
    assert res.stdout.splitlines()[:3] == ["rc=0", "rc=1", "rc=1"], res
    assert (box / "rw" / "out.txt").read_text() == "hi\n"
    assert not os.path.exists("/usr/pysb-probe") and not os.path.exists("/pysb-probe")
    assert "tmp" in res.stdout  # private /tmp works


def test_private_tmp_is_not_the_host_tmp(tmp_path):
    marker = f"/tmp/pysb-unshare-probe-{os.getpid()}"
    res = run_plan(sh(f"echo x > {marker} && echo made"))
    assert "made" in res.stdout
    assert not os.path.exists(marker)


def test_ignored_paths_are_masked(box):
    res = run_plan(
        sh(
            f"cat {box}/ro/.env; ls -A {box}/ro/certs; cat {box}/ro/data.txt",
            ro=[box / "ro"],
            hidden=[str(box / "ro" / ".env"), str(box / "ro" / "certs")],
        )
    )
    assert "HIDDEN" not in res.stdout, res
    assert "x.pem" not in res.stdout
    assert "readable" in res.stdout


def test_rename_mounts_under_target(box):
    res = run_plan(
        sh(
            "cat /data/data.txt; echo w > /data/new; echo rc=$?",
            renames=[(str(box / "ro"), "/data", False)],
        )
    )
    assert res.stdout.splitlines() == ["readable", "rc=1"], res


def test_protected_profile_not_writable_in_rw(box):
    profile = box / "rw" / ".pysb.yaml"
    profile.write_text("version: 1\n")
    plan = sh(
        f"echo evil >> {profile}; echo rc=$?; echo ok > {box}/rw/other; echo rc=$?", rw=[box / "rw"]
    )
    plan.protected = [str(profile)]
    res = run_plan(plan)
    assert res.stdout.splitlines() == ["rc=1", "rc=0"], res
    assert profile.read_text() == "version: 1\n"


def test_environment_is_exactly_the_plan(monkeypatch):
    monkeypatch.setenv("PYSB_TEST_SECRET", "leak")
    res = run_plan(
        py(
            "import os,json; print(json.dumps(dict(os.environ)))",
            env={"ONLY": "this", "PATH": "/usr/bin:/bin"},
        )
    )
    env = json.loads(res.stdout)
    env.pop("LC_CTYPE", None)  # CPython's own C-locale coercion, not the host's
    assert env == {"ONLY": "this", "PATH": "/usr/bin:/bin"}, res


def test_no_capabilities_and_own_pid_namespace():
    res = run_plan(
        sh(
            "grep -E '^Cap(Prm|Eff|Bnd|Amb)' /proc/self/status; echo pid=$$; "
            "grep NoNewPrivs /proc/self/status; ls /proc | grep -cE '^[0-9]+$'; "
            "umount /usr 2>/dev/null; echo umount=$?"
        )
    )
    caps = [ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith("Cap")]
    assert caps == ["0000000000000000"] * 4, res
    assert "NoNewPrivs:\t1" in res.stdout
    assert "umount=0" not in res.stdout
    nprocs = int(res.stdout.splitlines()[-2])
    assert nprocs <= 5  # init, bash, grep/ls: none of the host's processes


def test_cwd_and_pass_fds(box):
    r, w = os.pipe()
    try:
        plan = sh(f"pwd; echo through-fd >&{w}", ro=[box / "ro"], cwd=str(box / "ro"), pass_fds=[w])
        res = run_plan(plan)
        os.close(w)
        w = -1
        assert res.stdout.strip() == str(box / "ro"), res
        assert os.read(r, 100) == b"through-fd\n"
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import sys; sys.exit(3)", 3),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", -signal.SIGTERM),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
        ("raise SystemExit(0)", 0),
    ],
)
def test_exit_status_and_signal_death_pass_through(code, expected):
    assert run_plan(py(code)).returncode == expected


def test_signal_sent_to_pysb_child_reaches_the_program():
    code = textwrap.dedent(
        """
        import signal, sys, time
        signal.signal(signal.SIGUSR1, lambda *a: sys.exit(42))
        sys.stdout.write("ready\\n"); sys.stdout.flush()
        time.sleep(60)
        """
    )
    from pysb_unshare import UnshareProvider

    plan = py(code)
    proc = UnshareProvider().launch(plan, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=30) == 42
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for fn in plan.cleanups:
            fn()


def test_background_processes_die_with_the_program(tmp_path):
    """Whatever the program leaves running is killed with its PID namespace."""
    pidfile = tmp_path / "bg"
    res = run_plan(sh(f"sleep 300 & echo $! > {pidfile}.inside; echo started", rw=[tmp_path]))
    assert "started" in res.stdout
    # The sleeping child was inside the PID namespace: nothing named 'sleep 300' that we
    # started survives (look only at our own descendants: none are left at all).
    children = _descendants(os.getpid())
    assert not any(b"sleep\x00300" in _cmdline(p) for p in children)


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in os.listdir(f"/proc/{p}/task") if os.path.exists(f"/proc/{p}/task") else []:
            try:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                kids = []
            out += kids
            todo += kids
    return out


KILLME = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path[:0] = {paths!r}
    from unshare_helpers import py
    from pysb_unshare import UnshareProvider
    plan = py("import time; print('up', flush=True); time.sleep(300)",
              rules=["allow tcp 127.0.0.1 9 out", "allow tcp 127.0.0.1 {port} in"])
    proc = UnshareProvider({{"network-helper": {helper!r}}}).launch(plan)
    print(json.dumps({{"sandbox": proc.pid}}), flush=True)
    time.sleep(300)
    """
)


@pytest.mark.parametrize("helper", ["slirp4netns", "pasta"])
def test_sigkill_of_pysb_leaves_nothing_behind(tmp_path, helper):
    """SIGKILL the process that launched the sandbox: the namespace's processes and the
    user-mode helper all go away (lifeline pipe EOF), and the forwarded port closes."""
    import socket

    from pysb_core.net.netns.usernet import choose_helper

    try:
        choose_helper(helper)
    except Exception as exc:  # not installed here
        pytest.skip(str(exc))

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    here = os.path.dirname(os.path.abspath(__file__))
    script = tmp_path / "launcher.py"
    script.write_text(KILLME.format(paths=[here, *sys.path], port=port, helper=helper))
    launcher = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE)
    try:
        info: dict = {}
        while "sandbox" not in info:
            line = launcher.stdout.readline()
            assert line, "the launcher ended early"
            if line.startswith(b"{"):
                info = json.loads(line)
        tree = _descendants(launcher.pid)
        names = {p: _cmdline(p).split(b"\x00")[0] for p in tree}
        assert any(n.endswith(helper.encode()) for n in names.values()), names
        assert info["sandbox"] in tree
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # slirp4netns listens for the inbound rule while the sandbox lives
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
    deadline = time.monotonic() + 20
    alive = tree
    while alive and time.monotonic() < deadline:
        alive = [p for p in tree if _cmdline(p) and _alive(p)]
        time.sleep(0.05)
    assert alive == [], {p: _cmdline(p) for p in alive}
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 5):
        pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_exposing_root_read_only_shows_the_host_and_writes_nothing():
    """The host's tree is the root (nsinit binds it first), read-only (its /tmp is the
    sandbox's private one, so the file lives in /var/tmp); the generated /etc/hosts is
    bound over the host's, which stays as it was."""
    import shutil
    import tempfile

    before = Path("/etc/hosts").read_bytes()
    where = Path(tempfile.mkdtemp(prefix="pysb-rootro-", dir="/var/tmp"))
    try:
        (where / "seen.txt").write_text("host file\n")
        script = f"cat {where}/seen.txt; head -1 /etc/hosts; echo x > {where}/new || echo refused"
        res = run_plan(make_plan(["/bin/sh", "-c", script], ro=["/"]))
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert lines[0] == "host file"
        assert lines[1].startswith("# generated by pysb")
        assert lines[2] == "refused"
        assert not (where / "new").exists()
        assert Path("/etc/hosts").read_bytes() == before
    finally:
        shutil.rmtree(where, ignore_errors=True)


PTY_LAUNCHER = textwrap.dedent(
    """
    import sys
    sys.path[:0] = {paths!r}
    from unshare_helpers import py
    from pysb_unshare import UnshareProvider
    from pysb_core.launch.execute import wait
    import signal
    # Like pysb: a terminal's Ctrl-C is the program's, also while the launch completes.
    signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGINT}})
    plan = py({code!r})
    # As pysb run does: the sandbox in a process group of its own, outside the terminal's
    # foreground group, so the terminal's Ctrl-C reaches the launcher alone, which
    # forwards it (sharing the group, unshare's PID 1 got it too and passed it on: twice).
    proc = UnshareProvider().launch(plan, process_group=0)
    rc = wait(proc)
    for fn in plan.cleanups:
        fn()
    print("rc", rc, flush=True)
    """
)
PTY_PROGRAM = textwrap.dedent(
    """
    import errno, fcntl, sys, termios, time
    try:
        fcntl.ioctl(0, termios.TIOCSTI, b"x")
        print("TIOCSTI-WORKED", flush=True)
    except OSError as exc:
        print("tiocsti", errno.errorcode[exc.errno], flush=True)
    try:
        print("ready", flush=True)  # inside the try: the test presses Ctrl-C right after
        time.sleep(60)
    except KeyboardInterrupt:
        print("INT", flush=True)
        sys.exit(5)
    """
)


def test_terminal_ctrl_c_reaches_program_once_and_tiocsti_is_refused():
    """On a terminal: Ctrl-C reaches the program (exactly once), and the program cannot
    inject input into the terminal (own session, no controlling terminal)."""
    import pty

    here = os.path.dirname(os.path.abspath(__file__))
    script = PTY_LAUNCHER.format(paths=[here, *sys.path], code=PTY_PROGRAM)
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - child
        os.execv(sys.executable, [sys.executable, "-c", script])
    out = b""
    try:
        deadline = time.monotonic() + 60
        while b"ready" not in out and time.monotonic() < deadline:
            out += os.read(fd, 1024)
        os.write(fd, b"\x03")
        while time.monotonic() < deadline:  # until the launcher exits (EOF / EIO)
            try:
                chunk = os.read(fd, 1024)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.waitpid(pid, 0)
        os.close(fd)
    text = out.decode(errors="replace")
    assert "TIOCSTI-WORKED" not in text
    assert "tiocsti E" in text, text  # EPERM (not our terminal) or EIO (legacy TIOCSTI off)
    assert text.count("INT") == 1, text
    assert "rc 5" in text, text


def test_pseudo_terminals_are_the_sandboxs_own():
    """os.openpty and pty.fork work (CPython's test_pty, test_os.test_openpty, asyncio's pty
    tests), from a devpts instance of the sandbox's own: not the host's /dev/pts, whose
    terminals (this user's other sessions) stay out of reach."""
    host_master, host_slave = os.openpty()  # the host's devpts holds at least this one
    try:
        code = textwrap.dedent(
            """
            import json, os, pty, time
            m, s = os.openpty()
            os.write(m, b"ping\\n")
            got = os.read(s, 10)
            pid, fd = pty.fork()
            if pid == 0:
                os.write(1, b"from-child\\n")
                time.sleep(0.2)
                os._exit(0)
            out = os.read(fd, 100)
            os.waitpid(pid, 0)
            print(json.dumps({"name": os.ttyname(s), "got": got.decode(), "child": out.decode(),
                              "dev": os.stat("/dev/pts").st_dev, "pts": os.listdir("/dev/pts")}))
            """
        )
        res = run_plan(py(code))
        assert res.returncode == 0, res
        seen = json.loads(res.stdout.strip().splitlines()[-1])
        assert seen["name"].startswith("/dev/pts/"), seen
        assert seen["got"] == "ping\n" and "from-child" in seen["child"], seen
        assert seen["dev"] != os.stat("/dev/pts").st_dev, seen  # another devpts instance
        host = {n for n in os.listdir("/dev/pts") if n.isdigit()}
        assert len(host) >= 1 and len([n for n in seen["pts"] if n.isdigit()]) <= 2, seen
    finally:
        os.close(host_master)
        os.close(host_slave)


def test_global_sysctls_are_read_only():
    """uid 0 inside may be the host's root (pysb run as root): /proc/sys must not be
    writable. Non-destructive probe: write back the value just read."""
    res = run_plan(
        sh("v=$(cat /proc/sys/vm/swappiness); echo $v > /proc/sys/vm/swappiness; echo rc=$?")
    )
    assert "rc=1" in res.stdout, res
    assert "Read-only file system" in res.stderr


def test_no_nested_user_namespaces():
    """A nested user namespace would hand the program a fresh capability set."""
    res = run_plan(sh("unshare --user --map-root-user true; echo rc=$?"))
    assert "rc=1" in res.stdout, res
    with open("/proc/sys/user/max_user_namespaces") as f:
        assert int(f.read()) > 0  # the host's own limit is untouched


def test_killing_the_sandbox_process_ends_the_namespace():
    """pysb's wall-time limit kills the process it waits on (P0): the PID namespace and,
    after the cleanups, the user-mode helper go with it."""
    from pysb_unshare import UnshareProvider

    plan = py(
        "import time; print('up', flush=True); time.sleep(300)", rules=["allow tcp 127.0.0.1 9 out"]
    )
    proc = UnshareProvider().launch(plan, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"up\n"
        tree = [*_descendants(proc.pid), proc.pid, *_descendants(os.getpid())]
        tree = sorted(set(tree) - {os.getpid()})
        proc.kill()
        proc.wait()
    finally:
        for fn in plan.cleanups:
            fn()
    deadline = time.monotonic() + 20
    alive = [p for p in tree if _alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in tree if _alive(p)]
    assert alive == [], {p: _cmdline(p) for p in alive}


def test_only_the_planned_fds_are_open_inside():
    r, w = os.pipe()
    try:
        res = run_plan(
            py(
                "import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))",
                pass_fds=[w],
            )
        )
    finally:
        os.close(r)
        os.close(w)
    fds = json.loads(res.stdout)
    # 0-2, the passed fd, and the directory fd listdir itself holds (the highest one)
    assert fds[:3] == [0, 1, 2] and w in fds and len(fds) == 5, (fds, res)


def test_callers_session_keyring_is_left_behind():
    """A key in the session keyring of whoever started pysb is not reachable inside."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if os.uname().machine != "x86_64":
        pytest.skip("syscall numbers below are x86_64's")
    desc = f"pysb-unshare-test-{os.getpid()}".encode()
    payload = b"KEY-SECRET-" + os.urandom(4).hex().encode()
    serial = libc.syscall(
        248, b"user", desc, payload, ctypes.c_size_t(len(payload)), ctypes.c_long(-3)
    )  # add_key(..., KEY_SPEC_SESSION_KEYRING)
    if serial == -1:
        pytest.skip(f"add_key: {os.strerror(ctypes.get_errno())}")
    code = (
        "import ctypes, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True); libc.syscall.restype = ctypes.c_long\n"
        "found = libc.syscall(250, 10, ctypes.c_long(-3), b'user', sys.argv[1].encode(), 0)\n"
        "buf = ctypes.create_string_buffer(256)\n"
        "n = libc.syscall(250, 11, ctypes.c_long(int(sys.argv[2])), buf, 256)\n"
        "print(found, n, buf.raw[:max(n, 0)].decode(errors='replace'))\n"
    )
    try:
        res = run_plan(make_plan([sys.executable, "-c", code, desc.decode(), str(serial)]))
    finally:
        libc.syscall(250, ctypes.c_long(21), ctypes.c_long(serial))  # KEYCTL_INVALIDATE
    assert payload.decode() not in res.stdout, res
    found, n = res.stdout.split()[:2]
    assert found == "-1" and n == "-1", res


def test_files_lent_as_stdio_cannot_be_reopened_with_more_rights(tmp_path):
    """``prog < file`` and ``prog 2>> log``: the program reads its stdin and appends to its
    stderr, but /proc/self/fd/N gives it no write access to the one and no read access to
    the other (they reach it as one-way sockets relayed by the PID namespace's init)."""
    from pysb_unshare import UnshareProvider

    victim = tmp_path / "input.txt"
    victim.write_text("ORIGINAL\n")
    log = tmp_path / "log.txt"
    log.write_text("SECRET-LOG-LINE\n")
    out_file = tmp_path / "out.txt"
    code = (
        "import os, sys\n"
        "print('stdin:', sys.stdin.read().strip())\n"
        "sys.stderr.write('appended\\n'); sys.stderr.flush()\n"
        "for fd, flags in ((0, os.O_RDWR), (0, os.O_WRONLY | os.O_APPEND), (2, os.O_RDONLY)):\n"
        "    try:\n"
        "        f = os.open(f'/proc/self/fd/{fd}', flags | os.O_NONBLOCK)\n"
        "        print('reopened', fd, os.read(f, 100) if flags == os.O_RDONLY else b'')\n"
        "    except OSError as e:\n"
        "        print('refused', fd, e.errno)\n"
    )
    plan = py(code)
    with open(victim, "rb") as stdin, open(log, "ab") as stderr, open(out_file, "wb") as stdout:
        proc = UnshareProvider().launch(plan, stdin=stdin, stdout=stdout, stderr=stderr)
        try:
            assert proc.wait(timeout=60) == 0
        finally:
            for fn in plan.cleanups:
                fn()
    lines = out_file.read_text().splitlines()
    assert lines[0] == "stdin: ORIGINAL", lines
    assert [ln.split()[0] for ln in lines[1:]] == ["refused"] * 3, lines
    assert victim.read_text() == "ORIGINAL\n"
    assert log.read_text() == "SECRET-LOG-LINE\nappended\n"
    assert "SECRET-LOG-LINE" not in out_file.read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="as an ordinary user RLIMIT_NPROC does the job")
def test_process_limit_is_a_pids_cgroup_for_root():
    """As root, RLIMIT_NPROC does not apply to uid 0: the provider's pids cgroup does."""
    from pysb_core.policy import Limits

    code = (
        "import os, signal, time\n"
        "kids = []\n"
        "try:\n"
        "    for _ in range(30):\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            time.sleep(30); os._exit(0)\n"
        "        kids.append(pid)\n"
        "except BlockingIOError:\n"
        "    print('EAGAIN')\n"
        "print(f'forked={len(kids)}')\n"
        "for k in kids:\n"
        "    os.kill(k, signal.SIGKILL); os.waitpid(k, 0)\n"
    )
    plan = py(code)
    plan.policy = plan.policy.replace(limits=Limits(processes=6))
    res = run_plan(plan)
    forked = int(res.stdout.split("forked=")[1].split()[0])
    assert forked < 6 and "EAGAIN" in res.stdout, res  # the program itself is one of the 6
    leftovers = (
        [d for d in os.listdir("/sys/fs/cgroup/pids") if d.startswith("pysb-")]
        if (os.path.isdir("/sys/fs/cgroup/pids"))
        else []
    )
    assert not [d for d in leftovers if d.startswith(f"pysb-{os.getpid()}-")]


@pytest.mark.skipif(not os.path.isdir("/etc/ssl/private"), reason="no /etc/ssl/private here")
def test_host_private_tls_keys_are_masked():
    """/etc/ssl is shown for the CA certificates; its private/ is covered by an empty
    read-only tmpfs, closed even to a root pysb (whose sandbox uid 0 owns the host's)."""
    res = run_plan(
        sh(
            "stat -f -c %T /etc/ssl/certs /etc/ssl/private; "
            "ls -A /etc/ssl/private; touch /etc/ssl/private/x"
        )
    )
    lines = res.stdout.splitlines()
    assert lines[:2] != ["tmpfs", "tmpfs"] and lines[1] == "tmpfs", res
    assert lines[2:] == [], res  # nothing of the host's, and nothing can be added
