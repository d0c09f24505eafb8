"""The program the escape tests run *inside* the sandbox (standard library only).

Usage: ``probe.py JSON`` where JSON is a list of ``[label, attempt, {kwargs}]``. Every attempt
runs in turn; the result of each is ``"ok"`` / ``"ok:<detail>"`` when the operation went
through, or ``"err:<ERRNO NAME>"`` (``"err:<ExceptionClass>"``) when the system refused it.
One line ``PROBE-RESULT {json}`` is printed at the end, so the test reads an exact verdict
per attempt rather than guessing from exit codes.

The attempts are raw system calls (``os.*``, ``ctypes`` syscalls): the tests run with
``--no-python-guards``, so only the kernel can refuse them.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import signal
import socket
import struct
import sys
import termios
import time

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long

# x86_64 system call numbers used below (the tests run on x86_64).
SYS_FINIT_MODULE = 313
SYS_DELETE_MODULE = 176
SYS_SETNS = 308
SYS_UNSHARE = 272
SYS_PTRACE = 101
SYS_MOUNT = 165
PTRACE_ATTACH = 16
PTRACE_SEIZE = 0x4206
PTRACE_DETACH = 17
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
SYS_SHMGET, SYS_SHMAT, SYS_SHMCTL, SYS_SHMDT = 29, 30, 31, 67
SYS_SEMGET, SYS_SEMCTL, SYS_MSGGET, SYS_MSGCTL = 64, 66, 68, 71
SYS_PROCESS_VM_READV = 310
MSG_FASTOPEN = 0x20000000
TCP_FASTOPEN_CONNECT = 30


def _errname(code: int) -> str:
    return "err:" + errno.errorcode.get(code, str(code))


def _syscall(number: int, *args: object) -> str:
    ctypes.set_errno(0)
    ret = LIBC.syscall(number, *args)
    if ret == -1:
        return _errname(ctypes.get_errno())
    return f"ok:{ret}"


# -- files -----------------------------------------------------------------------------------


def read(path: str, dir_fd: str | None = None) -> str:
    fd_dir = os.open(dir_fd, os.O_RDONLY | os.O_DIRECTORY) if dir_fd else None
    try:
        fd = os.open(path, os.O_RDONLY, dir_fd=fd_dir)
    finally:
        if fd_dir is not None:
            os.close(fd_dir)
    try:
        return "ok:" + os.read(fd, 200).decode(errors="replace")
    finally:
        os.close(fd)


def child_read(path: str) -> str:
    """Read ``path`` from a freshly exec'd interpreter: confinement must survive exec."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.stdout.write(open({path!r}).read())"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode == 0:
        return "ok:" + proc.stdout
    return "err:" + (proc.stderr.strip().splitlines() or ["exit"])[-1][:80]


def read_fd(fd: int) -> str:
    """Read an inherited fd as it is (the rights it was lent with)."""
    return "ok:" + os.read(fd, 200).decode(errors="replace")


def write_fd(fd: int, data: str) -> str:
    os.write(fd, data.encode())
    return "ok"


def read_fd_path(fd: int, rel: str) -> str:
    """``openat(fd, rel)`` on an fd the sandbox inherited (fd 0 in the tests)."""
    new = os.open(rel, os.O_RDONLY, dir_fd=fd)
    try:
        return "ok:" + os.read(new, 200).decode(errors="replace")
    finally:
        os.close(new)


def reopen_fd(fd: int, flags: str = "rdwr", data: str = "PWNED\n") -> str:
    """Reopen an inherited fd through ``/proc/self/fd`` with more rights than it was opened
    with, and write through the new one."""
    return write(f"/proc/self/fd/{fd}", data, flags)


def write(path: str, data: str = "PWNED\n", flags: str = "append") -> str:
    mode = {
        "append": os.O_WRONLY | os.O_APPEND,
        "create": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
        "trunc": os.O_WRONLY | os.O_TRUNC,
        "rdwr": os.O_RDWR,
    }[flags]
    fd = os.open(path, mode, 0o644)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)
    return "ok"


