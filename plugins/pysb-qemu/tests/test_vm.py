"""Real VMs (TCG on this host): exit status, streams, fds, files, env, network, clean-up."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from pysb_qemu import vm

from pysb_core.plan import LaunchPlan
from pysb_core.policy import Exposure, Limits, NetworkRule, Policy, PortRange

pytestmark = pytest.mark.slow


def test_print_42(run_vm) -> None:
    r = run_vm("print(42)")
    assert (r.returncode, r.stdout) == (0, "42\n"), r.stderr


def test_exit_status_is_the_programs(run_vm) -> None:
    assert run_vm("import sys; sys.exit(7)").returncode == 7


def test_death_by_signal_is_128_plus_n(run_vm) -> None:
    assert run_vm("import os, signal; os.kill(os.getpid(), signal.SIGTERM)").returncode == 143


def test_stdout_and_stderr_are_kept_apart_and_stdin_forwarded(run_vm) -> None:
    code = (
        "import sys\n"
        "data = sys.stdin.read()\n"
        "print('out:' + data.upper(), end='')\n"
        "print('err:' + data, end='', file=sys.stderr)\n"
    )
    r = run_vm(code, stdin=b"hello\n")
    assert r.returncode == 0
    assert r.stdout == "out:HELLO\n"
    assert r.stderr == "err:hello\n"


def test_large_output_arrives_complete(run_vm) -> None:
    r = run_vm("import sys; sys.stdout.write('x' * 3_000_000 + 'END')")
    assert r.returncode == 0
    assert len(r.stdout) == 3_000_003 and r.stdout.endswith("END")


def test_environment_is_exactly_the_plan_env(run_vm) -> None:
    os.environ["PYSB_QEMU_TEST_SECRET"] = "leak"
    try:
        r = run_vm(["/usr/bin/env"], env={"ONLY": "this", "SPACED": "a b"})
    finally:
        del os.environ["PYSB_QEMU_TEST_SECRET"]
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["ONLY=this", "SPACED=a b"]


def test_secret_outside_exposures_is_unreadable_by_cat(run_vm, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    r = run_vm(["/bin/cat", str(secret)])
    assert r.returncode != 0
    assert "TOP-SECRET" not in r.stdout
    assert "No such file" in r.stderr


def test_writes_only_in_rw_exposures(run_vm, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    rw = tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    (ro / "keep.txt").write_text("original")
    code = (
        "import sys\n"
        f"open({str(rw / 'made.txt')!r}, 'w').write('from the guest')\n"
        "try:\n"
        f"    open({str(ro / 'keep.txt')!r}, 'w').write('changed')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        f"print(open({str(ro / 'keep.txt')!r}).read())\n"
    )
    exposures = [Exposure(str(ro), str(ro), False), Exposure(str(rw), str(rw), True)]
    r = run_vm(code, exposures=exposures)
    assert r.returncode == 0, r.stderr
    assert "refused 30" in r.stdout  # EROFS
    assert (ro / "keep.txt").read_text() == "original"
    assert (rw / "made.txt").read_text() == "from the guest"


def test_renamed_exposure_hidden_and_protected_paths(run_vm, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "visible.txt").write_text("seen")
    (data / ".env").write_text("API_KEY=xyz")
    (data / ".git").mkdir()
    (data / ".git" / "config").write_text("git secret")
    (data / "profile.yaml").write_text("locked")
    code = (
        "import os\n"
        "print(open('/data/visible.txt').read())\n"
        "print(repr(open('/data/.env').read()))\n"
        "print(os.listdir('/data/.git'))\n"
        "try:\n"
        "    open('/data/profile.yaml', 'w')\n"
        "except OSError as e:\n"
        "    print('protected', e.errno)\n"
    )
    r = run_vm(
        code,
        exposures=[Exposure(str(data), "/data", True)],
        hidden=[str(data / ".env"), str(data / ".git")],
        protected=[str(data / "profile.yaml")],
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "seen"
    assert lines[1] == "''"
    assert lines[2] == "[]"
    assert lines[3] == "protected 30"
    assert (data / "profile.yaml").read_text() == "locked"


def test_cwd_is_the_plans(run_vm, tmp_path: Path) -> None:
    exposures = [Exposure(str(tmp_path), str(tmp_path), False)]
    r = run_vm("import os; print(os.getcwd())", exposures=exposures, cwd=str(tmp_path))
    assert r.stdout.strip() == str(tmp_path)


def test_cwd_follows_a_rename_or_is_created_empty(run_vm, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "f.txt").write_text("x")
    hidden = tmp_path / "unexposed"
    hidden.mkdir()
    (hidden / "secret.txt").write_text("s")
    code = "import os; print(os.getcwd(), sorted(os.listdir('.')))"
    renamed = run_vm(code, exposures=[Exposure(str(data), "/data", False)], cwd=str(data / "sub"))
    empty = run_vm(code, cwd=str(hidden))
    assert renamed.stdout.strip() == "/data/sub ['f.txt']", renamed.stderr
    assert empty.stdout.strip() == f"{hidden} []", empty.stderr


def test_payload_fd_and_write_channel(run_vm) -> None:
    """The bootstrap's two kinds of inherited fd: a memfd payload and a report pipe."""
    payload = os.memfd_create("payload", 0)
    os.write(payload, b'{"hello": "payload"}')
    report_r, report_w = os.pipe()
    code = (
        f"import os, json\n"
        f"data = json.loads(os.pread({payload}, 4096, 0))\n"
        f"os.write({report_w}, (json.dumps(data) + '\\n').encode() * 3)\n"
        f"print('ok')\n"
    )
    try:
        r = run_vm(code, pass_fds=[payload, report_w])
        os.close(report_w)
        with os.fdopen(report_r, "rb") as f:
            lines = f.read().splitlines()
    finally:
        os.close(payload)
    assert r.returncode == 0, r.stderr
    assert lines == [b'{"hello": "payload"}'] * 3


