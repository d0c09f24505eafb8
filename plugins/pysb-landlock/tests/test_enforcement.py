"""The kernel really enforces the compiled ruleset (real processes, real Landlock).

Each test starts an interpreter that restricts itself as the bootstrap would, then tries
what a sandboxed program might: C-level readers (/bin/cat), writes, TCP to a loopback
server this test runs, signals to a process outside the sandbox.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import landlock_helpers as helpers
from landlock_helpers import ABI, needs_abi, pythons, run_sandboxed

from pysb_core.testing import require_provider

pytestmark = pytest.mark.provider("landlock")


@pytest.fixture(autouse=True)
def _landlock_available():
    require_provider("landlock")  # a skip here, a failure under PYSB_REQUIRE_PROVIDERS


@pytest.fixture
def dirs(tmp_path):
    secret = tmp_path / "secret"
    ro = tmp_path / "ro"
    rw = tmp_path / "rw"
    for d in (secret, ro, rw):
        d.mkdir()
    (secret / "key.pem").write_text("TOP-SECRET\n")
    (ro / "data.txt").write_text("public\n")
    return secret, ro, rw


CAT_CODE = r"""
import subprocess, sys
for path in sys.argv[1:]:
    r = subprocess.run(["/bin/cat", path], capture_output=True, text=True)
    print(path, r.returncode, r.stdout.strip(), r.stderr.strip().replace("\n", " "))
try:
    open(sys.argv[1]).read()
    print("PYOPEN read")
except PermissionError as e:
    print("PYOPEN", e.errno)
"""


@pytest.mark.parametrize("python", pythons(), ids=lambda p: p.split("/")[-3])
def test_secret_unreadable_by_c_reader(dirs, python):
    secret, ro, _ = dirs
    r = run_sandboxed(
        CAT_CODE,
        str(secret / "key.pem"),
        str(ro / "data.txt"),
        ro=[str(ro), "/usr/bin"],
        python=python,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "TOP-SECRET" not in r.stdout
    assert lines[0].startswith(f"{secret / 'key.pem'} 1 ")
    assert "Permission denied" in lines[0]
    assert lines[1] == f"{ro / 'data.txt'} 0 public "
    assert lines[2] == f"PYOPEN {errno.EACCES}"


def test_without_restriction_the_same_reader_succeeds(dirs):
    # The control: the same child code reads the secret when landlock is not applied
    # (so the test above can only pass because of the kernel).
    secret, _ro, _ = dirs
    r = subprocess.run(
        [sys.executable, "-c", CAT_CODE, str(secret / "key.pem")], capture_output=True, text=True
    )
    assert "TOP-SECRET" in r.stdout


WRITE_CODE = r"""
import os, sys
def attempt(label, fn):
    try:
        fn()
        print(label, "ok")
    except OSError as e:
        print(label, e.errno)
rw, ro, secret = sys.argv[1:4]
attempt("create-rw", lambda: open(os.path.join(rw, "new.txt"), "w").write("x"))
attempt("mkdir-rw", lambda: os.mkdir(os.path.join(rw, "sub")))
attempt("rename-rw", lambda: os.rename(os.path.join(rw, "new.txt"), os.path.join(rw, "sub", "n")))
attempt("remove-rw", lambda: os.unlink(os.path.join(rw, "sub", "n")))
attempt("create-outside", lambda: open(os.path.join(secret, "new.txt"), "w"))
attempt("append-ro", lambda: open(os.path.join(ro, "data.txt"), "a"))
attempt("truncate-ro", lambda: os.truncate(os.path.join(ro, "data.txt"), 0))
attempt("remove-ro", lambda: os.unlink(os.path.join(ro, "data.txt")))
attempt("mkdir-ro", lambda: os.mkdir(os.path.join(ro, "d")))
attempt("symlink-ro", lambda: os.symlink("/etc", os.path.join(ro, "l")))
attempt("rename-out", lambda: os.rename(os.path.join(ro, "data.txt"), os.path.join(rw, "stolen")))
"""


@pytest.mark.parametrize("python", pythons(), ids=lambda p: p.split("/")[-3])
def test_writes_confined_to_expose_rw(dirs, python):
    secret, ro, rw = dirs
    r = run_sandboxed(
        WRITE_CODE, str(rw), str(ro), str(secret), ro=[str(ro)], rw=[str(rw)], python=python
    )
    assert r.returncode == 0, r.stderr
    got = dict(line.split() for line in r.stdout.splitlines())
    assert got["create-rw"] == "ok"
    assert got["mkdir-rw"] == "ok"
    assert got["rename-rw"] == "ok"
    assert got["remove-rw"] == "ok"
    # As root every mount outside the writable exposures is read-only (pysb_landlock.rofs):
    # the mount's check comes before Landlock's.
    denied = str(errno.EROFS if os.geteuid() == 0 else errno.EACCES)
    for key in ("create-outside", "append-ro", "remove-ro", "mkdir-ro", "symlink-ro"):
        assert got[key] == denied, key
    # rename of a read-only file into a writable dir: EXDEV (refer) or EACCES, never ok.
    assert got["rename-out"] in (denied, str(errno.EXDEV))
    if ABI >= 3:  # truncate(2) is a handled right from ABI 3
        assert got["truncate-ro"] == denied
    assert (ro / "data.txt").read_text() == "public\n"
    assert not (secret / "new.txt").exists()
    assert (rw / "new.txt").exists() is False and (rw / "sub").is_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")
def test_no_device_nodes_in_writable_dirs(dirs):
    # Root could otherwise mknod a disk device inside expose-rw and read it raw.
    _, _, rw = dirs
    code = r"""