def open_only(path: str, flags: str = "write") -> str:
    """Open without reading or writing anything: whether the kernel hands out the fd at all
    (used on files where a successful write would do harm: sysctls, sysrq-trigger)."""
    fd = os.open(path, os.O_WRONLY if flags == "write" else os.O_RDONLY)
    os.close(fd)
    return "ok"


def listdir(path: str) -> str:
    return "ok:" + ",".join(sorted(os.listdir(path)))


def symlink(target: str, path: str) -> str:
    os.symlink(target, path)
    return "ok"


def link(src: str, dst: str) -> str:
    os.link(src, dst)
    return "ok"


def rename(src: str, dst: str) -> str:
    os.rename(src, dst)
    return "ok"


def unlink(path: str) -> str:
    os.unlink(path)
    return "ok"


def mkdir(path: str) -> str:
    os.mkdir(path)
    return "ok"


def chmod(path: str, mode: int) -> str:
    os.chmod(path, mode)
    return "ok"


def utime(path: str, stamp: int) -> str:
    os.utime(path, (stamp, stamp))
    return "ok"


def chown(path: str) -> str:
    """``chown`` to the caller's own group (no capability needed for a file it owns)."""
    os.chown(path, -1, os.getgid())
    return "ok"


def copy2(src: str, dst: str) -> str:
    """``shutil.copy2``: the copy, then its mode and times set (``copystat``)."""
    import shutil

    shutil.copy2(src, dst)
    st = os.stat(dst)
    return f"ok:{oct(st.st_mode & 0o777)}:{int(st.st_mtime)}"


def untar(archive: str, dest: str) -> str:
    """Extract ``archive`` into ``dest`` as a root-run ``tar x`` would: modes, times and
    (as root) owners set; report each member's mode and mtime."""
    import tarfile

    with tarfile.open(archive) as tar:
        tar.errorlevel = 2  # a failed chmod/utime/chown is an error, not a debug line
        if hasattr(tarfile, "fully_trusted_filter"):
            tar.extractall(dest, filter="fully_trusted")  # keep the archive's modes
        else:
            tar.extractall(dest)
        names = tar.getnames()
    out = []
    for name in names:
        st = os.stat(os.path.join(dest, name))
        out.append(f"{name}={oct(st.st_mode & 0o777)}@{int(st.st_mtime)}")
    return "ok:" + ",".join(out)


def truncate(path: str, size: int = 0) -> str:
    os.truncate(path, size)
    return "ok"


# -- environment and processes ---------------------------------------------------------------


def environ() -> str:
    return "ok:" + json.dumps(dict(os.environ))


def scan_proc(needle: str) -> str:
    """Every ``/proc/PID/{environ,cmdline}`` readable here; ``leak:...`` names those showing
    ``needle``. ``ok:N`` is the number of files read (none leaking)."""
    read_ok, leaks = 0, []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for name in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            read_ok += 1
            if needle.encode() in data:
                leaks.append(f"{pid}/{name}")
    return f"leak:{','.join(leaks)}" if leaks else f"ok:{read_ok}"


def parent_file(name: str) -> str:
    """``/proc/<parent>/<name>`` of this process (pysb itself under landlock)."""
    return read(f"/proc/{os.getppid()}/{name}")


def caps() -> str:
    """The effective and bounding capability sets, as the kernel reports them."""
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f if line.startswith("Cap"))
    return "ok:" + json.dumps({k: v.strip() for k, v in fields.items()})


def getppid() -> str:
    return f"ok:{os.getppid()}"


def kill(pid: int, sig: int) -> str:
    os.kill(pid, sig)
    return "ok"


def parent_kill(sig: int) -> str:
    os.kill(os.getppid(), sig)
    return "ok"


def ptrace(pid: int, request: str = "attach") -> str:
    req = PTRACE_ATTACH if request == "attach" else PTRACE_SEIZE
    result = _syscall(SYS_PTRACE, ctypes.c_long(req), ctypes.c_long(pid), None, None)
    if result.startswith("ok"):
        _syscall(SYS_PTRACE, ctypes.c_long(PTRACE_DETACH), ctypes.c_long(pid), None, None)
    return result


def setns(path: str) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return _syscall(SYS_SETNS, ctypes.c_int(fd), ctypes.c_int(0))
    finally:
        os.close(fd)


