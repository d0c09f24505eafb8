"""No network, the cheaper way when pysb runs as root: a namespace made before firejail starts.

``--net=none`` gives the sandbox a new network namespace with only its loopback, up. But
firejail brings ``lo`` up through a helper (``fnet ifup lo``) that sleeps 10 ms before it
looks at the interface: a third of what firejail's own set-up costs. A root pysb makes the
same namespace itself, in the forked child right before it executes firejail
(``unshare(CLONE_NEWNET)``, then ``lo`` up with two ioctls), and firejail, started without
a network option, keeps the namespace it was started in for the sandbox: the new, empty
one (its own ``127.0.0.1``, its own abstract Unix sockets, no route anywhere).

A normal user cannot do this (a network namespace needs ``CAP_SYS_ADMIN``, and firejail's
set-uid start does not work inside a user namespace of the user's own), so there the
command keeps ``--net=none``. Any failure raises in the child, which fails the launch
(exit 125): the program never starts in the host's network namespace.
"""

from __future__ import annotations

import fcntl
import os
import sys

from pysb_core.providerkit import SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
#: ``struct ifreq``: the name (IFNAMSIZ bytes), then a union whose first member, for these
#: requests, is the ``short`` flags; 40 bytes on 64-bit Linux, more than enough elsewhere.
_IFREQ_SIZE = 40
_IFNAMSIZ = 16


def usable(*, as_root: bool) -> bool:
    """pysb can make the namespace itself (it runs as root)."""
    return as_root


def unshare_function(flags: int = CLONE_NEWNET) -> Callable[[], None]:
    """``unshare(flags)``, resolved in the parent (no imports after ``fork``)."""
    unshare = getattr(os, "unshare", None)  # Python 3.12+
    if unshare is not None:
        return lambda: unshare(flags)
    from pysb_core.providerkit import c_errno, c_function

    libc_unshare = c_function("unshare")
    get_errno = c_errno

    def call() -> None:
        if libc_unshare(flags) != 0:
            err = get_errno()
            raise OSError(err, f"unshare({flags:#x}): {os.strerror(err)}")

    return call


def prepare_loopback() -> None:
    """Import what :func:`loopback_up` needs, in the parent (not in the forked child)."""
    import _socket  # noqa: F401


def loopback_up() -> None:
    """Bring ``lo`` up in the current network namespace (needs ``CAP_NET_ADMIN``)."""
    import _socket

    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        request = b"lo".ljust(_IFNAMSIZ, b"\0").ljust(_IFREQ_SIZE, b"\0")
        answer = fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, request)
        flags = int.from_bytes(answer[_IFNAMSIZ : _IFNAMSIZ + 2], sys.byteorder) | IFF_UP
        request = request[:_IFNAMSIZ] + flags.to_bytes(2, sys.byteorder) + request[18:]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, request)
    finally:
        sock.close()


def enter_new() -> Callable[[], None]:
    """A ``preexec_fn``: the child leaves pysb's network namespace for a new one, ``lo`` up."""
    unshare = unshare_function(CLONE_NEWNET)
    import _socket  # noqa: F401 - imported here, not in the forked child

    def enter() -> None:
        unshare()
        loopback_up()

    return enter


def _namespace(pid: str) -> tuple[int, int]:
    st = os.stat(f"/proc/{pid}/ns/net")
    return st.st_dev, st.st_ino


def check_started(proc: subprocess.Popen[bytes]) -> None:
    """``on_started`` backstop: firejail runs in a network namespace other than pysb's.

    ``launch()`` always makes it (the command has no network option); were the command
    ever started some other way, this stops firejail (the caller kills it) long before
    its set-up reaches the program.
    """
    try:
        same = _namespace(str(proc.pid)) == _namespace("self")
    except OSError as exc:
        raise SandboxError(f"firejail: cannot check its network namespace: {exc}") from exc
    if same:
        raise SandboxError(
            "firejail was started in pysb's own network namespace without --net=none: "
            "refusing to run the program with the host's network"
        )


def setns_function(fd: int, nstype: int = CLONE_NEWNET) -> Callable[[], None]:
    """``setns(fd, nstype)``, resolved in the parent (no imports after ``fork``)."""
    setns = getattr(os, "setns", None)  # Python 3.12+
    if setns is not None:
        return lambda: setns(fd, nstype)
    from pysb_core.providerkit import c_errno, c_function

    libc_setns = c_function("setns")
    get_errno = c_errno

    def call() -> None:
        if libc_setns(fd, nstype) != 0:
            err = get_errno()
            raise OSError(err, f"setns({fd}, {nstype:#x}): {os.strerror(err)}")

    return call
