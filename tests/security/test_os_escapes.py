"""Escape attempts against the OS layer alone.

Every test runs the real probe program (``probe.py``) with ``pysb run --provider P
--no-python-guards`` and ``api: {allow: ["*"]}``, ``imports: "*"``: the Python layer is off
and would allow everything anyway, so only the kernel mechanism of provider P can refuse.
Each run starts with a control read that must succeed (``escape_bench.parse`` checks it), and
most tests add a control of their own in the same run, so a refusal means the sandbox
refused *this* access, not that the program never ran.

Classes follow docs/security.md ("OS layer: escape attempts"). A provider that cannot
defend a class by design gets an assertion of its documented behaviour; a real hole is an
``xfail(strict=True)`` naming it, so a fix flips the test.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from escape_bench import PROBE, Bench, bench

from pysb_core.testing import BASE_ENV, LoopbackServer, pysb_command

PROVIDERS = ["landlock", "bwrap", "unshare", "firejail"]
NAMESPACED = ["bwrap", "unshare", "firejail"]

#: fds 0-2 reopened through /proc/self/fd with more rights than pysb's caller gave them.
FD_REOPEN_HOLE = pytest.mark.xfail(
    strict=True,
    reason="HOLE: fds 0-2 are handed to the program as they are; under bwrap and firejail "
    "/proc/self/fd/N reopens the host file with any mode DAC allows (a file given as "
    "stdin read-only becomes writable, a file given as stderr becomes readable)",
)
#: bwrap as root: the sandbox's uid 0 is the host's root, and /proc/sys stays writable.
PROC_SYS_HOLE = pytest.mark.xfail(
    os.geteuid() == 0,
    strict=True,
    reason="HOLE: under bwrap run by root the program is the host's uid 0 (identity map, "
    "no capabilities) and bwrap's fresh /proc leaves /proc/sys writable; sysctl writes "
    "check the uid, not a capability: global sysctls such as kernel.core_pattern open for "
    "writing (a core_pattern pipe runs a program as root on the host)",
)
#: Landlock (ABI < 9) does not mediate connect(2) to a named Unix socket.
UNIX_SOCKET_HOLE = pytest.mark.xfail(
    strict=True,
    reason="HOLE: Landlock up to ABI 8 does not check connect(2) on a named Unix socket and "
    "the provider's seccomp filter lets AF_UNIX sockets be created: any host socket outside "
    "the exposures (docker.sock, D-Bus, ssh-agent, X11) is reachable",
)
#: The caller's session keyring is inherited (firejail refuses keyctl; unshare joins a new one).
KEYRING_HOLE = pytest.mark.xfail(
    strict=True,
    reason="HOLE: the program inherits the session keyring of the process that started pysb "
    "and keyctl(2) is not filtered: keys there (tokens, Kerberos tickets) are readable",
)


def _param(provider: str, *marks: pytest.MarkDecorator) -> object:
    return pytest.param(provider, marks=[pytest.mark.provider(provider), *marks], id=provider)


def providers(**holes: pytest.MarkDecorator) -> list[object]:
    return [_param(p, *([holes[p]] if p in holes else [])) for p in PROVIDERS]


def refused(result: str) -> bool:
    return result.startswith("err:")


def assert_all_refused(outcome: object, labels: list[str]) -> None:
    opened = {label: outcome[label] for label in labels if not refused(outcome[label])}  # type: ignore[index]
    assert not opened, f"escaped: {opened}"


# -- reading outside the exposures -----------------------------------------------------------


@pytest.mark.parametrize("provider", providers())
def test_secret_outside_exposures_is_unreadable(provider: str, tmp_path: Path) -> None:
    box = bench(provider, tmp_path)
    secret = str(box.secret)
    os.symlink(secret, box.rw / "host-planted")  # a link the host left in an expose-rw dir
    attempts = [
        ("control-inner", "read", {"path": str(box.inner / "inner.txt")}),
        ("direct", "read", {"path": secret}),
        ("proc-self-root", "read", {"path": "/proc/self/root" + secret}),
        ("proc-1-root", "read", {"path": "/proc/1/root" + secret}),
        ("host-planted-link", "read", {"path": "rw/host-planted"}),
        ("plant-link", "symlink", {"target": secret, "path": "rw/planted"}),
        ("planted-link", "read", {"path": "rw/planted"}),
        ("hard-link", "link", {"src": secret, "dst": "rw/hard"}),
        ("hard-link-read", "read", {"path": "rw/hard"}),
        ("openat-dotdot", "read", {"path": "../outside/secret.txt", "dir_fd": "."}),
        ("openat-deep", "read", {"path": "../" * 20 + secret.lstrip("/"), "dir_fd": "rw"}),
        ("sibling", "read", {"path": str(box.sibling)}),
        ("sibling-via-dotdot", "read", {"path": str(box.inner) + "/../sibling.txt"}),
        ("exec-child", "child_read", {"path": secret}),
    ]
    out = box.run([*attempts, ("control-exec-child", "child_read", {"path": "ctl.txt"})])
    assert out["control-inner"] == "ok:INNER\n"
    assert out["control-exec-child"] == "ok:CONTROL\n"
    assert out["plant-link"] == "ok"  # planting is allowed (rw); following it must not be
    assert_all_refused(out, [a[0] for a in attempts[1:] if a[0] != "plant-link"])
    assert box.token not in out.proc.stdout


@pytest.mark.parametrize("provider", providers())
def test_parent_of_an_exposure_shows_nothing_else(provider: str, tmp_path: Path) -> None:
    box = bench(provider, tmp_path)
    out = box.run([("parent", "listdir", {"path": str(box.inner.parent)})])
    if provider == "landlock":
        assert out["parent"] == "err:EACCES"  # no read-dir right on the parent
    else:
        assert out["parent"] == "ok:inner"  # a skeleton directory holding the mount point


@pytest.mark.parametrize("provider", providers())
def test_hard_link_does_not_make_a_read_only_file_writable(provider: str, tmp_path: Path) -> None:
    box = bench(provider, tmp_path)
    inner = str(box.inner / "inner.txt")
    out = box.run(
        [
            ("control-write", "write", {"path": "rw/mine", "flags": "create"}),
            ("link", "link", {"src": inner, "dst": "rw/alias"}),
            ("write-alias", "write", {"path": "rw/alias"}),
            ("write-inner", "write", {"path": inner}),
        ]
    )
    assert out["control-write"] == "ok"
    assert_all_refused(out, ["link", "write-alias", "write-inner"])
    assert (box.inner / "inner.txt").read_text() == "INNER\n"


# -- writing outside expose-rw ---------------------------------------------------------------


@pytest.mark.parametrize("provider", providers())
def test_writes_outside_expose_rw_fail(provider: str, tmp_path: Path) -> None:
    box = bench(provider, tmp_path)
    (box.rw / "movable").write_text("x")
    victim = str(box.victim)
    outside = box.root / "outside"
    attempts = [
        ("control-create", "write", {"path": "rw/new", "flags": "create"}),
        ("append", "write", {"path": victim}),
        ("rdwr", "write", {"path": victim, "flags": "rdwr"}),
        ("o-trunc", "write", {"path": victim, "flags": "trunc"}),
        ("truncate", "truncate", {"path": victim}),
        ("create", "write", {"path": str(outside / "new"), "flags": "create"}),
        ("mkdir", "mkdir", {"path": str(outside / "dir")}),
        ("unlink", "unlink", {"path": victim}),
        ("rename-out", "rename", {"src": "rw/movable", "dst": str(outside / "moved")}),
        ("rename-in", "rename", {"src": victim, "dst": "rw/stolen"}),
        ("symlink-out", "symlink", {"target": "rw", "path": str(outside / "link")}),
        ("plant-link", "symlink", {"target": victim, "path": "rw/to-victim"}),
        ("write-through-link", "write", {"path": "rw/to-victim"}),
        ("write-ro-exposure", "write", {"path": str(box.inner / "inner.txt")}),
    ]
    out = box.run(attempts)
    assert out["control-create"] == "ok" and (box.rw / "new").read_text() == "PWNED\n"
    assert out["plant-link"] == "ok"
    assert_all_refused(out, [a[0] for a in attempts[1:] if a[0] != "plant-link"])
    assert box.victim_intact()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt", "victim.txt"]
    assert (box.rw / "movable").exists()


@pytest.mark.parametrize("provider", providers())
def test_metadata_of_a_file_outside_expose_rw(provider: str, tmp_path: Path) -> None:
    """chmod/utime/chown outside the exposures. Landlock does not confine metadata: as root
    (who owns every system file) the landlock provider makes every mount but the writable
    exposures read-only (``EROFS``; issue 26 #8: the calls succeeded); a normal user can
    still change the metadata of files of their own (documented in docs/providers.md,
    landlock, "Metadata"), and the file's contents stay out of reach."""
    box = bench(provider, tmp_path)
    victim = str(box.victim)
    out = box.run(
        [
            ("chmod", "chmod", {"path": victim, "mode": 0o666}),
            ("utime", "utime", {"path": victim, "stamp": 5}),
            ("chown", "chown", {"path": victim}),
            ("read", "read", {"path": victim}),
        ]
    )
    assert refused(out["read"])
    if provider == "landlock" and os.geteuid() != 0:
        assert out["chmod"] == "ok" and out["utime"] == "ok"  # the documented residual
        assert oct(box.victim.stat().st_mode & 0o777) == oct(0o666)
    else:
        assert_all_refused(out, ["chmod", "utime", "chown"])
        assert box.victim_intact()
    if provider == "landlock" and os.geteuid() == 0:
        assert out["chmod"] == out["utime"] == out["chown"] == "err:EROFS", out.results


@pytest.mark.parametrize("provider", providers())
def test_metadata_inside_expose_rw_still_changes(provider: str, tmp_path: Path) -> None:
    """What the landlock fix for root (a read-only file system outside the writable
    exposures) must not break, with the guards off: ``chmod``/``utime``/``chown`` of a file
    in ``expose-rw``, ``shutil.copy2`` into it, and a tar extraction that sets modes, times
    and (as root) owners."""
    import io
    import tarfile

    box = bench(provider, tmp_path)
    (box.rw / "mine").write_text("MINE\n")
    (box.project / "source.txt").write_text("SOURCE\n")
    os.utime(box.project / "source.txt", (1_200_000_000, 1_200_000_000))
    os.chmod(box.project / "source.txt", 0o640)
    with tarfile.open(box.project / "archive.tar", "w") as tar:
        for name, mode in (("dir", 0o750), ("dir/file", 0o604)):
            info = tarfile.TarInfo(name)
            info.mode, info.mtime = mode, 1_300_000_000
            # owner 0: root inside the sandbox (as root, or unshare's mapped user) sets it;
            # a normal user's tarfile does not try (chown to an unmapped uid would fail)
            info.uid = info.gid = 0
            if name == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = 5
                tar.addfile(info, io.BytesIO(b"DATA\n"))
    (box.rw / "untarred").mkdir()
    out = box.run(
        [
            ("chmod", "chmod", {"path": "rw/mine", "mode": 0o600}),
            ("utime", "utime", {"path": "rw/mine", "stamp": 1_100_000_000}),
            ("chown", "chown", {"path": "rw/mine"}),
            ("copy2", "copy2", {"src": "source.txt", "dst": "rw/copied.txt"}),
            ("untar", "untar", {"archive": "archive.tar", "dest": "rw/untarred"}),
        ]
    )
    assert out["chmod"] == out["utime"] == out["chown"] == "ok", out.results
    st = (box.rw / "mine").stat()
    assert (st.st_mode & 0o777, int(st.st_mtime)) == (0o600, 1_100_000_000)
    assert out["copy2"] == "ok:0o640:1200000000", out.results
    assert out["untar"] == "ok:dir=0o750@1300000000,dir/file=0o604@1300000000", out.results


# -- the profile file ------------------------------------------------------------------------


@pytest.mark.parametrize("provider", providers())
def test_profile_inside_expose_rw_stays_read_only(provider: str, tmp_path: Path) -> None:
    box = bench(provider, tmp_path)
    profile = box.rw / "sandbox.yaml"
    profile.write_text(box.profile_path.read_text())
    original = profile.read_text()
    (box.rw / "replacement").write_text("version: 1\n")
    attempts = [
        ("control-write", "write", {"path": "rw/mine", "flags": "create"}),
        ("append", "write", {"path": "rw/sandbox.yaml", "data": "api: {allow: ['*']}\n"}),
        ("o-trunc", "write", {"path": "rw/sandbox.yaml", "flags": "trunc"}),
        ("truncate", "truncate", {"path": "rw/sandbox.yaml"}),
        ("chmod", "chmod", {"path": "rw/sandbox.yaml", "mode": 0o666}),
        ("rename-away", "rename", {"src": "rw/sandbox.yaml", "dst": "rw/old"}),
        ("rename-over", "rename", {"src": "rw/replacement", "dst": "rw/sandbox.yaml"}),
        ("unlink", "unlink", {"path": "rw/sandbox.yaml"}),
        ("hard-link", "link", {"src": "rw/sandbox.yaml", "dst": "rw/alias"}),
        ("write-alias", "write", {"path": "rw/alias"}),
    ]
    cmd = ("--profile", str(profile))
    if provider == "landlock":
        # Landlock cannot narrow a grant below an expose-rw directory: fail closed (125).
        proc = subprocess.run(
            box.command(attempts, *cmd), cwd=box.project, env=BASE_ENV, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 125, proc.stderr
        assert "read-only" in proc.stderr and "PROBE-RESULT" not in proc.stdout
        return
    out = box.run(attempts, *cmd)
    assert out["control-write"] == "ok"
    assert_all_refused(out, [a[0] for a in attempts[1:]])
    assert profile.read_text() == original
    assert oct(profile.stat().st_mode & 0o777) == oct(0o644)


# -- inherited descriptors -------------------------------------------------------------------


@pytest.mark.parametrize("provider", providers())
def test_only_the_standard_fds_reach_the_program(provider: str, tmp_path: Path) -> None:
    """The bootstrap's payload memfd is closed before user code: only 0, 1, 2 are open."""
    box = bench(provider, tmp_path)
    out = box.run([("fds", "fds", {})])
    fds = _fds(out["fds"])
    assert sorted(fds) == ["0", "1", "2"], fds


@pytest.mark.parametrize("provider", providers())
def test_report_channel_is_a_pipe_and_nothing_else(provider: str, tmp_path: Path) -> None:
    """With ``--events`` the report channel stays open (events are written by the program's
    own interpreter): it must be a pipe to pysb, never a file, directory or memfd."""
    box = bench(provider, tmp_path)
    out = box.run([("fds", "fds", {})], "--events", str(tmp_path / "events.jsonl"))
    fds = _fds(out["fds"])
    extra = {fd: target for fd, target in fds.items() if fd not in ("0", "1", "2")}
    assert len(extra) <= 1, fds
    assert all(target.startswith("pipe:") for target in extra.values()), fds


def _fds(result: str) -> dict[str, str]:
    import json

    assert result.startswith("ok:"), result
    return json.loads(result[3:])


@pytest.mark.parametrize("provider", providers())
def test_read_only_stdin_cannot_be_reopened_for_writing(provider: str, tmp_path: Path) -> None:
    """``pysb run prog < file`` lends the file read-only; /proc/self/fd/0 must not widen it."""
    box = bench(provider, tmp_path)
    fd = os.open(box.victim, os.O_RDONLY)
    try:
        out = box.run(
            [
                ("control-read-stdin", "read_fd", {"fd": 0}),
                ("reopen-rdwr", "reopen_fd", {"fd": 0, "flags": "rdwr"}),
                ("reopen-append", "reopen_fd", {"fd": 0, "flags": "append"}),
            ],
            stdin=fd,
        )
    finally:
        os.close(fd)
    assert out["control-read-stdin"] == "ok:ORIGINAL\n"  # the loan itself works
    # pysb hands a file-backed stdin over as a pipe (pysb_core.launch.stdio): reopening fd 0 may
    # succeed, but it reopens the pipe, never the host file. The file is what must not change.
    for attempt in ("reopen-rdwr", "reopen-append"):
        assert refused(out[attempt]) or out[attempt] == "ok", out[attempt]
    assert box.victim_intact()


@pytest.mark.parametrize("provider", providers())
def test_write_only_stderr_cannot_be_reopened_for_reading(provider: str, tmp_path: Path) -> None:
    """``pysb run prog 2>> log`` lends the log for appending; reading it back is a leak."""
    box = bench(provider, tmp_path)
    fd = os.open(box.secret, os.O_WRONLY | os.O_APPEND)
    try:
        out = box.run(
            [
                ("control-append", "write_fd", {"fd": 2, "data": "LOGGED\n"}),
                # open only: reading a pipe's read end that nobody writes would block
                ("reopen-read", "open_only", {"path": "/proc/self/fd/2", "flags": "read"}),
            ],
            stderr=fd,
        )
    finally:
        os.close(fd)
    assert out["control-append"] == "ok" and box.secret.read_text().endswith("LOGGED\n")
    # A file-backed stderr reaches the program as a pipe (pysb_core.launch.stdio): a reopen opens
    # the pipe at most, never the log (test_file_backed_stdio_reaches_the_program_as_pipes).
    assert refused(out["reopen-read"]) or out["reopen-read"] == "ok", out["reopen-read"]
    assert box.token not in out.proc.stdout


@pytest.mark.parametrize("provider", providers())
def test_kernel_tunables_and_devices_are_not_writable(provider: str, tmp_path: Path) -> None:
    """Global sysctls, sysrq and raw memory: only *opened* for writing, never written (a
    write to any of them could harm the host; being handed the fd is the escape)."""
    box = bench(provider, tmp_path)
    targets = ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches",
               "/proc/sysrq-trigger", "/dev/mem", "/dev/kmsg"]  # fmt: skip
    attempts = [(t, "open_only", {"path": t}) for t in targets]
    attempts += [("read-kcore", "open_only", {"path": "/proc/kcore", "flags": "read"})]
    out = box.run([("control-devnull", "write", {"path": "/dev/null"}), *attempts])
    assert out["control-devnull"] == "ok"
    assert_all_refused(out, [a[0] for a in attempts])


@pytest.mark.parametrize("provider", providers())
def test_host_named_unix_socket_unreachable(provider: str, tmp_path: Path) -> None:
    """A host service listening on a Unix socket outside the exposures (the shape of
    docker.sock or an ssh-agent) must not be reachable."""
    import threading

    box = bench(provider, tmp_path)
    path = str(box.root / "outside" / "agent.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)
    accepted: list[int] = []

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        accepted.append(1)
        with conn:
            conn.sendall(b"hello\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        out = box.run(
            [
                ("control-pair", "socketpair", {}),
                ("connect", "unix_connect", {"path": path}),
            ]
        )
    finally:
        # close() alone leaves accept() blocked in the thread (the join then waited its 5 s
        # out on every provider): shutdown() wakes it with an error, as no client came.
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=5)
    assert not thread.is_alive()
    assert out["control-pair"] == "ok"
    assert refused(out["connect"]), out["connect"]
    assert not accepted


@pytest.fixture
def host_keys():
    """A ``user`` key in this process's session keyring (inherited by what it starts) and
    one in the user keyring; both invalidated afterwards."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    token = os.urandom(8).hex()
    payload = f"KEY-SECRET-{token}".encode()
    keys = {}
    for name, ring in (("session", -3), ("user", -4)):
        desc = f"pysb-test-{name}-{token}"
        serial = libc.syscall(248, b"user", desc.encode(), payload,
                              ctypes.c_size_t(len(payload)), ctypes.c_long(ring))  # fmt: skip
        if serial == -1:
            pytest.skip(f"add_key: {os.strerror(ctypes.get_errno())} (no keyrings here)")
        keys[name] = (desc, ring, serial)
    try:
        yield keys, payload.decode()
    finally:
        for _, _, serial in keys.values():
            libc.syscall(250, ctypes.c_long(21), ctypes.c_long(serial))  # KEYCTL_INVALIDATE


@pytest.mark.parametrize("provider", providers())
def test_callers_keyrings_are_unreadable(provider: str, tmp_path: Path, host_keys) -> None:
    keys, payload = host_keys
    attempts = [
        (name, "read_key", {"description": desc, "keyring": ring})
        for name, (desc, ring, _) in keys.items()
    ]
    # Control: the same search outside the sandbox finds and reads the session key.
    assert _host_probe(attempts)["session"] == "ok:" + payload
    box = bench(provider, tmp_path)
    out = box.run(attempts)
    assert_all_refused(out, list(keys))
    assert payload not in out.proc.stdout


# -- environment -----------------------------------------------------------------------------


@pytest.mark.parametrize("provider", providers())
def test_unforwarded_host_variable_is_nowhere_inside(provider: str, tmp_path: Path) -> None:
    """A secret in pysb's own environment: not in the program's environ, not in any
    ``/proc/PID/environ`` or ``cmdline`` it can read, not in its parent's."""
    box = bench(provider, tmp_path, 'env: {FORWARDED: "${FORWARDED_HOST}"}\n')
    needle = f"HOST-SECRET-{box.token}"
    out = box.run(
        [
            ("environ", "environ", {}),
            ("self-environ", "read", {"path": "/proc/self/environ"}),
            ("parent-environ", "parent_file", {"name": "environ"}),
            ("parent-cmdline", "parent_file", {"name": "cmdline"}),
            ("scan", "scan_proc", {"needle": needle}),
        ],
        env={"HOST_SECRET": needle, "FORWARDED_HOST": "visible"},
    )
    assert '"FORWARDED": "visible"' in out["environ"]  # control: forwarding works
    assert "HOST_SECRET" not in out.proc.stdout
    assert needle not in out.proc.stdout
    assert not out["scan"].startswith("leak"), out["scan"]
    if provider == "landlock":
        # No PID namespace: the parent is pysb itself, and Landlock grants /proc/self only.
        assert_all_refused(out, ["parent-environ", "parent-cmdline", "scan"])


# -- processes -------------------------------------------------------------------------------


@pytest.fixture
def host_sleep():
    """A process on the host (ours) that the sandbox must not be able to touch."""
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("provider", providers())
def test_host_process_cannot_be_signalled_or_traced(
    provider: str, tmp_path: Path, host_sleep: subprocess.Popen[bytes]
) -> None:
    box = bench(provider, tmp_path)
    pid = host_sleep.pid
    attempts = [
        ("control-self", "kill", {"pid": 0, "sig": 0}),  # own process group: allowed
        ("probe", "kill", {"pid": pid, "sig": 0}),
        ("sigkill", "kill", {"pid": pid, "sig": int(signal.SIGKILL)}),
        ("ptrace-attach", "ptrace", {"pid": pid, "request": "attach"}),
        ("ptrace-seize", "ptrace", {"pid": pid, "request": "seize"}),
        ("mem", "read", {"path": f"/proc/{pid}/mem"}),
    ]
    if provider == "landlock":  # same PID namespace: pysb itself is the parent
        attempts.append(("parent-signal", "parent_kill", {"sig": 0}))
    out = box.run(attempts)
    assert out["control-self"] == "ok"
    assert_all_refused(out, [a[0] for a in attempts[1:]])
    assert host_sleep.poll() is None, "the host's sleep died"
    if provider == "landlock":
        assert out["sigkill"] == "err:EPERM"  # Landlock signal scoping (ABI >= 6)
    else:
        assert out["sigkill"] == "err:ESRCH"  # not even visible: own PID namespace


@pytest.mark.parametrize("provider", providers())
def test_no_privileges_to_regain(provider: str, tmp_path: Path) -> None:
    """setns into PID 1's namespaces, a new user+mount namespace, mounts: none of it may
    open a way to the host's files."""
    box = bench(provider, tmp_path)
    secret = str(box.secret)
    out = box.run(
        [
            ("caps", "caps", {}),
            ("setns-mnt", "setns", {"path": "/proc/1/ns/mnt"}),
            ("setns-user", "setns", {"path": "/proc/1/ns/user"}),
            ("mount-tmpfs", "mount_tmpfs", {"target": "rw"}),
            ("mount-bind", "mount_bind", {"source": "/", "target": "rw"}),
            ("unshare", "unshare", {"flags": 0x10000000 | 0x00020000}),
            ("mount-after-unshare", "mount_tmpfs", {"target": "rw"}),
            ("bind-after-unshare", "mount_bind", {"source": "/", "target": "rw"}),
            ("secret-after", "read", {"path": secret}),
            ("secret-via-bind", "read", {"path": "rw" + secret}),
        ]
    )
    assert out["caps"].startswith("ok:")
    refusals = ["setns-mnt", "setns-user", "mount-tmpfs", "mount-bind", "mount-after-unshare"]
    assert_all_refused(out, [*refusals, "bind-after-unshare", "secret-after", "secret-via-bind"])
    assert box.token not in out.proc.stdout
    # The shared seccomp filter refuses new namespaces everywhere (under landlock the
    # unshare succeeded until issue 26 #7), and every mount-family call.
    assert out["unshare"] == "err:EPERM", out.results
    assert out["mount-tmpfs"] == "err:EPERM", out.results


@pytest.mark.parametrize("provider", providers())
def test_no_kernel_module_loading(provider: str, tmp_path: Path) -> None:
    box = bench(provider, tmp_path)
    out = box.run(
        [("caps", "caps", {}), ("finit", "finit_module", {}),
         ("delete", "delete_module", {"name": "pysb_no_such_module"})]
    )  # fmt: skip
    assert_all_refused(out, ["finit", "delete"])
    cap_sys_module = 1 << 16
    caps = _fds(out["caps"])
    assert not int(caps["CapEff"], 16) & cap_sys_module
    if os.getuid() == 0 or provider != "landlock":
        assert not int(caps["CapBnd"], 16) & cap_sys_module
    else:  # a normal user cannot shrink the bounding set (no CAP_SETPCAP), and needs not:
        # nothing is permitted, and no_new_privs keeps set-uid and file capabilities out.
        assert int(caps["CapPrm"], 16) == 0
    host = _host_probe([("delete", "delete_module", {"name": "pysb_no_such_module"})])
    if host["delete"] == "err:ENOSYS":  # this kernel has no module support at all
        assert out["delete"] in ("err:EPERM", "err:ENOSYS")
    else:  # the host (root) gets past the capability check; the sandbox must not
        assert out["delete"] == "err:EPERM"


def _host_probe(attempts: list[tuple[str, str, dict[str, object]]]) -> dict[str, str]:
    """The same probe run directly on the host, unsandboxed: the control for a refusal."""
    import json

    proc = subprocess.run(
        [sys.executable, str(PROBE), json.dumps([list(a) for a in attempts])],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE-RESULT "))
    return json.loads(line.removeprefix("PROBE-RESULT "))


# -- the terminal ----------------------------------------------------------------------------


def _run_on_pty(argv: list[str], cwd: Path) -> tuple[int, bytes]:
    """Run ``argv`` with a new pty as its controlling terminal; return (status, output)."""
    master, slave = pty.openpty()

    def make_controlling() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        argv, cwd=cwd, env=BASE_ENV, stdin=slave, stdout=slave, stderr=slave,
        preexec_fn=make_controlling,
    )  # fmt: skip
    os.close(slave)
    output = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                break
            try:
                chunk = os.read(master, 4096)
            except OSError as exc:
                if exc.errno == errno.EIO:  # every slave end closed
                    break
                raise
            if not chunk:
                break
            output += chunk
    finally:
        status = proc.wait(timeout=60)
        os.close(master)
    return status, output


@pytest.mark.parametrize("provider", providers())
def test_tiocsti_cannot_type_into_the_terminal(provider: str, tmp_path: Path) -> None:
    import json

    box = bench(provider, tmp_path)
    marker = f"INJ{box.token}"
    attempts = [("control-read", "read", {"path": "ctl.txt"}),
                ("tiocsti", "tiocsti", {"text": marker + "\n"})]  # fmt: skip
    # Control: the same probe on the same kind of terminal, unsandboxed, does inject.
    status, output = _run_on_pty(
        [sys.executable, str(PROBE), json.dumps([list(a) for a in attempts])], box.project
    )
    assert status == 0 and b'"tiocsti": "ok"' in output and marker.encode() in output, output
    status, output = _run_on_pty(box.command(attempts), box.project)
    assert b"PROBE-RESULT" in output, output
    assert b'"control-read": "ok:CONTROL' in output, output
    assert b'"tiocsti": "err:' in output, output
    assert marker.encode() not in output, "typed into the terminal"


# -- network ---------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", providers())
def test_host_loopback_unreachable_without_a_rule(provider: str, tmp_path: Path) -> None:
    box = bench(provider, tmp_path)
    server = LoopbackServer()
    try:
        out = box.run([("connect", "tcp_connect", {"host": "127.0.0.1", "port": server.port})])
        assert refused(out["connect"]), out["connect"]
        assert server.accepted == 0
        if provider == "firejail":
            return  # no TCP rules at the OS layer (docs/providers.md): no allowed control
        # Control: the same connection with a rule that allows it goes through.
        host = "*" if provider == "landlock" else "127.0.0.1"  # Landlock filters ports only
        rule = f"allow tcp {host} {server.port} out"
        out = box.run(
            [("connect", "tcp_connect", {"host": "127.0.0.1", "port": server.port})],
            "--net", rule,
        )  # fmt: skip
        assert out["connect"] == "ok:ok", out.proc.stderr
        assert server.accepted == 1
    finally:
        server.close()


@pytest.mark.parametrize("provider", providers())
def test_host_loopback_udp_and_ipv6_get_nothing(provider: str, tmp_path: Path) -> None:
    """A datagram to a host UDP service (a DNS-style exfiltration) and TCP to ``::1``: the
    namespace providers may send into their own loopback, but nothing reaches the host."""
    box = bench(provider, tmp_path)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    tcp6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    tcp6.bind(("::1", 0))
    tcp6.listen(4)
    tcp6.setblocking(False)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # control: it arrives
            probe.sendto(b"control", udp.getsockname())
        assert udp.recv(64) == b"control"
        out = box.run(
            [
                ("udp", "udp_send", {"host": "127.0.0.1", "port": udp.getsockname()[1],
                                     "data": f"EXFIL-{box.token}"}),
                ("tcp6", "tcp_connect", {"host": "::1", "port": tcp6.getsockname()[1]}),
            ]
        )  # fmt: skip
        with pytest.raises(BlockingIOError):
            udp.recv(64)
        with pytest.raises(BlockingIOError):
            tcp6.accept()
    finally:
        udp.close()
        tcp6.close()
    assert refused(out["tcp6"]), out["tcp6"]
    if provider == "landlock":  # same network namespace: the kernel must refuse the calls
        assert_all_refused(out, ["udp", "tcp6"])


@pytest.mark.parametrize("provider", providers())
def test_another_terminal_on_the_host_is_unreachable(provider: str, tmp_path: Path) -> None:
    """A pty the host holds open (another user's shell, say) must not be writable."""
    box = bench(provider, tmp_path)
    master, slave = pty.openpty()
    try:
        name = os.ttyname(slave)
        with open(name, "wb", buffering=0) as tty:  # control: a write by path reaches it
            tty.write(b"CTL\n")
        assert os.read(master, 64).startswith(b"CTL")
        out = box.run([("write-pts", "write", {"path": name, "data": f"INJ{box.token}\n"})])
        os.set_blocking(master, False)
        try:
            seen = os.read(master, 4096)
        except BlockingIOError:
            seen = b""
    finally:
        os.close(master)
        os.close(slave)
    assert refused(out["write-pts"]), out["write-pts"]
    assert box.token.encode() not in seen


@pytest.mark.parametrize("provider", providers())
def test_raw_packet_and_netlink_sockets_refused(provider: str, tmp_path: Path) -> None:
    box = bench(provider, tmp_path)
    labels = ["icmp", "tcp-raw", "packet"]
    out = box.run(
        [
            ("control-pair", "socketpair", {}),
            *[(k, "raw_socket", {"kind": k}) for k in labels],
            ("netlink-set-lo-up", "netlink_route", {}),
        ]
    )
    assert out["control-pair"] == "ok"
    assert_all_refused(out, [*labels, "netlink-set-lo-up"])


@pytest.mark.parametrize("provider", providers())
def test_host_abstract_unix_socket_unreachable(provider: str, tmp_path: Path) -> None:
    """D-Bus, X11, ssh-agent... listen on abstract names: Landlock scopes them (ABI >= 6),
    the namespace providers have their own network namespace (abstract names are per
    namespace)."""
    if provider == "landlock" and _landlock_abi() < 6:
        pytest.skip("Landlock ABI < 6 cannot scope abstract sockets (documented)")
    box = bench(provider, tmp_path)
    name = f"pysb-test-{box.token}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(4)
    listener.setblocking(False)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:  # control: it works
            client.connect("\0" + name)
            listener.accept()[0].close()
        out = box.run([("abstract", "abstract_unix", {"name": name})])
        assert refused(out["abstract"]), out["abstract"]
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


def _landlock_abi() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return int(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


# -- resource limits -------------------------------------------------------------------------


@pytest.mark.parametrize("provider", providers())
def test_process_limit_bounds_a_fork_bomb(provider: str, tmp_path: Path) -> None:
    """A bounded fork loop (at most 48 sleeping children, all reaped by the probe; the
    sandbox's PID namespace and a wall-time limit clean up if the probe dies)."""
    if provider == "landlock":
        pytest.skip("no PID namespace: see test_process_limit_without_pid_namespace")
    box = bench(provider, tmp_path, "limits: {processes: 12, wall-time: 60s}\n")
    out = box.run([("fork", "fork_many", {"limit": 48, "sleep": 30})])
    forked = int(out["fork"].split(":")[1])
    assert forked < 12, out["fork"]
    assert out["fork"].endswith(":EAGAIN"), out["fork"]


@pytest.mark.parametrize("provider", [_param("landlock")])
def test_process_limit_without_pid_namespace(provider: str, tmp_path: Path) -> None:
    """Landlock has no PID namespace, so no fork bomb: 20 children (limit 8), each of which
    exits by itself after 20 s even if the probe were killed before reaping it."""
    box = bench(provider, tmp_path, "limits: {processes: 8, wall-time: 60s}\n")
    out = box.run([("fork", "fork_many", {"limit": 20, "sleep": 20})])
    forked = int(out["fork"].split(":")[1])
    assert forked < 8, out["fork"]


@pytest.mark.parametrize("provider", providers())
def test_memory_limit_bounds_an_allocation_bomb(provider: str, tmp_path: Path) -> None:
    box = bench(provider, tmp_path, "limits: {memory: 256M, wall-time: 60s}\n")
    out = box.run([("allocate", "allocate", {"mib": 1024})])
    _, reached, error = out["allocate"].split(":")
    assert error == "MemoryError" and int(reached) <= 256, out["allocate"]


# -- qemu: a small subset (every run boots a VM) ---------------------------------------------


@pytest.mark.slow
@pytest.mark.provider("qemu")
def test_qemu_files_env_fds_and_privileges(tmp_path: Path) -> None:
    box: Bench = bench("qemu", tmp_path)
    secret, victim = str(box.secret), str(box.victim)
    needle = f"HOST-SECRET-{box.token}"
    os.symlink(secret, box.rw / "host-planted")
    attempts = [
        ("control-write", "write", {"path": "rw/mine", "flags": "create"}),
        ("direct", "read", {"path": secret}),
        ("proc-self-root", "read", {"path": "/proc/self/root" + secret}),
        ("proc-1-root", "read", {"path": "/proc/1/root" + secret}),
        ("host-planted-link", "read", {"path": "rw/host-planted"}),
        ("openat-deep", "read", {"path": "../" * 20 + secret.lstrip("/"), "dir_fd": "rw"}),
        ("sibling", "read", {"path": str(box.sibling)}),
        ("append", "write", {"path": victim}),
        ("chmod", "chmod", {"path": victim, "mode": 0o666}),
        ("rename-in", "rename", {"src": victim, "dst": "rw/stolen"}),
        ("write-ro-exposure", "write", {"path": str(box.inner / "inner.txt")}),
        ("mount-tmpfs", "mount_tmpfs", {"target": "rw"}),
        ("delete-module", "delete_module", {"name": "pysb_no_such_module"}),
        ("scan", "scan_proc", {"needle": needle}),
        ("fds", "fds", {}),
    ]
    out = box.run(attempts, env={"HOST_SECRET": needle})
    assert out["control-write"] == "ok"
    assert_all_refused(out, [a[0] for a in attempts[1:-2]])
    assert out["scan"].startswith("ok:"), out["scan"]
    assert sorted(_fds(out["fds"])) == ["0", "1", "2"], out["fds"]
    assert box.victim_intact()
    assert box.token not in out.proc.stdout


@pytest.mark.slow
@pytest.mark.provider("qemu")
def test_qemu_network_and_memory(tmp_path: Path) -> None:
    box = bench("qemu", tmp_path, "limits: {memory: 256M, wall-time: 120s}\n")
    server = LoopbackServer()
    try:
        out = box.run(
            [
                ("connect", "tcp_connect", {"host": "127.0.0.1", "port": server.port}),
                ("gateway", "tcp_connect", {"host": "10.0.2.2", "port": server.port}),
                ("packet", "raw_socket", {"kind": "packet"}),
                ("allocate", "allocate", {"mib": 1024}),
            ]
        )
    finally:
        server.close()
    assert_all_refused(out, ["connect", "gateway", "packet"])
    assert server.accepted == 0
    assert out["allocate"].endswith(":MemoryError"), out["allocate"]


def test_probe_reports_refusals_and_successes(tmp_path: Path) -> None:
    """The probe itself, unsandboxed: what it calls a success is a success."""
    (tmp_path / "f").write_text("x")
    result = _host_probe(
        [("read", "read", {"path": str(tmp_path / "f")}),
         ("missing", "read", {"path": str(tmp_path / "nope")})]
    )  # fmt: skip
    assert result == {"read": "ok:x", "missing": "err:ENOENT"}


@pytest.mark.slow
@pytest.mark.provider("qemu")
def test_qemu_process_limit(tmp_path: Path) -> None:
    """A fork loop inside the VM is harmless to the host (bounded at 48, reaped); the guest's
    uid 0 ignores RLIMIT_NPROC, so this needs the guest's pids cgroup."""
    box = bench("qemu", tmp_path, "limits: {processes: 12, wall-time: 120s}\n")
    out = box.run([("fork", "fork_many", {"limit": 48, "sleep": 30})])
    forked = int(out["fork"].split(":")[1])
    assert forked < 12, out["fork"]


# -- pysb as a confused deputy ---------------------------------------------------------------


@pytest.mark.parametrize("provider", providers())
def test_events_file_swapped_for_a_symlink_is_not_followed(provider: str, tmp_path: Path) -> None:
    """The one host-side test here: pysb (the host process, root) writes the ``--events``
    file, which may sit in an ``expose-rw`` directory. The program replaces it with a symlink
    to a host file, then provokes an event: pysb must not write through the link. The Python
    layer is on (it is what produces events); the swap uses libc, which it does not judge."""
    box = bench(provider, tmp_path)
    events = box.rw / "events.jsonl"
    provoke = "try:\n    open('/etc/shadow')\nexcept OSError:\n    pass\n"
    swap = (
        "import ctypes\nlibc = ctypes.CDLL(None)\n"
        "assert libc.unlink(b'rw/events.jsonl') == 0\n"
        f"assert libc.symlink({str(box.victim).encode()!r}, b'rw/events.jsonl') == 0\n"
    )
    base = ["run", "--profile", ".pysb.yaml", "--provider", provider, "--events", "rw/events.jsonl"]
    base.append("-c")
    control = subprocess.run(
        [*pysb_command(), *base, provoke], cwd=box.project, env=BASE_ENV,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert control.returncode == 0, control.stderr
    assert "/etc/shadow" in events.read_text()  # control: the denial is recorded
    events.unlink()
    proc = subprocess.run(
        [*pysb_command(), *base, swap + provoke], cwd=box.project, env=BASE_ENV,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert events.is_symlink()  # the swap happened
    assert box.victim_intact()


@pytest.mark.parametrize("provider", providers())
def test_file_backed_stdio_reaches_the_program_as_pipes(provider: str, tmp_path: Path) -> None:
    """A file is a capability: fds 0-2 that are files reach the program as pipes, with
    their bytes copied by pysb, so /proc/self/fd/N cannot reopen the file itself."""
    from pysb_core.testing import run_pysb

    bench(provider, tmp_path)  # requires the provider (CI fails instead of skipping)
    project = tmp_path / "stdio"
    project.mkdir()
    (project / ".pysb.yaml").write_text('version: 1\nimports: "*"\napi:\n  allow: ["*"]\n')
    stdin_file, out_file = tmp_path / "in.txt", tmp_path / "out.txt"
    stdin_file.write_text("from a file\n")
    code = (
        "import os, stat, sys\n"
        "kinds = ['fifo' if stat.S_ISFIFO(os.fstat(fd).st_mode) else 'other' for fd in (0, 1, 2)]\n"
        "print(kinds, sys.stdin.read().strip())\n"
    )
    err_file = tmp_path / "err.txt"
    with stdin_file.open("rb") as fin, out_file.open("wb") as fout, err_file.open("wb") as ferr:
        import subprocess

        from pysb_core.testing import BASE_ENV, pysb_command

        run = ["run", "--profile", ".pysb.yaml", "--provider", provider, "--no-python-guards"]
        r = subprocess.run(
            [*pysb_command(), *run, "-c", code],
            cwd=project,
            env=BASE_ENV,
            stdin=fin,
            stdout=fout,
            stderr=ferr,
            timeout=120,
            check=False,
        )
    assert r.returncode == 0, err_file.read_text()
    assert out_file.read_text().strip() == "['fifo', 'fifo', 'fifo'] from a file"
    del run_pysb