def unshare(flags: int) -> str:
    return _syscall(SYS_UNSHARE, ctypes.c_int(flags))


def mount_tmpfs(target: str) -> str:
    return _syscall(
        SYS_MOUNT, b"none", target.encode(), b"tmpfs", ctypes.c_ulong(0), ctypes.c_char_p(None)
    )


def mount_bind(source: str, target: str) -> str:
    return _syscall(
        SYS_MOUNT,
        source.encode(),
        target.encode(),
        ctypes.c_char_p(None),
        ctypes.c_ulong(MS_BIND | MS_REC),
        ctypes.c_char_p(None),
    )


def finit_module() -> str:
    fd = os.open("/dev/null", os.O_RDONLY)
    try:
        return _syscall(SYS_FINIT_MODULE, ctypes.c_int(fd), b"", ctypes.c_int(0))
    finally:
        os.close(fd)


def delete_module(name: str) -> str:
    """EPERM without CAP_SYS_MODULE; ENOENT would mean the capability check passed."""
    return _syscall(SYS_DELETE_MODULE, name.encode(), ctypes.c_uint(os.O_NONBLOCK))


def tiocsti(text: str) -> str:
    for ch in text.encode():
        fcntl.ioctl(0, termios.TIOCSTI, bytes([ch]))
    return "ok"


def read_key(description: str, keyring: int) -> str:
    """Find a ``user`` key by description in a keyring (-4 user, -3 session) and read it."""
    ctypes.set_errno(0)
    serial = LIBC.syscall(
        250, ctypes.c_long(10), ctypes.c_long(keyring), b"user", description.encode(), None
    )  # keyctl(KEYCTL_SEARCH, ...)
    if serial == -1:
        return _errname(ctypes.get_errno())
    buf = ctypes.create_string_buffer(256)
    got = LIBC.syscall(250, ctypes.c_long(11), ctypes.c_long(serial), buf, ctypes.c_long(256))
    if got == -1:
        return _errname(ctypes.get_errno())
    return "ok:" + buf.raw[: min(got, 256)].decode(errors="replace")


def fds() -> str:
    """The fds open in the program, without the one ``listdir`` itself uses."""
    names = os.listdir("/proc/self/fd")
    out = {}
    for name in names:
        try:
            out[name] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # listdir's own directory fd, closed by now
    return "ok:" + json.dumps(out, sort_keys=True)


# -- kernel surface (issue 26 #7) ------------------------------------------------------------

#: name -> (x86_64 number, arguments). The arguments make the kernel itself answer with
#: something else than the filter's ``EPERM`` when the call reaches it (a bad pointer:
#: ``EFAULT``; a harmless request: a result), so a refusal is seen to be the filter's.
#: Nothing here can change the host, even run unsandboxed as root: no reboot, kexec, swap,
#: accounting, pivot_root or unmount is made (the unit tests judge those), and every fd a
#: call returns is closed.
BAD_POINTER = 1
KERNEL_CALLS: dict[str, tuple[int, tuple[object, ...]]] = {
    "bpf": (321, (ctypes.c_int(0), ctypes.c_void_p(BAD_POINTER), ctypes.c_uint(8))),
    "userfaultfd": (323, (ctypes.c_int(1 | os.O_CLOEXEC),)),  # UFFD_USER_MODE_ONLY
    "perf_event_open": (298, (ctypes.c_void_p(BAD_POINTER), ctypes.c_int(0), ctypes.c_int(-1),
                              ctypes.c_int(-1), ctypes.c_ulong(0))),
    "fanotify_init": (300, (ctypes.c_uint(0x200), ctypes.c_uint(os.O_RDONLY))),  # REPORT_FID
    "keyctl-get-user": (250, (ctypes.c_int(0), ctypes.c_long(-4), ctypes.c_int(0))),
    "add_key": (248, (ctypes.c_void_p(BAD_POINTER), None, None, ctypes.c_size_t(0),
                      ctypes.c_long(-3))),
    "request_key": (249, (ctypes.c_void_p(BAD_POINTER), None, None, ctypes.c_long(0))),
    "kcmp": (312, (ctypes.c_int(os.getpid()), ctypes.c_int(os.getpid()), ctypes.c_int(0),
                   ctypes.c_ulong(0), ctypes.c_ulong(0))),  # KCMP_FILE fd 0 with itself
    "syslog": (103, (ctypes.c_int(10), None, ctypes.c_int(0))),  # SIZE_BUFFER: reads nothing
    "init_module": (175, (ctypes.c_void_p(BAD_POINTER), ctypes.c_ulong(0), b"")),
    "name_to_handle_at": (303, (ctypes.c_int(-100), b"/", ctypes.c_void_p(BAD_POINTER),
                                ctypes.c_void_p(BAD_POINTER), ctypes.c_int(0))),
    "open_by_handle_at": (304, (ctypes.c_int(-100), ctypes.c_void_p(BAD_POINTER),
                                ctypes.c_int(0))),
    "open_tree": (428, (ctypes.c_int(-100), b"/", ctypes.c_uint(0o2000000))),  # no CLONE
    "fsopen": (430, (b"tmpfs", ctypes.c_uint(0))),
    "fspick": (433, (ctypes.c_int(-100), b"/", ctypes.c_uint(0))),
    "mount_setattr": (442, (ctypes.c_int(-100), b"/", ctypes.c_uint(0),
                            ctypes.c_void_p(BAD_POINTER), ctypes.c_size_t(32))),
}  # fmt: skip
#: The calls of KERNEL_CALLS that return a new fd.
KERNEL_FDS = {"userfaultfd", "fanotify_init", "open_tree", "fsopen", "fspick"}


