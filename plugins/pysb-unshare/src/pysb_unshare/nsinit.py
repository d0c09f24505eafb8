"""Runs inside the new namespaces (``python -I -S -c "...import nsinit; nsinit.main()" FD``,
imported rather than run as a script so that its cached bytecode is used): build the sandbox's
root, be the PID namespace's init, start the program.

Standalone on purpose -- no pysb import, only the standard library -- so that it starts in a
few milliseconds and nothing from the host's ``sys.path`` is trusted. Three processes::

    P0  exec'd by ``unshare`` (new user, mount, net, ipc, uts, cgroup namespaces; its
        children go to a new PID namespace). Brings ``lo`` up (and sets ``route_localnet``
        when the filter needs it), tells pysb so ("R") when there are network rules, sets
        the host name, waits for "G" (pysb has loaded the packet filter and attached the
        user-mode network by then: it starts doing so while this interpreter starts),
        forks P1, forwards signals to it, and ends like the program did (same exit code,
        or killed by the same signal).
    P1  PID 1 of the new PID namespace: builds the root (tmpfs + binds), mounts /proc
        (and through it forbids nested user namespaces, then makes /proc/sys read-only),
        pivots into it, forks P2, forwards signals, reaps orphans, and reports P2's wait
        status to P0. A thread watches the lifeline pipe: EOF means pysb died, and P1
        exits. When P1 exits the kernel kills everything left in the namespace.
    P2  chdir, no_new_privs, empty capability bounding set, no capabilities, only the
        inherited fds pysb named, then ``execve(argv, env)`` of the program. Whether the
        exec worked travels back to pysb ("S" or "E<message>") before pysb returns.

The program runs in its own session with no controlling terminal (so it cannot push input
into the user's shell with TIOCSTI); signals the terminal sends to the foreground process
group (Ctrl-C, window size) reach P0 and P1, and P1 alone forwards them to the program.

Why one module: the three processes above are one program started once per run: P0, P1 and P2
share the libc calls, the mount operations and the pipes' protocol with pysb, and each forks the
next from the same code. It must stay standard-library only (see above), which is checked most
easily for one file, and one module is one cached bytecode file to load in the new namespaces.
"""

from __future__ import annotations

import _signal as signal  # not ``signal``: its enum import costs ~3 ms
import errno
import marshal
import os
import struct
import sys

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
MOUNT_ATTR_RDONLY = 1
MOUNT_ATTR_NOSUID = 2
MOUNT_ATTR_NODEV = 4
AT_RECURSIVE = 0x8000
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SI_KERNEL = 0x80
_SYS = {  # syscall numbers (mount_setattr, pivot_root, keyctl) per machine
    "x86_64": (442, 155, 250),
    "aarch64": (442, 41, 219),
}
KEYCTL_JOIN_SESSION_KEYRING = 1
FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
    signal.SIGCONT,
    signal.SIGALRM,
)

# libc, set by load_libc(). Not through the ``ctypes`` package: importing it costs ~2.5 ms
# (it defines some hundred types), on the critical path of every run without network
# rules; its C module ``_ctypes`` costs ~0.5 ms and offers the pieces needed here (a C
# int, long and unsigned long, a ``char *``, a byte buffer, a function of the running
# process), made below as ``ctypes`` makes them (pysb_core.linux.cfuncs does the
# same for pysb's own calls; restated: this module imports nothing of pysb).
_libc = None
_get_errno = None
_buffer = None


class _Libc:
    """The libc functions nsinit calls, as attributes (``_libc.mount(...)``)."""


