"""What the sandboxed interpreter runs to restrict itself (a :class:`ChildSetup` target).

The bootstrap calls :func:`restrict` after the guards are installed and before user code.
From then on the kernel refuses, for this process and everything it starts, every file
access and TCP bind/connect that the ruleset does not grant. There is no way back: a
failure raises, and the run must not start (fail closed).
"""

from __future__ import annotations

import os

from pysb_core.providerkit import SandboxError, SeccompRules, install_seccomp
from pysb_landlock import caps as _caps
from pysb_landlock import rofs
from pysb_landlock import ruleset as ll

TYPE_CHECKING = False  # imported by every sandboxed interpreter: no collections at start
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

# Bound before the guards patch ``os`` (see _libc.py); none of these raises an audit event.
_stat = os.stat
_isatty = os.isatty
_ttyname = os.ttyname


class LandlockSetupError(SandboxError):
    """The sandbox could not be put in place; the program must not run."""


def _thread_count() -> int:
    # landlock_restrict_self() restricts the calling thread only (ABI < 8 has no TSYNC):
    # any other thread alive now would stay unconfined.
    # procfs gives /proc/self/task a link count of 2 + the number of threads.
    try:
        return _stat("/proc/self/task").st_nlink - 2
    except OSError:
        import threading

        return threading.active_count()


def _terminals() -> list[str]:
    """The terminal(s) already open on fds 0-2: the program holds them anyway, and
    reopening them by name (``/dev/stdin``, ``getpass``) must keep working."""
    names = []
    for fd in (0, 1, 2):
        try:
            if _isatty(fd):
                names.append(_ttyname(fd))
        except OSError:
            continue
    return names


def _port_list(ranges: Iterable[Sequence[int]]) -> list[int]:
    ports: set[int] = set()
    for low, high in ranges:
        if not (0 <= low <= high <= 65535):
            raise LandlockSetupError(f"landlock: invalid port range {low}-{high}")
        ports.update(range(low, high + 1))
    return sorted(ports)


def _read_only_outside(write: list[str], exact: frozenset[str]) -> None:
    """As root: every mount read-only but the writable exposures (:mod:`rofs`)."""
    try:
        rofs.read_only_outside(write, exact)
    except OSError as exc:
        raise LandlockSetupError(
            f"landlock: as root the sandbox makes every mount outside the writable exposures "
            f"read-only (Landlock does not confine chmod, chown or utime), and that failed: "
            f"{exc}. A root without CAP_SYS_ADMIN (a container that dropped it) cannot do "
            f"it: use the bwrap provider, or run pysb as a normal user"
        ) from exc


def restrict(
    *,
    abi: int,
    read: Sequence[str] = (),
    write: Sequence[str] = (),
    devices: Sequence[str] = (),
    connect: Sequence[Sequence[int]] | None = None,
    bind: Sequence[Sequence[int]] | None = None,
    scope: bool = True,
    abstract_scope: bool = True,
    terminal: bool = True,
    keep_caps: Sequence[int] = (_caps.CAP_DAC_OVERRIDE, _caps.CAP_DAC_READ_SEARCH),
    udp: bool = False,
    unix: bool = False,
    sysv_ipc: bool = False,
    exact: Sequence[str] = (),
) -> int:
    """Restrict this process with Landlock; return the kernel's ABI version.

    ``abi`` is the ABI the parent compiled for (``pysb check`` promised what it enforces):
    a lower kernel ABI is an error. ``read`` paths get read+execute, ``write`` paths every
    write right the kernel knows except creating device nodes, ``devices`` read-write with
    ioctls. ``connect``/``bind`` are the allowed TCP port ranges; ``None`` leaves that
    operation unrestricted (a rule allowed every port). ``scope`` confines signals and
    abstract Unix sockets to the sandbox (ABI >= 6; the sockets only with
    ``abstract_scope``, false when the profile allows them out). Every capability but ``keep_caps``
    is dropped first (see caps.py: root's capabilities would go around Landlock), and a
    seccomp filter (:mod:`pysb_core.linux.seccomp`) refuses non-TCP IP sockets (UDP too unless
    ``udp``), Unix sockets unless ``unix``, SysV IPC unless ``sysv_ipc``, setting extended
    attributes, and what it refuses under every provider (ptrace, TCP Fast Open, io_uring,
    vsock and other socket families, terminal injection). The ``exact`` paths (the
    profile's exposures, canonical) are opened without following any symbolic link. As
    root every mount but the ``write`` paths' is made read-only first (:mod:`rofs`:
    Landlock does not confine metadata, and root owns every system file).
    """
    try:
        kernel_abi = ll.abi_version()
    except OSError as exc:
        raise LandlockSetupError(f"landlock is not available in the sandbox: {exc}") from exc
    if kernel_abi < abi:
        raise LandlockSetupError(
            f"landlock: the kernel has ABI {kernel_abi}, the policy was compiled for ABI {abi}"
        )
    if _thread_count() > 1:
        raise LandlockSetupError(
            "landlock: the interpreter already runs several threads; "
            "restricting only one of them would leave the others unconfined"
        )
    net = 0
    if connect is not None:
        net |= ll.NET_CONNECT_TCP
    if bind is not None:
        net |= ll.NET_BIND_TCP
    if net and kernel_abi < 4:
        raise LandlockSetupError(
            f"landlock: TCP port rules need ABI 4 (Linux 6.7), this kernel has ABI {kernel_abi}"
        )
    try:
        rs = ll.Ruleset(kernel_abi, net=net, scope=scope, abstract_scope=abstract_scope)
        try:
            exact_paths = frozenset(exact)
            for path in read:
                rs.add_path(path, ll.FS_READ, no_symlinks=path in exact_paths)
            for path in write:
                rs.add_path(path, ll.FS_WRITE, no_symlinks=path in exact_paths)
            for path in [*devices, *(_terminals() if terminal else ())]:
                rs.add_path(path, ll.FS_DEVICE)
            if connect is not None:
                for port in _port_list(connect):
                    rs.add_port(port, ll.NET_CONNECT_TCP)
            if bind is not None:
                for port in _port_list(bind):
                    rs.add_port(port, ll.NET_BIND_TCP)
            if rofs.needed(list(write)):
                _read_only_outside(list(write), exact_paths)
            _caps.drop_all_but(frozenset(keep_caps))
            ll.no_new_privs()  # required by both seccomp and landlock_restrict_self
            install_seccomp(
                SeccompRules(
                    ip="tcp+udp" if udp else "tcp", unix=unix, sysv_ipc=sysv_ipc, xattr=False
                )
            )
        except BaseException:
            rs.close()
            raise
        rs.restrict_self()
    except OSError as exc:
        raise LandlockSetupError(f"landlock: could not restrict the sandbox: {exc}") from exc
    return kernel_abi