def kernel_call(name: str) -> str:
    """Make one call of :data:`KERNEL_CALLS`; an fd it returns is closed at once."""
    number, args = KERNEL_CALLS[name]
    result = _syscall(number, *args)
    if result.startswith("ok:") and name in KERNEL_FDS:
        os.close(int(result[3:]))
    return result


CLONE_NEWUSER_SIGCHLD = CLONE_NEWUSER | signal.SIGCHLD


def new_user_namespace(how: str) -> str:
    """A child in a new user namespace by raw ``clone`` or ``clone3`` (no C library
    wrapper, which would fall back): the child exits at once, the parent reaps it."""
    if how == "clone":  # x86_64: flags, stack, parent_tid, child_tid, tls
        ret = LIBC.syscall(56, ctypes.c_ulong(CLONE_NEWUSER_SIGCHLD), None, None, None, None)
    else:  # struct clone_args (CLONE_ARGS_SIZE_VER0): flags, ..., exit_signal, ...
        cl_args = (ctypes.c_uint64 * 8)(CLONE_NEWUSER, 0, 0, 0, signal.SIGCHLD, 0, 0, 0)
        ret = LIBC.syscall(435, ctypes.byref(cl_args), ctypes.c_size_t(64))
    if ret == 0:
        os._exit(0)
    if ret == -1:
        return _errname(ctypes.get_errno())
    os.waitpid(ret, 0)
    return "ok"


# -- network ---------------------------------------------------------------------------------


def tcp_connect(host: str, port: int) -> str:
    with socket.create_connection((host, port), timeout=5) as conn:
        return "ok:" + conn.recv(16).decode(errors="replace").strip()


def socketpair() -> str:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"x")
        return "ok" if b.recv(1) == b"x" else "err:mismatch"


def udp_send(host: str, port: int, data: str) -> str:
    """Send one datagram (the shape of a DNS query used to exfiltrate data)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.sendto(data.encode(), (host, port))
    return "ok"


def raw_socket(kind: str) -> str:
    family, stype, proto = {
        "icmp": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
        "packet": (socket.AF_PACKET, socket.SOCK_RAW, 0x0300),  # htons(ETH_P_ALL)
        "tcp-raw": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP),
    }[kind]
    socket.socket(family, stype, proto).close()
    return "ok"


def netlink_route() -> str:
    """Open a NETLINK_ROUTE socket and ask to bring ``lo`` up (a no-op that needs CAP_NET_ADMIN)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as nl:
        nl.bind((0, 0))
        index = socket.if_nametoindex("lo")
        # struct nlmsghdr + struct ifinfomsg: RTM_NEWLINK, NLM_F_REQUEST|NLM_F_ACK, IFF_UP.
        body = struct.pack("BxHiII", socket.AF_UNSPEC, 0, index, 1, 1)
        msg = struct.pack("IHHII", 16 + len(body), 16, 0x1 | 0x4, 1, 0) + body
        nl.send(msg)
        reply = nl.recv(4096)
        code = struct.unpack_from("i", reply, 16)[0]
        return "ok" if code == 0 else _errname(-code)