def load_libc() -> None:
    """Declare the libc functions used here (once)."""
    global _libc, _get_errno, _buffer
    if _libc is not None:
        return
    try:
        import _ctypes as c

        class Int(c._SimpleCData):
            _type_ = "i"

        class Long(c._SimpleCData):
            _type_ = "l"

        class ULong(c._SimpleCData):
            _type_ = "L"

        class CharP(c._SimpleCData):  # ctypes.c_char_p: bytes or None (NULL)
            _type_ = "z"

        class Char(c._SimpleCData):
            _type_ = "c"

        class Process:  # what a function is looked up in: dlopen(NULL)'s handle
            _handle = c.dlopen(None, c.RTLD_LOCAL)

        flags = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO
        get_errno, base, array = c.get_errno, c.CFuncPtr, c.Array
    except (ImportError, AttributeError):  # not CPython's _ctypes: the package, as before
        import ctypes

        Int, Long, ULong, CharP, Char = (
            ctypes.c_int,
            ctypes.c_long,
            ctypes.c_ulong,
            ctypes.c_char_p,
            ctypes.c_char,
        )
        Process = ctypes.CDLL(None, use_errno=True)
        flags = ctypes._FUNCFLAG_CDECL | ctypes._FUNCFLAG_USE_ERRNO
        get_errno, base, array = ctypes.get_errno, ctypes._CFuncPtr, ctypes.Array

    def function(name: str, argtypes: tuple | None = None, restype: type = Int):
        cls = type("_Function", (base,), {"_flags_": flags, "_restype_": restype})
        fn = cls((name, Process))
        if argtypes is not None:
            fn.argtypes = argtypes
        return fn

    def buffer(data: bytes):
        """A writable C copy of ``data``; passed to a function as its address."""
        return type("_Buffer", (array,), {"_type_": Char, "_length_": len(data)}).from_buffer_copy(
            data
        )

    lib = _Libc()
    lib.mount = function("mount", (CharP, CharP, CharP, ULong, CharP))
    lib.umount2 = function("umount2", (CharP, Int))
    lib.prctl = function("prctl", (Int, ULong, ULong, ULong, ULong))
    lib.syscall = function("syscall", None, Long)  # variadic: ints as C int, sign-extended
    lib.capset = function("capset")
    lib.sethostname = function("sethostname")
    _libc, _get_errno, _buffer = lib, get_errno, buffer


class SetupError(Exception):
    """A step of the sandbox set-up failed; the program must not start."""


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = _get_errno()
        raise SetupError(f"{what}: {os.strerror(err)}")


def _b(path: str) -> bytes:
    return os.fsencode(path)


# ---------------------------------------------------------------------------------------
# Mount primitives
# ---------------------------------------------------------------------------------------


def mount(
    src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    ret = _libc.mount(
        _b(src) if src else None,
        _b(dst),
        _b(fstype) if fstype else None,
        flags,
        data.encode() if data else None,
    )
    _check(ret, f"mount {src or fstype or ''} on {dst}")


def set_readonly(
    path: str, *, recursive: bool = True, readonly: bool = True, nodev: bool = True
) -> None:
    """Make a mount (and by default every mount below it) read-only, nosuid, nodev.

    Device nodes bound into /dev keep ``dev`` (``nodev`` would make them unopenable); a
    read-only mount does not stop writes to a device.
    """
    nr = _SYS.get(os.uname().machine)
    attrs = MOUNT_ATTR_NOSUID | (MOUNT_ATTR_NODEV if nodev else 0)
    attrs |= MOUNT_ATTR_RDONLY if readonly else 0
    if nr is not None:
        # struct mount_attr: attr_set, attr_clr, propagation, userns_fd (four __u64)
        attr = _buffer(struct.pack("=4Q", attrs, 0, 0, 0))
        ret = _libc.syscall(
            nr[0],
            -100,
            _b(path),
            AT_RECURSIVE if recursive else 0,
            attr,
            32,
        )
        if ret == 0:
            return
    # Older kernels: remount the top mount, keeping the flags the kernel locked on it.
    st = os.statvfs(path)
    keep = st.f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048)
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | keep | (MS_RDONLY if readonly else 0)
    flags |= MS_NODEV if nodev else 0
    mount(None, path, None, flags)


def _inside(root: str, path: str) -> bool:
    # pysb_core.linux.paths.is_within's rule, restated: this module imports nothing of pysb.
    return path == root or path.startswith(root + "/")


