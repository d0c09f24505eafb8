"""The learning watch's parts: its filter, and reading a watched process (hostile data).

The filter is interpreted instruction by instruction (``seccomp.run``) for both machines;
the readers run against real processes of this test (their ``/proc/PID/mem``, their
descriptors); the end-to-end runs feed a learning run's watch garbage from a real child.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from pysb_core.launch.execwatch import calls, child, remote
from pysb_core.linux import seccomp as sc
from pysb_core.testing import pysb_command

NOTIFY, ALLOW = child.RET_USER_NOTIF, sc.RET_ALLOW
SOCK = 7


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_filter_notifies_the_watched_calls_and_nothing_else(machine: str) -> None:
    prog = child.program(machine, SOCK)
    assert prog is not None
    arch, nr = sc.ARCHES[machine], calls.NUMBERS[machine]
    for name in ("openat", "execve", "mkdirat", "unlinkat", "renameat2", "connect", "bind"):
        assert sc.run(prog, nr[name], arch, 3, 0x1000, 0, 0) == NOTIFY, name
    # fstat forms carry no path; sendto without an address is a connected socket's send
    assert sc.run(prog, nr["newfstatat"], arch, 3, 0, 0, calls.AT_EMPTY_PATH) == ALLOW
    assert sc.run(prog, nr["newfstatat"], arch, 3, 0x1000, 0, 0) == NOTIFY
    assert sc.run(prog, nr["statx"], arch, 3, 0, calls.AT_EMPTY_PATH) == ALLOW
    assert sc.run(prog, nr["sendto"], arch, 3, 0, 5, 0, 0, 16) == ALLOW
    assert sc.run(prog, nr["sendto"], arch, 3, 0, 5, 0, 0x7FFF00001000, 16) == NOTIFY
    assert sc.run(prog, nr["sendto"], arch, 3, 0, 5, 0, 0x100000000, 16) == NOTIFY  # high word
    # the listener travels over SOCK: that one sendmsg must not wait for itself
    assert sc.run(prog, nr["sendmsg"], arch, SOCK, 0x1000, 0) == ALLOW
    assert sc.run(prog, nr["sendmsg"], arch, SOCK + 1, 0x1000, 0) == NOTIFY
    assert sc.run(prog, 63 if machine == "aarch64" else 0, arch, 3) == ALLOW  # read
    assert sc.run(prog, nr["openat"], 0x40000003, 3, 0x1000) == ALLOW  # a foreign ABI
    assert child.program("riscv64", SOCK) is None


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_calls_from_the_guarded_interpreters_own_c_library_are_not_notified(machine: str) -> None:
    libc, loader = (0x7F12_3450_0000, 0x7F12_3466_0000), (0x7F12_FFFF_F000, 0x7F13_0000_2000)
    prog = child.program(machine, SOCK, (libc, loader))
    assert prog is not None
    arch, openat = sc.ARCHES[machine], calls.NUMBERS[machine]["openat"]
    for ip in (libc[0], libc[1] - 1, loader[0], 0x7F13_0000_0000, loader[1] - 1):
        assert sc.run(prog, openat, arch, 3, 0x1000, ip=ip) == ALLOW, hex(ip)
    for ip in (libc[0] - 1, libc[1], loader[1], 0x7F13_3450_0000, 0x5555_5555_0000, 0):
        assert sc.run(prog, openat, arch, 3, 0x1000, ip=ip) == NOTIFY, hex(ip)
    # the special cases still notify from elsewhere, and still allow what they allow
    sendto = calls.NUMBERS[machine]["sendto"]
    assert sc.run(prog, sendto, arch, 3, 0, 5, 0, 0x1000, 16, ip=0x1234) == NOTIFY
    assert sc.run(prog, sendto, arch, 3, 0, 5, 0, 0x1000, 16, ip=libc[0] + 8) == ALLOW


def test_own_code_is_this_processs_c_library_and_loader() -> None:
    ranges = child.own_code()
    assert ranges, "no C library mapping found"
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.openat, ctypes.c_void_p).value
    assert any(start <= address < end for start, end in ranges)
    assert not any(start <= id(ranges) < end for start, end in ranges)  # not the heap


def test_open_flags_and_links() -> None:
    openat = calls.CALLS["openat"]
    assert not calls.is_write(openat, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_TRUNC, os.O_TMPFILE | os.O_RDWR):
        assert calls.is_write(openat, flags)
    assert not calls.follows(openat, (0,) * 6, os.O_NOFOLLOW)
    assert calls.follows(calls.CALLS["newfstatat"], (0, 0, 0, 0, 0, 0), 0)
    assert not calls.follows(calls.CALLS["newfstatat"], (0, 0, 0, calls.AT_SYMLINK_NOFOLLOW), 0)
    assert not calls.follows(calls.CALLS["unlinkat"], (0,) * 6, 0)


def _mem() -> int:
    return os.open("/proc/self/mem", os.O_RDONLY)


def test_strings_are_read_bounded_and_up_to_an_unmapped_page() -> None:
    page = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)  # fmt: skip
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    base = libc.mmap(None, 2 * page, 3, 0x22, -1, 0)  # PROT_READ|WRITE, PRIVATE|ANONYMOUS
    assert base not in (None, ctypes.c_void_p(-1).value)
    try:
        assert libc.munmap(base + page, page) == 0
        mem = _mem()
        try:
            tail = b"/data/file\0"
            ctypes.memmove(base + page - len(tail), tail, len(tail))
            assert remote.read_string(mem, base + page - len(tail)) == b"/data/file"
            ctypes.memmove(base, b"x" * page, page)  # no NUL before the unmapped page
            assert remote.read_string(mem, base) is None
            assert remote.read_string(mem, 0) is None and remote.read_string(mem, 1 << 63) is None
            long = ctypes.create_string_buffer(b"a" * 5000)  # longer than PATH_MAX
            assert remote.read_string(mem, ctypes.addressof(long)) is None
            exact = ctypes.create_string_buffer(b"b" * 300)
            assert remote.read_string(mem, ctypes.addressof(exact)) == b"b" * 300
            assert remote.read_bytes(mem, base + page - 4, 8) is None  # crosses the hole
        finally:
            os.close(mem)
    finally:
        libc.munmap(base, page)


def test_paths_must_be_text() -> None:
    assert remote.text("/données/ok".encode()) == "/données/ok"
    assert remote.text(b"/bad\xff") is None
    assert remote.text(b"/new\nline") is None and remote.text(b"/esc\x1b[0m") is None


def test_links_resolve_in_the_watched_process_view(tmp_path: Path) -> None:
    """``/dev/stdin`` is ``/proc/self/fd/0``: the watched process's stdin, not pysb's."""
    given = tmp_path / "input.txt"
    given.write_text("x")
    (tmp_path / "link").symlink_to(given)
    with open(given) as stdin:
        proc = subprocess.Popen(["sleep", "30"], stdin=stdin)
    try:
        pid = proc.pid
        # Popen returns once the exec replaced the memory (vfork), maybe before the kernel
        # wrote the new auxiliary vector: wait until sleep sleeps.
        for _ in range(200):
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "S":
                    break
            time.sleep(0.01)
        assert remote.canonical("/dev/stdin", True, pid, pid) == str(given)
        assert remote.canonical("/proc/self/cwd", True, pid, pid) == os.getcwd()
        assert remote.canonical(f"{tmp_path}/link", False, pid, pid) == f"{tmp_path}/link"
        assert remote.canonical(f"{tmp_path}/link", True, pid, pid) == str(given)
        assert remote.canonical(f"{tmp_path}/a/../link/", True, pid, pid) == str(given)
        assert remote.canonical(f"{tmp_path}/missing/x", True, pid, pid) == f"{tmp_path}/missing/x"
        assert remote.link(pid, "fd/0") == str(given)
        assert remote.link(pid, "fd/1") in (None, os.readlink("/proc/self/fd/1"))
        found = remote.identity(pid)
        assert found is not None and found[0] == pid and len(found[1]) == 16
        assert found != remote.identity(os.getpid())  # another exec: other random bytes
    finally:
        proc.kill()
        proc.wait()
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert remote.canonical(str(loop), True, os.getpid(), os.getpid()) == str(loop)


def test_addresses() -> None:
    v4 = struct.pack("=H", socket.AF_INET) + struct.pack(">H", 8080) + bytes([127, 0, 0, 1])
    assert remote.sockaddr(v4 + bytes(8)) == ("inet", "127.0.0.1", 8080)
    v6 = struct.pack("=H", socket.AF_INET6) + struct.pack(">H", 443) + bytes(4)
    assert remote.sockaddr(v6 + socket.inet_pton(socket.AF_INET6, "::1") + bytes(4)) == (
        "inet", "::1", 443,
    )  # fmt: skip
    unix = struct.pack("=H", socket.AF_UNIX)
    assert remote.sockaddr(unix + b"/run/app.sock\0junk") == ("unix", "/run/app.sock", 0)
    assert remote.sockaddr(unix + b"\0abstract") is None
    assert remote.sockaddr(unix + b"/bad\xff\0") is None
    assert remote.sockaddr(v4) is None  # 8 bytes: shorter than a sockaddr_in
    assert remote.sockaddr(v4[:5]) is None and remote.sockaddr(b"") is None
    assert remote.sockaddr(struct.pack("=H", 0) + bytes(14)) is None  # AF_UNSPEC


HOSTILE = r"""
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.openat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
for address in (0, 1, 0xFFFFFFFFFFFF, 1 << 62):  # NULL, unmapped, kernel-ish
    libc.openat(-100, address, 0)