def abstract_unix(name: str) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect("\0" + name)
        return "ok:" + s.recv(16).decode(errors="replace").strip()


def unix_connect(path: str) -> str:
    """Connect to a named Unix socket (docker.sock, D-Bus, an agent) and read its greeting."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(path)
        return "ok:" + s.recv(16).decode(errors="replace").strip()


def interfaces() -> str:
    return "ok:" + ",".join(sorted(name for _, name in socket.if_nameindex()))


def socket_family(family: int, kind: int = socket.SOCK_STREAM, proto: int = 0) -> str:
    """Only create a socket of ``family`` (AF_VSOCK, AF_PACKET...): never connect or send."""
    socket.socket(family, kind, proto).close()
    return "ok"


def tfo_sendto(host: str, port: int, how: str = "sendto") -> str:
    """TCP Fast Open: a connection made by ``sendto``/``sendmsg`` with ``MSG_FASTOPEN``, or by
    the ``TCP_FASTOPEN_CONNECT`` option and a first write, instead of ``connect``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        if how == "sendto":
            s.sendto(b"x", MSG_FASTOPEN, (host, port))
        elif how == "sendmsg":
            s.sendmsg([b"x"], [], MSG_FASTOPEN, (host, port))
        else:
            s.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN_CONNECT, 1)
            s.connect((host, port))
            s.send(b"x")
        return "ok:" + s.recv(16).decode(errors="replace").strip()


def sysv_shm_read(key: int, size: int = 64) -> str:
    """Attach a SysV shared memory segment by key (``shmget`` + ``shmat``) and read it."""
    shmid = LIBC.syscall(SYS_SHMGET, ctypes.c_long(key), ctypes.c_size_t(0), ctypes.c_int(0))
    if shmid == -1:
        return _errname(ctypes.get_errno())
    addr = LIBC.syscall(SYS_SHMAT, ctypes.c_long(shmid), None, ctypes.c_int(0o10000))  # RDONLY
    if addr in (-1, 0xFFFFFFFFFFFFFFFF):
        return _errname(ctypes.get_errno())
    data = ctypes.string_at(addr, size)
    LIBC.syscall(SYS_SHMDT, ctypes.c_void_p(addr))
    return "ok:" + data.split(b"\0", 1)[0].decode(errors="replace")


def sysv_get(kind: str) -> str:
    """Create a private SysV object (``msgget``/``semget``/``shmget`` with ``IPC_PRIVATE``)."""
    number, args = {
        "msg": (SYS_MSGGET, (ctypes.c_long(0), ctypes.c_int(0o1600))),
        "sem": (SYS_SEMGET, (ctypes.c_long(0), ctypes.c_int(1), ctypes.c_int(0o1600))),
        "shm": (SYS_SHMGET, (ctypes.c_long(0), ctypes.c_size_t(4096), ctypes.c_int(0o1600))),
    }[kind]
    result = _syscall(number, *args)
    if result.startswith("ok:"):  # remove it again (IPC_RMID)
        ident = int(result[3:])
        ctl = {"msg": SYS_MSGCTL, "sem": SYS_SEMCTL, "shm": SYS_SHMCTL}[kind]
        LIBC.syscall(ctl, ctypes.c_int(ident), *([ctypes.c_int(0)] if kind == "sem" else []),
                     ctypes.c_int(0), None)  # fmt: skip
        return "ok"
    return result