def ensure(root: str, target: str, *, is_dir: bool) -> str:
    """Create ``target`` below ``root`` (dirs, or an empty file) without leaving ``root``.

    Symlinks met on the way are followed only while they stay inside the new root: an
    absolute link would otherwise resolve on the host before the pivot.
    """
    cur = root
    parts = [p for p in target.split("/") if p]
    for i, part in enumerate(parts):
        nxt = os.path.join(cur, part)
        if os.path.islink(nxt):
            real = os.path.realpath(nxt)
            if not _inside(root, real):
                raise SetupError(f"{target}: the path leaves the sandbox root through a symlink")
            nxt = real
        last = i == len(parts) - 1
        if not os.path.lexists(nxt):
            if last and not is_dir:
                os.close(os.open(nxt, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
            else:
                try:
                    os.mkdir(nxt, 0o755)
                except OSError as exc:
                    raise SetupError(
                        f"cannot create mount point {target}: {exc.strerror}"
                    ) from None
        cur = nxt
    return cur


_NOFOLLOW_DIR = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC


def open_exact(path: str) -> int:
    """An ``O_PATH`` fd of the canonical directory ``path``, opened one component at a
    time without following any symbolic link (a link swapped in since the profile was
    read is an error, never followed)."""
    fd = os.open("/", _NOFOLLOW_DIR)
    try:
        for name in path.split("/"):
            if name:
                nxt = os.open(name, _NOFOLLOW_DIR, dir_fd=fd)
                os.close(fd)
                fd = nxt
    except OSError as exc:
        os.close(fd)
        raise SetupError(
            f"cannot expose {path}: a directory of its path is no longer the one the profile "
            f"named (a symbolic link now, or gone: {exc.strerror})"
        ) from None
    return fd


def host_root(root: str, readonly: bool) -> tuple[str, str]:
    """``expose-ro: [/]`` (or ``-rw``): bind the host's tree at ``ROOT/host``, which becomes
    the root to build on and pivot into; generated files go to ``ROOT/files`` (the staging
    tmpfs, out of sight after the pivot) and are bound over their places, never written
    into the host's directories. Returns ``(new_root, files_dir)``."""
    new_root, files = root + "/host", root + "/files"
    os.mkdir(new_root, 0o755)
    os.mkdir(files, 0o700)
    mount("/", new_root, None, MS_BIND | MS_REC)
    set_readonly(new_root, readonly=readonly)
    return new_root, files


def run_ops(root: str, ops: list[list], files_dir: str | None = None) -> None:
    """Execute the root layout compiled by the provider, in order. ``files_dir``: generated
    files are written there and bound over their targets (the root is the host's tree)."""
    for op in ops:
        kind = op[0]
        if kind == "bind":  # ["bind", src, target, readonly, exact]
            _, src, target, ro = op[:4]
            exact = len(op) > 4 and op[4]
            try:
                is_dir = os.path.isdir(src)
            except OSError:
                is_dir = False
            if not os.path.exists(src):
                raise SetupError(f"cannot expose {src}: it does not exist")
            dst = ensure(root, target, is_dir=is_dir)
            if exact and is_dir:
                fd = open_exact(src)
                try:  # the descriptor's own directory, whatever its path became
                    mount(f"/proc/self/fd/{fd}", dst, None, MS_BIND | MS_REC)
                finally:
                    os.close(fd)
            else:
                mount(src, dst, None, MS_BIND | MS_REC)
            set_readonly(dst, readonly=bool(ro))
        elif kind == "optbind":  # a base directory that may be absent on this host
            _, src, target = op
            if os.path.lexists(src):
                if os.path.islink(src):
                    ensure(root, os.path.dirname(target) or "/", is_dir=True)
                    os.symlink(os.readlink(src), root + target)
                else:
                    dst = ensure(root, target, is_dir=os.path.isdir(src))
                    mount(src, dst, None, MS_BIND | MS_REC)
                    set_readonly(dst)
        elif kind == "device":  # ["device", name]: /dev/NAME from the host
            src = "/dev/" + op[1]
            if os.path.exists(src):
                dst = ensure(root, src, is_dir=False)
                mount(src, dst, None, MS_BIND)
                set_readonly(dst, recursive=False, nodev=False)
        elif kind == "tmpfs":  # ["tmpfs", target, mode] or [..., size in bytes]
            target, mode = op[1], op[2]
            data = f"mode={mode}" + (f",size={int(op[3])}" if len(op) > 3 else "")
            dst = ensure(root, target, is_dir=True)
            mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, data)
        elif kind == "devpts":  # ["devpts", target]: pseudo-terminals of the sandbox's own
            # A new instance (as bwrap's --dev makes): its ptys are the sandbox's alone, the
            # host's /dev/pts (other sessions' terminals) is never reachable. No gid= option:
            # the tty group is not mapped into a one-user user namespace.
            dst = ensure(root, op[1], is_dir=True)
            mount(
                "devpts",
                dst,
                "devpts",
                MS_NOSUID | MS_NOEXEC,
                "newinstance,ptmxmode=0666,mode=0620",
            )
        elif kind == "dir":
            ensure(root, op[1], is_dir=True)
        elif kind == "file" and files_dir is not None:  # over the host's file, if any
            _, target, content, mode = op
            dst = root + target
            if os.path.isfile(dst) and not os.path.islink(dst):
                src = os.path.join(files_dir, target.strip("/").replace("/", "_"))
                with open(src, "w", encoding="utf-8") as f:
                    f.write(content)
                os.chmod(src, mode)
                mount(src, dst, None, MS_BIND)
                set_readonly(dst, recursive=False)
        elif kind == "file":  # ["file", target, content, mode]
            _, target, content, mode = op
            dst = ensure(root, target, is_dir=False)
            with open(dst, "w", encoding="utf-8") as f:
                f.write(content)
            os.chmod(dst, mode)
        elif kind == "symlink":  # ["symlink", link_text, target]
            _, text, target = op
            parent = ensure(root, os.path.dirname(target), is_dir=True)
            os.symlink(text, os.path.join(parent, os.path.basename(target)))
        elif kind == "mask":  # ["mask", target]: hide what an ignore glob matched
            target = root + op[1]
            if os.path.islink(target) or not os.path.lexists(target):
                continue
            if os.path.isdir(target):
                mount(
                    "tmpfs",
                    target,
                    "tmpfs",
                    MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    "mode=0500,size=4k",
                )
            else:
                mount("/dev/null", target, None, MS_BIND)
                set_readonly(target, recursive=False)
        elif kind == "protect":  # ["protect", target]: a profile file, never writable inside
            target = root + op[1]
            if os.path.lexists(target) and not os.path.islink(target):
                mount(target, target, None, MS_BIND)
                set_readonly(target, recursive=False)
        else:
            raise SetupError(f"unknown set-up step {kind!r}")


#: /proc entries made read-only: the program runs as uid 0 of the user namespace, and when
#: pysb itself runs as root that uid is the host's root, which the kernel's sysctl handlers
#: judge by uid alone -- a writable /proc/sys would let it change global kernel settings.
PROC_READONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
#: /proc entries hidden (empty): kernel memory, keys and timers of the whole host.
PROC_MASKED = (
    "kcore",
    "keys",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "acpi",
    "scsi",
    "asound",
    "kmsg",
    "kallsyms",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
)


def harden_proc(proc: str) -> None:
    for name in PROC_READONLY:
        path = f"{proc}/{name}"
        if os.path.lexists(path):
            mount(path, path, None, MS_BIND | MS_REC)
            set_readonly(path, nodev=False)
    for name in PROC_MASKED:
        path = f"{proc}/{name}"
        if not os.path.lexists(path):
            continue
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k")
        else:
            mount("/dev/null", path, None, MS_BIND)
            set_readonly(path, recursive=False, nodev=False)


def pivot(root: str) -> None:
    """Make ``root`` the root of this mount namespace and drop the host's tree."""
    nr = _SYS.get(os.uname().machine)
    os.chdir(root)
    if nr is None:
        raise SetupError(f"unsupported machine {os.uname().machine}")
    _check(_libc.syscall(nr[1], b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the host root")
    os.chdir("/")


# ---------------------------------------------------------------------------------------
# Process plumbing
# ---------------------------------------------------------------------------------------


def loopback_up() -> None:
    import _socket
    import fcntl

    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        req = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH", fcntl.ioctl(s.fileno(), 0x8913, req)[:18])[1]
        fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH14s", b"lo", flags | 1, b""))
    finally:
        s.close()


def drop_privileges() -> None:
    """no_new_privs, an empty bounding set and no capabilities: the program's exec cannot
    regain any, even as uid 0 of the user namespace."""
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except OSError:
        last = 63
    for cap in range(last + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _buffer(struct.pack("=2I", 0x20080522, 0))  # _LINUX_CAPABILITY_VERSION_3, pid
    data = _buffer(bytes(24))  # three __user_cap_data_struct, all zero: no capability
    _check(_libc.capset(header, data), "capset")


def new_session_keyring() -> None:
    """Leave the session keyring of whoever started pysb (tokens, Kerberos tickets live
    there): the program gets a new, empty, anonymous one."""
    nr = _SYS.get(os.uname().machine)
    if nr is None:
        raise SetupError(f"unsupported machine {os.uname().machine}")
    if _libc.syscall(nr[2], KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        err = _get_errno()
        if err != errno.ENOSYS:  # a kernel without keyrings has nothing to leak
            raise SetupError(f"cannot leave the caller's session keyring: {os.strerror(err)}")


def _write(fd: int, data: bytes) -> None:
    try:
        os.write(fd, data)
    except OSError:
        pass


def _exec_program(cfg: dict, exec_w: int, cgroup_fd: int = -1) -> None:
    """P2: become the program. Never returns."""
    try:
        if cgroup_fd >= 0:  # limits.processes as a pids cgroup: join it before anything
            try:
                os.write(cgroup_fd, b"0")
            except OSError as exc:
                raise SetupError(f"cannot join the pids cgroup: {exc.strerror}") from None
            os.close(cgroup_fd)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.chdir(cfg["cwd"])
        except OSError as exc:
            raise SetupError(
                f"cannot enter the working directory {cfg['cwd']}: {exc.strerror}"
            ) from None
        drop_privileges()
        new_session_keyring()
        # Its own session, without a controlling terminal: TIOCSTI on the user's terminal
        # would otherwise let it type commands into the shell that started pysb.
        os.setsid()
        keep = sorted({0, 1, 2, exec_w, *cfg["pass_fds"]})
        low = 3
        for fd in keep:
            if fd >= low:
                os.closerange(low, fd)
                low = fd + 1
        os.closerange(low, 65536)
        for fd in cfg["pass_fds"]:
            os.set_inheritable(fd, True)
        argv = cfg["argv"]
        env = cfg["env"]
        try:
            os.execve(argv[0], argv, env)
        except OSError as exc:
            raise SetupError(f"cannot execute {argv[0]}: {exc.strerror}") from None
    except BaseException as exc:
        _write(exec_w, f"E{exc}".encode())
        os._exit(127)


def _reap_loop(child: int, sigs: set[int], on_exit, *, from_terminal: bool) -> None:
    """Forward signals to ``child`` and reap every dead process until ``child`` is gone.

    ``from_terminal``: also forward what the terminal sent (si_code SI_KERNEL). P0 and P1
    are both in the terminal's foreground process group and both receive such a signal; P1
    alone passes it on, because the program, in its own session, does not receive it.
    """
    while True:
        info = signal.sigwaitinfo(sigs)
        if info.si_signo == signal.SIGCHLD:
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                if pid == child:
                    on_exit(status)
            continue
        if info.si_code == SI_KERNEL and not from_terminal:
            continue  # from the terminal: P1 got it too and forwards it
        try:
            os.kill(child, info.si_signo)
        except ProcessLookupError:
            pass


def _watch_lifeline(ctl: int) -> None:
    """EOF on the lifeline means pysb died: end the PID namespace (P1's exit kills it all).

    A thread of P1, because P0 cannot start threads: after ``unshare(CLONE_NEWPID)`` its
    children live in another PID namespace than itself, and the kernel refuses threads then.
    A bare ``_thread`` one: ``threading`` brings ``functools`` and ``collections`` (~2 ms of
    P1's CPU while the program starts), and nothing ever joins this thread (it ends P1).
    """

    import _thread

    def watch() -> None:
        while True:
            try:
                if not os.read(ctl, 64):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        os._exit(137)

    _thread.start_new_thread(watch, ())


def relay_plan() -> list[tuple[int, int, int]]:
    """``(fd, program end, relay end)`` for each of fds 0-2 that is a file or a device.

    The program could reopen such an fd through ``/proc/self/fd/N`` with whatever rights
    the file's owner has -- a file lent read-only as stdin would become writable, a log
    lent for appending readable. Those fds reach the program as one-way Unix sockets
    (which ``/proc/self/fd/N`` cannot reopen, unlike a pipe), relayed by P1. Terminals,
    pipes, sockets and character devices are handed over as they are.
    """
    import _socket
    import stat

    out: list[tuple[int, int, int]] = []
    for fd in (0, 1, 2):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISBLK(mode) or stat.S_ISDIR(mode)):
            continue
        program, relay = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
        program.shutdown(_socket.SHUT_WR if fd == 0 else _socket.SHUT_RD)
        out.append((fd, program.detach(), relay.detach()))
    return out


def _copy(src: int, dst: int, close: int | None) -> None:
    try:
        while data := os.read(src, 65536):
            view = memoryview(data)
            while view:
                view = view[os.write(dst, view) :]
    except OSError:
        pass  # the reader went away (EPIPE) or the file failed: nothing else to do
    finally:
        if close is not None:
            os.close(close)


def start_relays(relays: list[tuple[int, int, int]]) -> list:
    """Start P1's relay threads; return those carrying output (to be drained at the end)."""
    import threading

    outputs = []
    for fd, program_end, relay_end in relays:
        os.close(program_end)
        # stdin: file -> socket, then EOF for the program; outputs: socket -> the file
        args = (0, relay_end, relay_end) if fd == 0 else (relay_end, fd, None)
        t = threading.Thread(target=_copy, args=args, daemon=True)
        t.start()
        if fd != 0:
            outputs.append(t)
    return outputs


def pid1(cfg: dict, status_w: int, exit_w: int, ctl: int, sigs: set[int]) -> None:
    """P1: build the root, start the program, be init. Never returns."""
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        root = cfg["root"]
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=8m")
        ops, files_dir = cfg["ops"], None
        root_writable = False
        if ops and ops[0][0] == "hostroot":
            root_writable = not ops[0][1]
            root, files_dir = host_root(root, readonly=ops[0][1])
            ops = ops[1:]
        run_ops(root, ops, files_dir)
        trace(cfg, f"P1: {len(cfg['ops'])} root steps done")
        cgroup_fd = -1
        if cfg.get("cgroup_procs"):  # opened now: the host's /sys is gone after the pivot
            cgroup_fd = os.open(cfg["cgroup_procs"], os.O_WRONLY | os.O_CLOEXEC)
        ensure(root, "/proc", is_dir=True)
        mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        # No nested user namespaces: one would give the program a full capability set over
        # namespaces of its own (locked mounts still hold, but far more kernel is reachable).
        # Through the fresh /proc: the host's may be read-only (containers).
        with open(root + "/proc/sys/user/max_user_namespaces", "w") as f:
            f.write("0")
        harden_proc(root + "/proc")
        pivot(root)
        if not root_writable:
            set_readonly("/", recursive=False)
        trace(cfg, "P1: pivoted")
    except (SetupError, OSError) as exc:
        _write(status_w, f"Eunshare: {exc}".encode())
        os._exit(125)
    relays = relay_plan()
    exec_r, exec_w = os.pipe()  # O_CLOEXEC: closes by itself when the exec works
    child = os.fork()
    if child == 0:
        os.close(exec_r)
        os.close(ctl)
        for fd, program_end, _ in relays:
            os.dup2(program_end, fd)  # the rest is closed before the exec
        _exec_program(cfg, exec_w, cgroup_fd)
    os.close(exec_w)
    if cgroup_fd >= 0:
        os.close(cgroup_fd)
    outputs = start_relays(relays)
    err = b""
    while chunk := os.read(exec_r, 4096):
        err += chunk
    os.close(exec_r)
    trace(cfg, "P1: program exec'd")
    _write(status_w, (b"E" + err[1:]) if err else b"S")
    os.close(status_w)
    _watch_lifeline(ctl)

    def done(status: int) -> None:
        if outputs:
            # Whatever the program left running would keep the pipes open: end it now
            # (P1's exit would anyway), then deliver the last of its output.
            try:
                os.kill(-1, signal.SIGKILL)  # every process of this PID namespace but us
            except OSError:
                pass
            for t in outputs:
                t.join(5)
        _write(exit_w, struct.pack("i", status))
        os._exit(0)

    _reap_loop(child, sigs, done, from_terminal=True)


_T0 = 0.0


def trace(cfg: dict, what: str) -> None:
    """Phase timings on stderr when the provider asks (``PYSB_UNSHARE_TRACE=1`` on the host)."""
    if cfg.get("trace"):
        import time

        global _T0
        now = time.perf_counter()
        _T0 = _T0 or now
        os.write(2, f"nsinit[{os.getpid()}] +{(now - _T0) * 1000:.1f} ms {what}\n".encode())


def main() -> None:
    """P0."""
    cfg_fd = int(sys.argv[1])
    with os.fdopen(cfg_fd, "rb") as cfg_file:
        cfg = marshal.loads(cfg_file.read())  # same interpreter as pysb; json costs 6 ms
    ctl, status_w = cfg["ctl_fd"], cfg["status_fd"]
    trace(cfg, "P0 started")
    try:
        loopback_up()
        if cfg.get("route_localnet"):
            # The filter pysb loads meanwhile DNATs 127.0.0.1 to the host's gateway, which
            # the kernel routes only with this on (this namespace's own setting).
            with open("/proc/sys/net/ipv4/conf/all/route_localnet", "w") as f:
                f.write("1")
    except OSError as exc:
        _write(status_w, f"Eunshare: cannot set up the namespaces: {exc}".encode())
        os._exit(125)
    if cfg.get("network"):
        _write(status_w, b"R")
    try:
        load_libc()  # while pysb may still be attaching the network
        name = cfg.get("hostname", "sandbox").encode()
        _check(_libc.sethostname(name, len(name)), "sethostname")
    except (OSError, SetupError) as exc:
        _write(status_w, f"Eunshare: cannot set up the namespaces: {exc}".encode())
        os._exit(125)
    if os.read(ctl, 1) != b"G":
        os._exit(125)  # pysb gave up (or died) before releasing the sandbox
    trace(cfg, "released by pysb")
    sigs: set[int] = {*FORWARDED, signal.SIGCHLD}
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    exit_r, exit_w = os.pipe()
    p1 = os.fork()
    if p1 == 0:
        os.close(exit_r)
        pid1(cfg, status_w, exit_w, ctl, sigs)
    os.close(exit_w)
    os.close(status_w)
    os.close(ctl)

    def finished(_status: int) -> None:
        data = os.read(exit_r, 4)
        if len(data) != 4:
            os._exit(125)  # P1 died before the program ended (killed, or set-up failed)
        status = struct.unpack("i", data)[0]
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)
        os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 125)

    _reap_loop(p1, sigs, finished, from_terminal=False)


if __name__ == "__main__":
    main()