def test_forwarded_socket_is_bidirectional(run_vm) -> None:
    """Partial mode's inherited Unix socket maps to the same fd number in the guest (a
    character device there, not a socket: read and write it as a file)."""
    ours, theirs = socket.socketpair()
    code = (
        f"import os\n"
        f"f = os.fdopen({theirs.fileno()}, 'r+b', buffering=0)\n"
        f"for line in f:\n"
        f"    if line == b'quit\\n':\n"
        f"        break\n"
        f"    f.write(line.upper())\n"
    )
    replies = []

    def talk(proc) -> None:
        theirs.close()
        f = ours.makefile("rwb")
        for word in (b"ping\n", b"pong\n"):
            f.write(word)
            f.flush()
            replies.append(f.readline())
        f.write(b"quit\n")
        f.flush()

    r = run_vm(code, pass_fds=[theirs.fileno()], after_start=talk)
    ours.close()
    assert r.returncode == 0, r.stderr
    assert replies == [b"PING\n", b"PONG\n"]


def test_bootstrap_runs_the_program_with_limits(run_vm) -> None:
    """The rlimits hold in the guest although the program is its uid 0 (no CAP_SYS_RESOURCE
    or CAP_SYS_ADMIN, which would exempt it from RLIMIT_NPROC)."""
    code = (
        "import os, resource\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
        "kids = []\n"
        "try:\n"
        "    for _ in range(30):\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            import time; time.sleep(5); os._exit(0)\n"
        "        kids.append(pid)\n"
        "except BlockingIOError:\n"
        "    print('fork refused after', len(kids))\n"
        "print('via bootstrap')\n"
    )
    r = run_vm(code, bootstrap=True, limits=Limits(open_files=77, processes=12))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "77"
    assert lines[1].startswith("fork refused after")
    assert lines[2] == "via bootstrap"


def test_memory_limit_surfaces_as_memory_error(run_vm) -> None:
    r = run_vm("b = bytearray(400 * 2**20)", bootstrap=True, limits=Limits(memory=128 * 2**20))
    assert r.returncode == 1
    assert "MemoryError" in r.stderr