def set_xattr(path: str, name: str = "user.pysb", how: str = "path") -> str:
    """Set (or, with ``how="remove"``, remove) an extended attribute on ``path``."""
    if how == "path":
        os.setxattr(path, name, b"PWNED")
    elif how == "fd":
        fd = os.open(path, os.O_RDONLY)
        try:
            os.setxattr(fd, name, b"PWNED")
        finally:
            os.close(fd)
    else:
        os.removexattr(path, name)
    return "ok"


def create_mode(path: str, mode: int, how: str = "open") -> str:
    """Create ``path`` with ``mode`` by ``open(O_CREAT)`` or ``mknod``, then report the mode
    the file got (the umask may drop bits, never add them)."""
    if how == "open":
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, mode))
    else:
        os.mknod(path, 0o100000 | mode)
    return "ok:" + oct(os.stat(path).st_mode & 0o7777)


def ptrace_child() -> str:
    """PTRACE_ATTACH to a child of our own (a debugger's first step), then detach."""
    pid = os.fork()
    if pid == 0:
        time.sleep(10)
        os._exit(0)
    try:
        result = _syscall(SYS_PTRACE, ctypes.c_long(PTRACE_ATTACH), ctypes.c_long(pid), None, None)
        if result.startswith("ok"):
            os.waitpid(pid, 0)
            _syscall(SYS_PTRACE, ctypes.c_long(PTRACE_DETACH), ctypes.c_long(pid), None, None)
        return result
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def ptrace_stop(pid: int) -> str:
    """PTRACE_ATTACH to ``pid`` and never detach: when this process exits, ``pid`` stays
    stopped (the sandbox's PID 1 under bwrap: the run would hang)."""
    return _syscall(SYS_PTRACE, ctypes.c_long(PTRACE_ATTACH), ctypes.c_long(pid), None, None)


def process_vm_read_child() -> str:
    """``process_vm_readv`` of a forked child's memory (the same address in both)."""

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    theirs = ctypes.create_string_buffer(b"PARENT", 8)
    mine = ctypes.create_string_buffer(8)
    pid = os.fork()
    if pid == 0:
        theirs.value = b"CHILD"
        time.sleep(10)
        os._exit(0)
    try:
        time.sleep(0.2)
        local = IoVec(ctypes.addressof(mine), 8)
        remote = IoVec(ctypes.addressof(theirs), 8)
        result = _syscall(SYS_PROCESS_VM_READV, ctypes.c_int(pid), ctypes.byref(local),
                          ctypes.c_ulong(1), ctypes.byref(remote), ctypes.c_ulong(1),
                          ctypes.c_ulong(0))  # fmt: skip
        return result if result.startswith("err") else "ok:" + mine.value.decode()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


# -- resources -------------------------------------------------------------------------------


def fork_many(limit: int, sleep: float = 30) -> str:
    """Fork up to ``limit`` children that sleep ``sleep`` s (then exit by themselves); report
    how many the kernel allowed, then kill and reap them all."""
    children = []
    error = ""
    try:
        for _ in range(limit):
            pid = os.fork()
            if pid == 0:
                time.sleep(sleep)
                os._exit(0)
            children.append(pid)
    except OSError as exc:
        error = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        for pid in children:
            os.waitpid(pid, 0)
    return f"ok:{len(children)}:{error}"


def allocate(mib: int) -> str:
    """Allocate (and touch) up to ``mib`` MiB in 16 MiB steps; report how far it got."""
    chunks = []
    try:
        for _ in range(mib // 16):
            chunks.append(bytearray(16 << 20))
    except MemoryError:
        return f"ok:{len(chunks) * 16}:MemoryError"
    finally:
        del chunks[:]
    return f"ok:{mib}:"


ATTEMPTS = {name: obj for name, obj in globals().items() if callable(obj) and name[0] != "_"}


def main() -> None:
    results: dict[str, str] = {}
    for label, attempt, kwargs in json.loads(sys.argv[1]):
        try:
            results[label] = ATTEMPTS[attempt](**kwargs)
        except OSError as exc:
            results[label] = _errname(exc.errno) if exc.errno else "err:" + type(exc).__name__
        except Exception as exc:  # a refusal in another shape is still a refusal: name it
            results[label] = "err:" + type(exc).__name__ + ":" + str(exc)[:80]
    sys.stdout.write("PROBE-RESULT " + json.dumps(results) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