for path in (b"x" * 5000, b"bad\xffname", b"new\nline", b"", b"real/../real/kept"):
    buf = ctypes.create_string_buffer(path)
    libc.openat(-100, ctypes.addressof(buf), 0)
for i in range(300):  # many distinct missing paths: nothing to learn
    os.path.exists(f"missing-{i}")
s = socket.socket()
libc.connect.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
libc.connect(s.fileno(), 1, 16)  # an unreadable address
junk = ctypes.create_string_buffer(b"\x02" + bytes(200))
libc.connect(s.fileno(), ctypes.addressof(junk), 1 << 30)  # longer than any address
libc.connect(s.fileno(), ctypes.addressof(junk), 16)  # 0.0.0.0 port 0: nowhere
print("child done")
"""


def test_hostile_children_cannot_break_the_watch_or_widen_the_profile(tmp_path: Path) -> None:
    (tmp_path / "real" / "kept").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "hostile.py").write_text(HOSTILE)
    (tmp_path / "p.py").write_text(
        "import subprocess, sys\n"
        "r = subprocess.run([sys.executable, '-S', 'bin/hostile.py'], capture_output=True,\n"
        "                   text=True)\n"
        "print(r.stdout, r.stderr)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    r = subprocess.run(
        [*pysb_command(), "run", "--learn", "p.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0 and "child done" in r.stdout, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    text = (tmp_path / ".pysb.yaml").read_text()
    assert "./real/kept" in text and "./bin" in text, text  # the real directories, read
    assert "network:" not in text and "missing" not in text and "bad" not in text, text
    assert "expose-rw" not in text, text


def test_the_records_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from pysb_core.events import Event
    from pysb_core.launch.execwatch import supervisor

    monkeypatch.setattr(supervisor, "MAX_RECORDS", 3)
    a, b = socket.socketpair()
    b.close()
    watch = supervisor.Watch(a, [])
    made = [
        Event(layer="os", guard="files", action="learn", target=f"/d{i}/f", detail="open")
        for i in range(5)
    ]
    watch._commit(made[:2])
    watch._commit(made[2:])
    watch._commit(made[:1])
    assert [e.target for e in watch.events(timeout=0)] == ["/d0/f", "/d1/f", "/d2/f"]
    assert len(watch.notes) == 1 and "stopped recording" in watch.notes[0]
    a.close()