def test_no_network_device_without_rules(run_vm) -> None:
    r = run_vm("import os; print(sorted(os.listdir('/sys/class/net')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['lo']"


def _listener() -> socket.socket:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    return srv


def test_network_rules_filter_in_the_guest(run_vm) -> None:
    """An allowed 127.0.0.1 port reaches the host's loopback service (NATed to slirp's
    10.0.2.2); a port allowed on ``*`` does not reach the host's loopback; the program
    cannot flush the filter."""
    allowed, refused = _listener(), _listener()
    a_port, r_port = allowed.getsockname()[1], refused.getsockname()[1]
    got = []

    def serve() -> None:
        conn, _ = allowed.accept()
        got.append(conn.recv(100))
        conn.sendall(b"welcome")
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    code = (
        "import socket, subprocess\n"
        f"s = socket.create_connection(('127.0.0.1', {a_port}), timeout=20)\n"
        "s.sendall(b'hi from guest'); print(s.recv(100).decode())\n"
        "try:\n"
        f"    socket.create_connection(('10.0.2.2', {r_port}), timeout=20)\n"
        "    print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print('refused', type(e).__name__)\n"
        "r = subprocess.run(['/usr/sbin/nft', 'flush', 'ruleset'], capture_output=True)\n"
        "print('flush', r.returncode != 0)\n"
    )
    rules = (
        NetworkRule(
            "allow",
            ("tcp",),
            "127.0.0.1",
            (PortRange(a_port, a_port),),
            "out",
            text=f"allow tcp 127.0.0.1 {a_port} out",
        ),
        NetworkRule(
            "allow",
            ("tcp",),
            "*",
            (PortRange(r_port, r_port),),
            "out",
            text=f"allow tcp * {r_port} out",
        ),
    )
    try:
        r = run_vm(code, network=rules)
        refused.settimeout(0.5)
        with pytest.raises(TimeoutError):
            refused.accept()
    finally:
        allowed.close()
        refused.close()
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["welcome", "refused ConnectionRefusedError", "flush True"]
    assert got == [b"hi from guest"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_inbound_rule_reaches_a_server_bound_inside(run_vm) -> None:
    """``allow tcp 127.0.0.1 P in``: the host's 127.0.0.1:P reaches a server bound on the
    guest's 127.0.0.1:P (QEMU forwards the host's loopback port; the guest NATs it)."""
    port = _free_port()
    code = (
        "import socket\n"
        f"srv = socket.socket(); srv.bind(('127.0.0.1', {port})); srv.listen(1)\n"
        "print('listening', flush=True)\n"
        "conn, _ = srv.accept(); conn.sendall(b'from the guest ' + conn.recv(100))\n"
        "conn.close()\n"
    )
    answers = []

    def connect(proc) -> None:
        assert proc.stdout.readline() == b"listening\n"
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            c.sendall(b"hello")
            answers.append(c.recv(100))

    rule = NetworkRule(
        "allow",
        ("tcp",),
        "127.0.0.1",
        (PortRange(port, port),),
        "in",
        text=f"allow tcp 127.0.0.1 {port} in",
    )
    r = run_vm(code, network=(rule,), after_start=connect)
    assert r.returncode == 0, r.stderr
    assert answers == [b"from the guest hello"]


def _children(pid: int) -> list[int]:
    """The children of ``pid``'s threads (a thread may end while it is read: skipped)."""
    out = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return out
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return out


def _running(pid: int) -> bool:
    """True while ``pid`` is a live (not zombie) qemu process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"qemu-system" in cmdline and "State:\tZ" not in status


def test_killing_the_supervisor_leaves_no_qemu(run_vm) -> None:
    seen = {}

    def kill_early(proc) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(map(_running, _children(proc.pid))):
            time.sleep(0.05)
        seen["qemu"] = _children(proc.pid)
        seen["running"] = [_running(q) for q in seen["qemu"]]
        os.kill(proc.pid, signal.SIGKILL)

    r = run_vm("import time; time.sleep(60)", after_start=kill_early)
    assert r.returncode == -signal.SIGKILL
    assert seen["running"] == [True]
    qemu = seen["qemu"][0]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(qemu):
        time.sleep(0.05)
    assert not _running(qemu)


def test_sigint_reaches_the_program(run_vm) -> None:
    """A signal sent to the host process is forwarded to the program in the guest."""

    def send_when_ready(proc) -> None:
        assert proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGINT)

    r = run_vm(
        "import time; print('ready', flush=True); time.sleep(60)", after_start=send_when_ready
    )
    assert r.returncode == 130
    assert "KeyboardInterrupt" in r.stderr


LAUNCHER = """
import sys, time
from pysb_core.plan import LaunchPlan
from pysb_core.policy import Policy
from pysb_qemu import QemuProvider
py = sys.executable
plan = LaunchPlan(policy=Policy(provider="qemu"), python=py,
                  argv=[py, "-c", "import time; time.sleep(120)"], env={}, cwd="/")
proc = QemuProvider().launch(plan)
print(proc.pid, flush=True)
time.sleep(120)
"""


def test_killing_pysb_leaves_no_supervisor_or_qemu(qemu_provider) -> None:
    """The lifeline: when the process that launched the VM dies (SIGKILL, no clean-up),
    the supervisor kills QEMU and exits."""
    import subprocess
    import sys

    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        supervisor = int(launcher.stdout.readline())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(map(_running, _children(supervisor))):
            time.sleep(0.05)
        qemu = _children(supervisor)
        assert len(qemu) == 1 and _running(qemu[0])
    finally:
        launcher.kill()
        launcher.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (_running(qemu[0]) or _alive(supervisor)):
        time.sleep(0.05)
    assert not _running(qemu[0])
    assert not _alive(supervisor)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def test_more_import_roots_than_virtio_transports(run_vm, tmp_path: Path) -> None:
    """Editable installs make one import root each; beyond the microvm's transports the
    small read-only ones are copied in, and the program imports from every one."""
    roots = []
    for i in range(vm.max_shares(False) + 6):
        d = tmp_path / f"root{i:02}"
        d.mkdir()
        (d / f"mod{i:02}.py").write_text(f"VALUE = {i}\n")
        roots.append(d)
    code = (
        "import sys\n"
        f"sys.path[:0] = {[str(d) for d in roots]!r}\n"
        f"print(sum(__import__(f'mod{{i:02}}').VALUE for i in range({len(roots)})))\n"
        f"open({str(roots[0] / 'new.py')!r}, 'w')\n"
    )
    exposures = [Exposure(str(d), str(d), False, "<python>", True) for d in roots]
    r = run_vm(code, exposures=exposures)
    assert r.stdout.splitlines() == [str(sum(range(len(roots))))], r.stderr
    assert r.returncode == 1 and "Read-only file system" in r.stderr
    assert not (roots[0] / "new.py").exists()


def test_exposing_the_host_root(run_vm, tmp_path: Path) -> None:
    """``expose-ro: [/]`` cannot be mounted on the guest's root: its directories are put in
    place one by one, read-only, and /etc stays the synthesized one."""
    (tmp_path / "visible.txt").write_text("from the host")
    code = (
        f"print(open({str(tmp_path / 'visible.txt')!r}).read())\n"
        "import os\n"
        "print(os.path.exists('/etc/shadow'), os.listdir('/pysb/root'))\n"
        "try:\n"
        f"    open({str(tmp_path / 'new.txt')!r}, 'w')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    r = run_vm(code, exposures=[Exposure("/", "/", False)])
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["from the host", "False []", "refused 30"]


def test_dns_pins_are_the_guest_hosts_file(run_vm, tmp_path: Path) -> None:
    """Native code (glibc's resolver) answers pinned names from the guest's /etc/hosts,
    without any query (there is no network device at all here)."""
    hosts = tmp_path / "hosts"
    hosts.write_text("192.0.2.10\tapi.example.com\n")
    code = (
        "import socket\n"
        "print(socket.gethostbyname('api.example.com'))\n"
        "try:\n"
        "    socket.gethostbyname('other.example.com')\n"
        "except OSError as e:\n"
        "    print('no answer')\n"
    )
    r = run_vm(code, hosts_file=str(hosts))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["192.0.2.10", "no answer"]


def test_symlinks_in_a_share_cannot_escape_it(run_vm, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    (shared / "abs").symlink_to(secret)
    (shared / "rel").symlink_to("../secret.txt")
    (shared / "passwd").symlink_to("/etc/passwd")
    code = (
        f"import os\n"
        f"for name in ('abs', 'rel'):\n"
        f"    try:\n"
        f"        print(open(os.path.join({str(shared)!r}, name)).read())\n"
        f"    except FileNotFoundError:\n"
        f"        print('not found')\n"
        f"print(len(open({str(shared / 'passwd')!r}).read().splitlines()))\n"
    )
    r = run_vm(code, exposures=[Exposure(str(shared), str(shared), False)])
    assert r.returncode == 0, r.stderr
    host_users = len(Path("/etc/passwd").read_text().splitlines())
    assert r.stdout.splitlines()[:2] == ["not found", "not found"]
    assert int(r.stdout.splitlines()[2]) < host_users  # the guest's synthesized passwd


AS_USER = """
import os, sys
try:
    sys.path[:0] = sys.argv[1:3]
    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import Exposure, Policy
    from pysb_qemu import QemuProvider
except (ImportError, PermissionError):
    sys.exit(77)  # this checkout is not readable by the test user
rw = sys.argv[3]
py = "/usr/bin/python3"
code = (
    "import os; print(os.getuid(), os.getgid());"
    f"open({rw!r} + '/made', 'w').write('x'); print(os.stat({rw!r} + '/made').st_uid)"
)
plan = LaunchPlan(policy=Policy(provider="qemu"), python=py, argv=[py, "-c", code], env={},
                  cwd="/", exposures=[Exposure(rw, rw, True)])
sys.exit(QemuProvider().launch(plan).wait())
"""


def test_a_non_root_user_keeps_its_uid_inside(qemu_provider) -> None:
    """pysb run by an unprivileged user: QEMU runs as that user and so does the program
    (files it creates on a rw share are that user's, inside and on the host)."""
    import shutil
    import subprocess
    import tempfile

    import pysb_qemu

    import pysb_core

    if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root (to start the test as nobody) and /usr/bin/python3")
    base = Path(tempfile.mkdtemp(prefix="pysb-qemu-nobody-"))
    try:
        base.chmod(0o755)
        rw = base / "rw"
        rw.mkdir()
        os.chown(rw, 65534, 65534)
        cache = base / "cache"
        cache.mkdir()
        os.chown(cache, 65534, 65534)
        paths = [str(Path(m.__file__).parents[1]) for m in (pysb_core, pysb_qemu)]
        res = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
                AS_USER,
                *paths,
                str(rw),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            env={"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(cache)},
        )
        if res.returncode == 77:
            pytest.skip("the checkout is not readable by nobody")
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines() == ["65534 65534", "65534"]
        assert (rw / "made").stat().st_uid == 65534
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_closed_stdout_is_a_broken_pipe_inside(qemu_provider) -> None:
    """``pysb run ... | head -1``: when the host's stdout reader goes away, the program's
    next write fails with EPIPE, as natively (CPython: BrokenPipeError)."""
    import subprocess
    import sys

    py = sys.executable
    code = "import time\nwhile True:\n    print('line ' * 100, flush=True)\n    time.sleep(0.01)\n"
    plan = LaunchPlan(
        policy=Policy(provider="qemu"), python=py, argv=[py, "-c", code], env={}, cwd="/"
    )
    proc = qemu_provider.launch(plan, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().startswith(b"line ")
        proc.stdout.close()
        err = proc.stderr.read()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for fn in plan.cleanups:
            fn()
    # 1, or 120 when CPython's final flush of the same buffer fails again (as natively,
    # depending on where the write broke).
    assert proc.returncode in (1, 120)
    assert b"BrokenPipeError" in err


def test_a_background_child_holding_stdout_does_not_hang_the_run(run_vm) -> None:
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen(['/bin/sleep', '60'])\n"  # inherits stdout, outlives the program
        "print('done')\n"
    )
    r = run_vm(code, timeout=60)
    assert (r.returncode, r.stdout) == (0, "done\n"), r.stderr