import os, stat, sys
try:
    os.mknod(os.path.join(sys.argv[1], "null2"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    print("made")
except OSError as e:
    print("denied", e.errno)
"""
    r = run_sandboxed(code, str(rw), rw=[str(rw)])
    assert r.stdout.strip() == f"denied {errno.EACCES}", r.stderr
    assert not (rw / "null2").exists()


def test_process_basics_keep_working(dirs):
    code = r"""
import os, json, decimal, ssl, socket, subprocess, tempfile
with open("/dev/null", "w") as f: f.write("x")
os.urandom(8)
print(open("/proc/self/status").read().count("NoNewPrivs:\t1"))
print("ok")
"""
    r = run_sandboxed(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "ok"]


def test_proc_of_other_processes_is_closed():
    code = r"""
try:
    open("/proc/1/environ", "rb").read()
    print("read")
except OSError as e:
    print("denied", e.errno)
"""
    r = run_sandboxed(code)
    assert r.stdout.strip() == f"denied {errno.EACCES}", r.stderr


@pytest.fixture
def server():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0)
    yield srv
    srv.close()


CONNECT_CODE = r"""
import socket, sys
s = socket.socket()
s.settimeout(10)
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
    print("connected")
except OSError as e:
    print("error", e.errno)
"""


def _accepted(srv: socket.socket) -> int:
    n = 0
    while True:
        try:
            conn, _ = srv.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


@needs_abi[4]
def test_tcp_connect_without_rule_refused_by_kernel(server):
    port = server.getsockname()[1]
    r = run_sandboxed(CONNECT_CODE, str(port), net=[f"allow tcp 127.0.0.1 {port + 1} out"])
    assert r.stdout.strip() == f"error {errno.EACCES}", r.stderr
    assert _accepted(server) == 0  # refused before any SYN left


@needs_abi[4]
@pytest.mark.parametrize("python", pythons(), ids=lambda p: p.split("/")[-3])
def test_tcp_connect_with_rule_succeeds(server, python):
    port = server.getsockname()[1]
    r = run_sandboxed(
        CONNECT_CODE, str(port), net=[f"allow tcp 127.0.0.1 {port} out"], python=python
    )
    assert r.stdout.strip() == "connected", r.stderr
    assert _accepted(server) == 1


@needs_abi[4]
def test_tcp_deny_for_every_host_beats_allow(server):
    port = server.getsockname()[1]
    rules = ["allow tcp * * out", f"deny tcp * {port} out"]
    r = run_sandboxed(CONNECT_CODE, str(port), net=rules)
    assert r.stdout.strip() == f"error {errno.EACCES}", r.stderr


@needs_abi[4]
def test_tcp_bind_needs_an_in_rule():
    code = r"""
import socket, sys
for port in sys.argv[1:]:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", int(port)))
        print("bound")
    except OSError as e:
        print("error", e.errno)
    s.close()
"""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    free = probe.getsockname()[1]
    probe.close()
    other = free + 1 if free < 65535 else free - 1
    r = run_sandboxed(code, str(free), str(other), net=[f"allow tcp 127.0.0.1 {free} in"])
    assert r.stdout.split("\n")[:2] == ["bound", f"error {errno.EACCES}"], r.stderr


@needs_abi[4]
def test_a_deny_on_the_wildcard_address_refuses_every_bind_of_its_port():
    """``deny tcp 0.0.0.0 P in`` denies every local address on P (the wildcard a server
    binds means them all, as the guard decides): landlock refuses a bind to 127.0.0.1:P
    without the Python layer. Before, such a deny was left to the guard."""
    code = r"""
import socket, sys
for port in sys.argv[1:]:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", int(port)))
            print("bound")
        except OSError as e:
            print("error", e.errno)
"""
    with socket.socket() as a, socket.socket() as b:  # two ports free now
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        free, other = a.getsockname()[1], b.getsockname()[1]
    net = ["allow tcp 127.0.0.1 * in", f"deny tcp 0.0.0.0 {free} in"]
    r = run_sandboxed(code, str(free), str(other), net=net)
    assert r.stdout.split("\n")[:2] == [f"error {errno.EACCES}", "bound"], r.stderr


@needs_abi[6]
def test_signals_outside_the_sandbox_refused():
    victim = subprocess.Popen(["sleep", "60"])
    try:
        code = r"""
import os, signal, sys
try:
    os.kill(int(sys.argv[1]), signal.SIGTERM)
    print("sent")
except PermissionError as e:
    print("refused", e.errno)
pid = os.fork()
if pid == 0:
    import time; time.sleep(30); os._exit(0)
os.kill(pid, signal.SIGTERM)   # its own child: inside the domain
print("own", os.waitpid(pid, 0)[1] & 0x7F)
"""
        r = run_sandboxed(code, str(victim.pid))
        assert r.stdout.split("\n")[:2] == [f"refused {errno.EPERM}", f"own {signal.SIGTERM}"], (
            r.stderr
        )
        assert victim.poll() is None  # still alive
    finally:
        victim.kill()
        victim.wait()


@needs_abi[6]
def test_abstract_unix_sockets_outside_refused():
    name = f"\0pysb-landlock-test-{os.getpid()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(name)
    srv.listen(1)
    try:
        code = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0" + sys.argv[1])
    print("connected")
except OSError as e:
    print("error", e.errno)
"""
        # Unix sockets allowed (unix-sockets: true): the ABI 6 scope still refuses the connect.
        r = run_sandboxed(code, name[1:], override={"unix": True})
        assert r.stdout.strip() == f"error {errno.EPERM}", r.stderr
        # By default the socket cannot even be created (seccomp).
        r = run_sandboxed(code.replace("s.connect", "pass  #"), name[1:])
        assert "Permission denied" in r.stderr or "error" in r.stdout, (r.stdout, r.stderr)
    finally:
        srv.close()


@needs_abi[6]
def test_abstract_scope_dropped_keeps_the_signal_scope():
    """A profile allowing every address out (``abstract_scope`` false): the host's abstract
    socket is reached, and signals to processes outside the sandbox are still refused."""
    name = f"\0pysb-landlock-test-{os.getpid()}-open"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(name)
    srv.listen(1)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        code = r"""
import os, signal, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("\0" + sys.argv[1])
print("connected")
try:
    os.kill(int(sys.argv[2]), signal.SIGTERM)
    print("sent")
except PermissionError as e:
    print("refused", e.errno)
"""
        r = run_sandboxed(
            code, name[1:], str(victim.pid), override={"unix": True, "abstract_scope": False}
        )
        assert r.stdout.split() == ["connected", "refused", str(errno.EPERM)], r.stderr
        assert victim.poll() is None
    finally:
        srv.close()
        victim.kill()
        victim.wait()


def test_new_pseudo_terminals_need_only_dev_pts():
    """/dev/ptmx is granted (it only makes new pseudo-terminals); their other end lies in
    /dev/pts, where this user's other terminals are: os.openpty works with /dev/pts
    exposed read-write and fails with EACCES without it, and a terminal of the host's
    stays closed (one this test opens itself, outside the sandbox)."""
    host_master, host_slave = os.openpty()
    host_name = os.ttyname(host_slave)
    code = r"""
import errno, os, sys
try:
    m, s = os.openpty()
    os.write(s, b"hi\n")
    print("pty", os.read(m, 8).decode().strip())
except PermissionError as e:
    print("refused", e.errno)
try:
    os.open(sys.argv[-1], os.O_RDWR | os.O_NOCTTY)
    print("host terminal opened")
except PermissionError as e:
    print("host terminal refused", e.errno)
"""
    try:
        r = run_sandboxed(code, host_name, rw=["/dev/pts"])
        assert r.stdout.splitlines()[:1] == ["pty hi"], (r.stdout, r.stderr)
        r = run_sandboxed(code, host_name)
        assert r.stdout.splitlines() == [
            f"refused {errno.EACCES}",
            f"host terminal refused {errno.EACCES}",
        ], (r.stdout, r.stderr)
    finally:
        os.close(host_master)
        os.close(host_slave)


def test_compiled_for_a_newer_abi_fails_closed():
    r = run_sandboxed("print('USER CODE RAN')", override={"abi": 999})
    assert r.returncode != 0
    assert "USER CODE RAN" not in r.stdout
    assert "LandlockSetupError" in r.stderr and "ABI 999" in r.stderr


def test_refuses_when_other_threads_run():
    # restrict_self() confines one thread only: a second thread must make it refuse.
    code = "print('USER CODE RAN')"
    r = run_sandboxed(
        code,
        override={},
        python=sys.executable,
    )
    assert r.returncode == 0  # control: single-threaded works
    threaded = r"""
import threading, time, json, sys
"""
    prelude = helpers.PRELUDE.replace(
        "child.restrict(**args)",
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
        "child.restrict(**args)",
    )
    spec = {"ro": [], "rw": [], "net": [], "override": {}}
    env = {"PYTHONPATH": f"{helpers.ROOT}{os.pathsep}{helpers.SRC}", "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-c", prelude + threaded + "print('USER CODE RAN')", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode != 0
    assert "USER CODE RAN" not in r.stdout
    assert "several threads" in r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="capabilities matter when pysb runs as root")
def test_root_keeps_only_dac_capabilities(dirs):
    _, _, rw = dirs
    (rw / "mine").write_text("x")
    code = r"""
import os, socket, sys
status = {k: v.strip() for k, _, v in (x.partition(":") for x in open("/proc/self/status"))}
print("eff", int(status["CapEff"], 16), "bnd", int(status["CapBnd"], 16))
for label, fn in [
    ("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)),
    ("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)),
    ("chown", lambda: os.chown(sys.argv[1], 1234, 1234)),
    ("read-own-rw", lambda: open(sys.argv[1]).read()),
]:
    try:
        fn()
        print(label, "ok")
    except OSError as e:
        print(label, e.errno)
"""
    r = run_sandboxed(code, str(rw / "mine"), rw=[str(rw)])
    lines = r.stdout.splitlines()
    assert lines[0] == "eff 6 bnd 6", r.stderr  # CAP_DAC_OVERRIDE | CAP_DAC_READ_SEARCH
    assert lines[1:] == [
        f"raw {errno.EACCES}",  # seccomp refuses it even before the capability check
        f"packet {errno.EAFNOSUPPORT}",  # no rule expresses it: refused by seccomp
        f"chown {errno.EPERM}",
        "read-own-rw ok",
    ]
    assert (rw / "mine").stat().st_uid == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="capabilities matter when pysb runs as root")
def test_privileged_bind_rule_keeps_net_bind_service():
    code = r"""
status = {k: v.strip() for k, _, v in (x.partition(":") for x in open("/proc/self/status"))}
print(int(status["CapEff"], 16))
"""
    r = run_sandboxed(code, net=["allow tcp 127.0.0.1 80 in"])
    assert r.stdout.strip() == str(0b110 | 1 << 10), r.stderr


NONTCP_CODE = r"""
import ctypes, os, socket, sys
def attempt(label, fn):
    try:
        fn()
        print(label, "ok")
    except OSError as e:
        print(label, e.errno)
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"ping", ("127.0.0.1", int(sys.argv[1])))
attempt("udp", udp)
attempt("sctp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132))
attempt("ping", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP))
attempt("tcp", lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM | socket.SOCK_CLOEXEC))
attempt("unix", lambda: socket.socketpair())
libc = ctypes.CDLL(None, use_errno=True)
params = (ctypes.c_char * 120)()
r = libc.syscall(425, 4, params)
print("io_uring", "ok" if r >= 0 else ctypes.get_errno())
"""


@pytest.fixture
def udp_server():
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.bind(("127.0.0.1", 0))
    srv.settimeout(5)
    yield srv
    srv.close()


@pytest.mark.parametrize("python", pythons(), ids=lambda p: p.split("/")[-3])
def test_non_tcp_sockets_and_io_uring_refused(udp_server, python):
    port = udp_server.getsockname()[1]
    r = run_sandboxed(NONTCP_CODE, str(port), python=python)
    got = dict(line.split() for line in r.stdout.splitlines())
    denied = str(errno.EACCES)
    assert got == {
        "udp": denied,
        "sctp": denied,
        "ping": denied,
        "tcp": "ok",
        "unix": "ok",
        "io_uring": str(errno.EPERM),
    }, r.stderr
    udp_server.settimeout(0)
    with pytest.raises(BlockingIOError):
        udp_server.recv(16)  # nothing was sent


def test_udp_rule_lets_udp_sockets_through(udp_server):
    port = udp_server.getsockname()[1]
    r = run_sandboxed(NONTCP_CODE, str(port), net=[f"allow udp 127.0.0.1 {port} out"])
    got = dict(line.split() for line in r.stdout.splitlines())
    assert got["udp"] == "ok", r.stderr
    assert got["sctp"] == str(errno.EACCES)
    assert udp_server.recv(16) == b"ping"


def test_terminal_injection_refused():
    leader, follower = os.openpty()
    try:
        code = r"""
import fcntl, termios
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"x")
    print("injected")
except OSError as e:
    print("refused", e.errno)
fcntl.ioctl(0, termios.TCGETS, bytes(64))  # ordinary terminal ioctls still work
print("tcgets ok")
"""
        r = run_sandboxed(code, stdin=follower)
        assert r.stdout.split("\n")[:2] == [f"refused {errno.EPERM}", "tcgets ok"], r.stderr
    finally:
        os.close(leader)
        os.close(follower)


@pytest.mark.skipif(not os.path.isdir("/etc/ssl/private"), reason="no /etc/ssl/private here")
def test_tls_private_keys_stay_closed():
    code = r"""
import os
try:
    os.listdir("/etc/ssl/private")
    print("listed")
except OSError as e:
    print("denied", e.errno)
print(len(os.listdir("/etc/ssl/certs")) > 0)
"""
    r = run_sandboxed(code)
    assert r.stdout.split() == ["denied", str(errno.EACCES), "True"], r.stderr


def test_restrict_is_not_judged_by_installed_guards(dirs):
    # The Python guards are installed before restrict() runs and judge opens through
    # audit hooks. The framework's own O_PATH opens of /usr/lib & co must not be refused
    # (they would silently drop the rules, and exec would then fail).
    _, ro, _ = dirs
    import landlock_helpers

    prelude = landlock_helpers.PRELUDE.replace(
        "child.restrict(**args)",
        "def _guard(event, args):\n"
        "    if event in ('open', 'os.listdir', 'os.scandir', 'ctypes.dlopen', 'ctypes.dlsym'):\n"
        "        raise FileNotFoundError(f'guard refused {event} {args[:1]}')\n"
        "sys.addaudithook(_guard)\n"
        "child.restrict(**args)",
    )
    spec = {"ro": [str(ro), "/usr/bin"], "rw": [], "net": [], "override": {}}
    code = (
        "import os\n"
        "os.execv('/usr/bin/cat', ['cat', sys.argv[1]])\n"  # exec needs the loader's rules
    )
    env = {"PYTHONPATH": f"{helpers.ROOT}{os.pathsep}{helpers.SRC}", "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-c", prelude + code, json.dumps(spec), str(ro / "data.txt")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.stdout == "public\n", r.stderr


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"),
    reason="needs root and setpriv to drop to nobody",
)
def test_unprivileged_user_is_confined_too():
    # Landlock needs no privilege: the same restriction works for an ordinary user.
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o777)
        code = r"""
import os, subprocess, sys
r = subprocess.run(["/bin/cat", "/etc/passwd"], capture_output=True, text=True)
print(r.returncode, "root:" in r.stdout)
open(os.path.join(sys.argv[1], "x"), "w").write("ok")
print(os.getuid(), open("/proc/self/status").read().split("CapEff:")[1].split()[0])
"""
        r = run_sandboxed(
            code,
            d,
            ro=["/usr/bin"],
            rw=[d],
            prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"],
        )
        assert r.stdout.split() == ["1", "False", "65534", "0000000000000000"], r.stderr
        with open(os.path.join(d, "x")) as f:
            assert f.read() == "ok"
