"""The supervisor's half of a start from a snapshot (:mod:`pysb_qemu.snapshot`): start the
restoring QEMU, check the file it loads, hand the restored guest its run, or give up so that
the supervisor boots instead.

Imported by ``supervisor.py``, which runs as a script (``python -S -E -s supervisor.py``,
this directory first on ``sys.path``): the standard library only.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import Any

#: A restored guest answers in well under a second; past this, boot instead.
RESTORE_TIMEOUT = 60.0
#: The longest answer line read from the guest's control port.
MAX_LINE = 1 << 16


def restore(sup: Any, snap: dict, parent: int) -> bool:
    """Start the VM from the snapshot (pysb_qemu.snapshot); False, with QEMU gone and
    the reason in the debug output, when anything fails: the caller then boots.

    The guest is told nothing until the file's SHA-256 is the one recorded when it was
    written (hashed here while QEMU loads it). Then: ``run LEN SEED TIME``, the
    run's archive and ``end``; the guest reseeds its CRNG with SEED, sets its clock, unpacks the
    archive and answers ``restored``. Anything else (a QEMU error, a ``fail`` line, no
    answer in time) kills this QEMU before any of the run's ports is relayed.
    """
    ctl = socket.socket(fileno=snap["ctl_fd"])
    try:
        proc = sup.spawn(snap["argv"], snap["fds"], parent)
    except OSError as exc:
        ctl.close()
        for fd in (snap["file_fd"], snap["archive_fd"], *snap["own_fds"]):
            os.close(fd)
        sup.stamp(f"snapshot restore failed ({exc}); booting")
        return False
    with sup.lock:
        sup.qemu = proc
    sup.stamp("snapshot restore")
    sup.stamp("qemu spawned")
    for fd in snap["own_fds"]:
        os.close(fd)  # the restoring QEMU's end of its control port: its EOF is QEMU's exit
    reason = None
    try:
        if file_digest(snap["file_fd"]) != (snap["digest"], snap["size"]):
            reason = "the file is not the one pysb wrote (SHA-256 or size differs)"
            for path in snap["discard"]:  # the next run writes a new one
                with contextlib.suppress(OSError):
                    os.unlink(path)
        else:
            sup.stamp("snapshot digest checked")
            with os.fdopen(snap["archive_fd"], "rb", closefd=False) as f:
                archive = f.read()
            seed = os.urandom(32).hex()
            ctl.settimeout(RESTORE_TIMEOUT)
            header = f"run {len(archive)} {seed} {round(time.time())}\n".encode()
            ctl.sendall(header + archive + b"end\n")
            line, sup.ctl_pending = read_line(ctl)
            if line != "restored":
                reason = f"the guest answered {line[:300]!r}" if line else "QEMU exited"
    except OSError as exc:  # socket.timeout included
        reason = f"no answer from the guest ({exc})"
    finally:
        os.close(snap["file_fd"])
        os.close(snap["archive_fd"])
    if reason is None:
        sup.ctl.close()
        sup.ctl = ctl
        sup.ctl.settimeout(None)
        sup.stamp("snapshot restored")
        return True
    with sup.lock:
        sup.qemu = None
        with contextlib.suppress(OSError):
            proc.kill()
    stderr = proc.communicate()[1].decode(errors="replace").strip()
    ctl.close()
    sup.ctl_pending = b""
    detail = f"; qemu: {stderr[-2000:]}" if stderr else ""
    sup.stamp(f"snapshot restore failed: {reason}{detail}; booting")
    return False


def file_digest(fd: int) -> tuple[str, int]:
    """SHA-256 and size of a file read with pread (QEMU reads the same open file)."""
    import hashlib

    h = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        h.update(chunk)
        offset += len(chunk)
    return h.hexdigest(), offset


def read_line(sock: socket.socket) -> tuple[str, bytes]:
    """One line from the control port, and the bytes that came after it; at most
    :data:`MAX_LINE` bytes are read for it (what the guest sends is bounded: an endless
    line is no answer, and the restore fails)."""
    buf = b""
    while b"\n" not in buf:
        if len(buf) > MAX_LINE:
            return "", b""
        data = sock.recv(4096)
        if not data:
            return buf.decode(errors="replace").strip(), b""
        buf += data
    line, rest = buf.split(b"\n", 1)
    return line.decode(errors="replace").strip(), rest
