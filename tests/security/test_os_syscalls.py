"""System calls that reach past a provider's namespaces or Landlock ruleset (issue 22).

Every test runs the real probe (``probe.py``) under the real provider with
``--no-python-guards``: only the kernel and pysb's seccomp filter (:mod:`pysb_core.linux.seccomp`)
can refuse. Each run has a control in it, so a refusal is the filter's, not a broken probe.
Nothing here connects to a vsock peer or sends to any address but 127.0.0.1.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import socket
from pathlib import Path

import pytest
from escape_bench import bench
from test_os_escapes import assert_all_refused, providers, refused

from pysb_core.testing import LoopbackServer

AF_VSOCK, AF_PACKET, AF_ALG, AF_XDP, AF_TIPC, AF_RDS, AF_KEY, AF_CAN = (
    40,
    17,
    38,
    44,
    30,
    21,
    15,
    29,
)


def _qemu() -> object:
    return pytest.param("qemu", marks=[pytest.mark.provider("qemu"), pytest.mark.slow], id="qemu")


@pytest.mark.parametrize("provider", [*providers(), _qemu()])
def test_socket_families_no_rule_expresses_are_refused(provider: str, tmp_path: Path) -> None:
    """``AF_VSOCK`` is not confined by a network namespace (on a VM it leads to the host);
    packet, crypto, XDP, TIPC, RDS, key and CAN sockets are kernel surface no rule covers;
    netlink is NETLINK_ROUTE only (sock_diag lists the host's sockets under Landlock).
    Only ``socket()`` is called: nothing is connected, bound or sent."""
    box = bench(provider, tmp_path)
    families = {
        "vsock-stream": (AF_VSOCK, socket.SOCK_STREAM),
        "vsock-dgram": (AF_VSOCK, socket.SOCK_DGRAM),
        "vsock-seqpacket": (AF_VSOCK, socket.SOCK_SEQPACKET),
        "packet": (AF_PACKET, socket.SOCK_DGRAM),
        "alg": (AF_ALG, socket.SOCK_SEQPACKET),
        "xdp": (AF_XDP, socket.SOCK_RAW),
        "tipc": (AF_TIPC, socket.SOCK_RDM),
        "rds": (AF_RDS, socket.SOCK_SEQPACKET),
        "key": (AF_KEY, socket.SOCK_RAW),
        "can": (AF_CAN, socket.SOCK_RAW),
    }
    netlink = {"netlink-sock-diag": 4, "netlink-audit": 9, "netlink-uevent": 15}
    attempts = [
        ("control-tcp", "socket_family", {"family": socket.AF_INET}),
        ("control-pair", "socketpair", {}),
        ("control-netlink-route", "socket_family", {"family": 16, "kind": socket.SOCK_RAW}),
        *[(k, "socket_family", {"family": f, "kind": t}) for k, (f, t) in families.items()],
        *[(k, "socket_family", {"family": 16, "kind": socket.SOCK_RAW, "proto": p})
          for k, p in netlink.items()],
    ]  # fmt: skip
    out = box.run(attempts)
    assert out["control-tcp"] == "ok" and out["control-pair"] == "ok"
    assert out["control-netlink-route"] == "ok"
    assert_all_refused(out, [*families, *netlink])
    assert out["vsock-stream"] == "err:EAFNOSUPPORT", out["vsock-stream"]
    assert out["netlink-sock-diag"] == "err:EPROTONOSUPPORT", out["netlink-sock-diag"]


@pytest.mark.parametrize("provider", [*providers(), _qemu()])
def test_ptrace_and_cross_process_memory_are_refused(provider: str, tmp_path: Path) -> None:
    """No profile grants debugging: ``ptrace`` (even of the program's own child: under
    bwrap a traced sandbox PID 1 stops and the run hangs) and ``process_vm_readv``."""
    box = bench(provider, tmp_path)
    out = box.run(
        [
            ("control-fork", "fork_many", {"limit": 1, "sleep": 1}),
            ("ptrace-child", "ptrace_child", {}),
            ("vm-read-child", "process_vm_read_child", {}),
        ]
    )
    assert out["control-fork"] == "ok:1:", out["control-fork"]
    assert out["ptrace-child"] == "err:EPERM", out["ptrace-child"]
    assert out["vm-read-child"] == "err:EPERM", out["vm-read-child"]


@pytest.mark.parametrize("provider", [pytest.param("bwrap", marks=pytest.mark.provider("bwrap"))])
def test_stopping_the_sandbox_init_by_ptrace_does_not_hang_the_run(
    provider: str, tmp_path: Path
) -> None:
    """``PTRACE_ATTACH`` to PID 1 without detaching left bwrap's init stopped and pysb
    waiting for ever; the attach is refused and the run ends."""
    box = bench(provider, tmp_path)
    out = box.run([("stop-init", "ptrace_stop", {"pid": 1})], timeout=60)
    assert out["stop-init"] == "err:EPERM", out["stop-init"]
    assert out.proc.returncode == 0, out.proc.stderr


@pytest.mark.parametrize("provider", providers())
def test_tcp_fast_open_does_not_bypass_the_connect_rules(provider: str, tmp_path: Path) -> None:
    """A listener on the host's loopback that no rule allows: ``connect`` is refused, and so
    must be a connection opened by ``sendto``/``sendmsg`` with ``MSG_FASTOPEN`` or by the
    ``TCP_FASTOPEN_CONNECT`` option (which reach TCP without Landlock's connect check)."""
    box = bench(provider, tmp_path)
    server = LoopbackServer()
    host, port = "127.0.0.1", server.port
    try:
        out = box.run(
            [
                ("connect", "tcp_connect", {"host": host, "port": port}),
                ("tfo-sendto", "tfo_sendto", {"host": host, "port": port, "how": "sendto"}),
                ("tfo-sendmsg", "tfo_sendto", {"host": host, "port": port, "how": "sendmsg"}),
                ("tfo-option", "tfo_sendto", {"host": host, "port": port, "how": "option"}),
            ]
        )
    finally:
        server.close()
    assert_all_refused(out, ["connect", "tfo-sendto", "tfo-sendmsg", "tfo-option"])
    assert server.accepted == 0


class _SysvSegment:
    """A SysV shared memory segment on the host, mode 0600, holding a secret; removed after."""

    IPC_CREAT, IPC_EXCL, IPC_RMID = 0o1000, 0o2000, 0

    def __init__(self, text: str) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.shmat.restype = ctypes.c_void_p
        self.key = secrets.randbelow(1 << 30) + 1
        flags = self.IPC_CREAT | self.IPC_EXCL | 0o600
        self.shmid = self.libc.shmget(ctypes.c_int(self.key), ctypes.c_size_t(4096), flags)
        if self.shmid == -1:
            pytest.skip(f"shmget: {os.strerror(ctypes.get_errno())}")
        addr = self.libc.shmat(self.shmid, None, 0)
        ctypes.memmove(addr, text.encode() + b"\0", len(text) + 1)
        self.libc.shmdt(ctypes.c_void_p(addr))

    def remove(self) -> None:
        self.libc.shmctl(self.shmid, self.IPC_RMID, None)


@pytest.mark.parametrize("provider", providers())
def test_host_sysv_shared_memory_is_unreachable(provider: str, tmp_path: Path) -> None:
    """Landlock has no IPC namespace: a host segment is attached by key and read unless
    SysV IPC is refused. The namespace providers have an IPC namespace of their own (the key
    finds nothing there: private SysV objects keep working)."""
    box = bench(provider, tmp_path)
    segment = _SysvSegment(f"SHM-SECRET-{box.token}")
    try:
        out = box.run(
            [
                ("attach-host", "sysv_shm_read", {"key": segment.key}),
                *[(f"private-{k}", "sysv_get", {"kind": k}) for k in ("msg", "sem", "shm")],
            ]
        )
    finally:
        segment.remove()
    assert refused(out["attach-host"]), out["attach-host"]
    assert box.token not in out.proc.stdout
    private = [f"private-{k}" for k in ("msg", "sem", "shm")]
    if provider == "landlock":
        assert all(out[label] == "err:EPERM" for label in private), out.results
    else:
        assert all(out[label] == "ok" for label in private), out.results


@pytest.mark.parametrize(
    "provider", [pytest.param("landlock", marks=pytest.mark.provider("landlock"))]
)
def test_landlock_sysv_ipc_option_allows_it(provider: str, tmp_path: Path) -> None:
    """``providers: {landlock: {sysv-ipc: true}}`` is the documented way back."""
    box = bench(provider, tmp_path, "providers:\n  landlock: {sysv-ipc: true}\n")
    out = box.run([(f"private-{k}", "sysv_get", {"kind": k}) for k in ("msg", "sem", "shm")])
    assert all(out[f"private-{k}"] == "ok" for k in ("msg", "sem", "shm")), out.results


@pytest.mark.parametrize("provider", providers())
def test_extended_attributes_outside_the_exposures_stay(provider: str, tmp_path: Path) -> None:
    """Landlock has no right for extended attributes (``user.*``, POSIX ACLs): setting them
    is refused in the whole sandbox (``EOPNOTSUPP``, as on a file system without them)."""
    box = bench(provider, tmp_path)
    victim = str(box.victim)
    out = box.run(
        [
            ("set", "set_xattr", {"path": victim}),
            ("set-fd-readable", "set_xattr", {"path": "ctl.txt", "how": "fd"}),
            ("remove", "set_xattr", {"path": victim, "how": "remove"}),
        ]
    )
    assert_all_refused(out, ["set", "set-fd-readable", "remove"])
    assert os.listxattr(box.victim) == [] and os.listxattr(box.project / "ctl.txt") == []


@pytest.mark.parametrize("provider", [*providers(), _qemu()])
def test_no_set_id_file_is_left_in_an_exposure(provider: str, tmp_path: Path) -> None:
    """A set-user-ID or set-group-ID file the sandbox leaves in ``expose-rw`` would run with
    its owner's rights for whoever starts it later (for a root run: root, for any user of the
    host). ``chmod``, ``open(O_CREAT)`` and ``mknod`` with such a bit are refused."""
    box = bench(provider, tmp_path)
    (box.rw / "tool").write_text("#!/bin/sh\n")
    os.chmod(box.rw / "tool", 0o755)
    out = box.run(
        [
            ("control-chmod", "chmod", {"path": "rw/tool", "mode": 0o750}),
            ("control-create", "create_mode", {"path": "rw/plain", "mode": 0o640}),
            ("chmod-setuid", "chmod", {"path": "rw/tool", "mode": 0o4755}),
            ("chmod-setgid", "chmod", {"path": "rw/tool", "mode": 0o2755}),
            ("open-setuid", "create_mode", {"path": "rw/su", "mode": 0o4755}),
            ("mknod-setgid", "create_mode", {"path": "rw/sg", "mode": 0o2755, "how": "mknod"}),
        ]
    )
    assert out["control-chmod"] == "ok" and out["control-create"] == "ok:0o640"
    assert_all_refused(out, ["chmod-setuid", "chmod-setgid", "open-setuid", "mknod-setgid"])
    modes = {p.name: p.stat().st_mode & 0o7777 for p in box.rw.iterdir()}
    assert not any(mode & 0o6000 for mode in modes.values()), modes
    assert sorted(modes) == ["plain", "tool"], modes


@pytest.mark.parametrize("provider", [*providers(), _qemu()])
def test_kernel_surface_no_profile_grants_is_refused(provider: str, tmp_path: Path) -> None:
    """eBPF, userfaultfd, perf events, fanotify, keys, ``kcmp``, the kernel log, modules, file
    handles and the mount API (issue 26 #7: ``bpf(2)`` reached the kernel under landlock,
    bwrap and unshare). Each call's arguments make the kernel answer something else than
    ``EPERM`` when the call reaches it (``EFAULT`` for a bad pointer, or a result: see
    ``probe.KERNEL_CALLS``), so ``EPERM`` is the filter's; the controls are run on the host
    first. A process, a thread and a ``subprocess`` (``clone3``, then its fallback) still
    start."""
    from probe import KERNEL_CALLS

    calls = [(name, "kernel_call", {"name": name}) for name in KERNEL_CALLS]
    box = bench(provider, tmp_path)
    out = box.run(
        [
            ("control-fork", "fork_many", {"limit": 1, "sleep": 1}),
            ("control-subprocess", "child_read", {"path": "ctl.txt"}),
            *calls,
        ]
    )
    assert out["control-fork"] == "ok:1:", out["control-fork"]
    assert out["control-subprocess"] == "ok:CONTROL\n", out["control-subprocess"]
    reached = {name: out[name] for name in KERNEL_CALLS if out[name] != "err:EPERM"}
    assert not reached, f"reached the kernel: {reached}"


@pytest.mark.parametrize("provider", [*providers(), _qemu()])
def test_no_new_user_namespace(provider: str, tmp_path: Path) -> None:
    """``unshare(CLONE_NEWUSER)`` succeeded under landlock (issue 26 #7); a raw ``clone``
    with the flag is refused too, and ``clone3``, whose flags the filter cannot read, is
    ``ENOSYS`` (the C library then falls back to ``clone``)."""
    box = bench(provider, tmp_path)
    out = box.run(
        [
            ("unshare", "unshare", {"flags": 0x10000000}),
            ("clone", "new_user_namespace", {"how": "clone"}),
            ("clone3", "new_user_namespace", {"how": "clone3"}),
        ]
    )
    assert out["unshare"] == "err:EPERM", out.results
    assert out["clone"] == "err:EPERM", out.results
    assert out["clone3"] == "err:ENOSYS", out.results
