"""Drop Linux capabilities before the Landlock restriction (matters when pysb runs as root).

Landlock confines paths, TCP ports and scopes, but a process that keeps root's
capabilities could still go around it: raw and packet sockets (``CAP_NET_RAW``) bypass
the TCP port rules, netlink (``CAP_NET_ADMIN``) rewrites the host's firewall and routes,
``CAP_SYS_MODULE`` loads a kernel module from a writable exposure, ``CAP_SYS_BOOT``
reboots, ``CAP_CHOWN``/``CAP_SETFCAP`` hand files to other users or give them file
capabilities. None of that needs a path the ruleset controls. So the sandbox keeps only:

- ``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH``: root can still read and write the
  exposures it could before (a user's project directory with mode 0700 owned by
  someone else); Landlock decides *which* files;
- ``CAP_NET_BIND_SERVICE`` only when a bind rule allows a port below 1024.

For an unprivileged user this is a no-op (there is nothing to drop). With
``PR_SET_NO_NEW_PRIVS`` set, no later ``execve`` can regain a dropped capability.
"""

from __future__ import annotations

import sys

from pysb_core.providerkit import CLong
from pysb_landlock import _libc

CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2
CAP_NET_BIND_SERVICE = 10
CAP_SETPCAP = 8

_PR_CAPBSET_READ = 23
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _header() -> object:
    """``struct __user_cap_header_struct``: ``{__u32 version; int pid;}`` (pid 0: this
    thread)."""
    return _libc.memory(_libc.fields((_LINUX_CAPABILITY_VERSION_3, 4), (0, 4)))


#: ``struct __user_cap_data_struct[2]``: ``{__u32 effective, permitted, inheritable;}``
#: each, the low 32 capabilities in the first.
_DATA_BYTES = 2 * 3 * 4


def _u32s(data: bytes) -> list[int]:
    return [int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, len(data), 4)]


def current() -> tuple[int, int, int]:
    """``(effective, permitted, inheritable)`` of the calling thread, as bit masks."""
    data = _libc.memory(bytes(_DATA_BYTES))
    if _libc.capget(_header(), data) != 0:
        err = _libc.get_errno()
        raise OSError(err, "capget failed")
    eff0, prm0, inh0, eff1, prm1, inh1 = _u32s(bytes(data)[:_DATA_BYTES])
    return eff0 | (eff1 << 32), prm0 | (prm1 << 32), inh0 | (inh1 << 32)


def drop_all_but(keep: frozenset[int] | set[int]) -> None:
    """Reduce the bounding, ambient, effective, permitted and inheritable sets to ``keep``
    (intersected with what the process has). Raises ``OSError`` if the kernel refuses."""
    eff, prm, _ = current()
    keep_mask = 0
    for cap in keep:
        keep_mask |= 1 << cap

    def prctl(*args: int) -> int:
        return int(_libc.prctl(*(CLong(a) for a in args)))

    if eff & (1 << CAP_SETPCAP):
        for cap in range(64):
            present = prctl(_PR_CAPBSET_READ, cap, 0, 0, 0)
            if present < 0:
                break  # EINVAL: past the kernel's last capability
            if cap in keep or present != 1:
                continue
            if prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                err = _libc.get_errno()
                raise OSError(err, f"prctl(PR_CAPBSET_DROP, {cap}) failed")
    # Ambient capabilities are cleared by any capset that lowers permitted/inheritable,
    # but say it explicitly (EINVAL on kernels < 4.3: nothing to clear there).
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if not (eff | prm) & ~keep_mask:
        return  # an unprivileged process: nothing to drop
    new_prm = prm & keep_mask
    new_eff = eff & new_prm
    low = 0xFFFFFFFF
    data = _libc.memory(  # the inheritable sets empty
        _libc.fields((new_eff & low, 4), (new_prm & low, 4), (0, 4))
        + _libc.fields((new_eff >> 32, 4), (new_prm >> 32, 4), (0, 4))
    )
    if _libc.capset(_header(), data) != 0:
        err = _libc.get_errno()
        raise OSError(err, "capset failed")
