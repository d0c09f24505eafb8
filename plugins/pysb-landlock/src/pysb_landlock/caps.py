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

import ctypes

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


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def current() -> tuple[int, int, int]:
    """``(effective, permitted, inheritable)`` of the calling thread, as bit masks."""
    hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(hdr), data) != 0:
        err = _libc.get_errno()
        raise OSError(err, "capget failed")
    eff = data[0].effective | (data[1].effective << 32)
    prm = data[0].permitted | (data[1].permitted << 32)
    inh = data[0].inheritable | (data[1].inheritable << 32)
    return eff, prm, inh


def drop_all_but(keep: frozenset[int] | set[int]) -> None:
    """Reduce the bounding, ambient, effective, permitted and inheritable sets to ``keep``
    (intersected with what the process has). Raises ``OSError`` if the kernel refuses."""
    eff, prm, _ = current()
    keep_mask = 0
    for cap in keep:
        keep_mask |= 1 << cap

    def prctl(*args: int) -> int:
        return int(_libc.prctl(*(ctypes.c_ulong(a) for a in args)))

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
    hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    data[0].effective, data[1].effective = new_eff & 0xFFFFFFFF, new_eff >> 32
    data[0].permitted, data[1].permitted = new_prm & 0xFFFFFFFF, new_prm >> 32
    if _libc.capset(ctypes.byref(hdr), data) != 0:
        err = _libc.get_errno()
        raise OSError(err, "capset failed")
