"""A run's VM restored from a snapshot of a booted guest, instead of a boot (issue 30).

What the snapshot holds: the guest kernel booted, its modules loaded, a fixed set of
virtio devices found (the control port, :data:`SNAPSHOT_PORTS` data ports, one 9p device
per share slot), and ``/init`` blocked on the control port. Nothing of a run: no share is
mounted and no data port opened when it is taken (QEMU takes each device's host path,
``readonly=on`` flag and chardev from the restoring command line: docs/qemu.md, "A
snapshot"), no Python has started (an interpreter started before the restore would share
its hash seed and ``random`` state with every run restored from the file), and no
per-run file exists. After the restore the supervisor sends ``run LEN SEED TIME`` and the
run's archive on the control port; ``/init`` mixes the host's fresh entropy into the
kernel's pool and reseeds its CRNG (pysb_qemu.reseed) before anything else runs, sets the
clock, unpacks the archive and goes on exactly as after a boot.

The snapshot is used only when the run fits the device set (no network: the NIC and slirp
are not in it; at most :data:`SNAPSHOT_PORTS` forwarded fds and ``max_shares`` shares),
under TCG (a KVM guest's CPU state is the host's CPU model: not built, not measurable
here), and unless ``PYSB_QEMU_SNAPSHOT=0``. Any other run, and any run whose restore
fails, boots as before.

Cache: ``<guest assets>/snapshots/KEY.bin`` and ``KEY.sha256`` (its digest and size), in
pysb's state directory (every sandbox sees it read-only). KEY hashes everything that
shapes the guest: the assets' key (kernel, modules, busybox, ``/init``), the QEMU binary
(path, size, mtime, inode) and its version, and the restoring command line itself with
placeholder fds (RAM, vCPUs, accelerator, kernel command line, device set). A file is used
only when it and its directory are this user's and nobody else's to write, its size is
the recorded one, and (checked by the supervisor while QEMU loads it, before the guest is
told anything) its SHA-256 is the recorded digest; QEMU itself rejects a stream that does
not match the devices. Written under a temporary name and renamed: two concurrent first
runs each write a whole file. A build that fails is remembered for an hour (``KEY.failed``)
so that every run does not pay for it again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pysb_qemu.cpio import CpioWriter
from pysb_qemu.guest import SETPRIV, GuestLayout
from pysb_qemu.reseed import reseed_program
from pysb_qemu.restoring import file_digest
from pysb_qemu.vm import SlotSet, VmSpec, max_shares, socketpairs

FORMAT_VERSION = "1"
#: Data port slots beside ``ctl``: stdin, stdout, stderr, the report channel and partial
#: mode's socket use five at most.
SNAPSHOT_PORTS = 8
#: Snapshots kept per guest assets (one per RAM size and vCPU count in use; ~70 MB each).
KEEP_SNAPSHOTS = 3
#: How long the snapshot's guest may take to boot to "ready" (TCG on a loaded host).
BOOT_TIMEOUT = 120.0
MIGRATE_TIMEOUT = 60.0
#: After a failed build, runs boot without trying again for this long (seconds).
FAILED_FOR = 3600.0


@dataclass(frozen=True)
class Snapshot:
    """A snapshot file that passed the owner, mode and size checks."""

    path: Path
    digest: str
    size: int


def slots(spec: VmSpec) -> SlotSet:
    return SlotSet(SNAPSHOT_PORTS, max_shares(False), str(_directory(spec) / "empty"))


def unusable(spec: VmSpec) -> str | None:
    """Why this run cannot start from a snapshot, or None when it can."""
    why = unusable_for(spec.accel.name, spec.network, len(spec.shares))
    if why is None and len([p for p in spec.ports if p.name != "ctl"]) > SNAPSHOT_PORTS:
        return f"more than {SNAPSHOT_PORTS} forwarded fds"
    return why


def unusable_for(accel: str, network: bool, shares: int) -> str | None:
    """:func:`unusable` before the fds are known (``describe()``)."""
    if os.environ.get("PYSB_QEMU_SNAPSHOT") == "0":
        return "PYSB_QEMU_SNAPSHOT=0"
    if accel != "tcg":
        return "not under TCG"
    if network:
        return "network rules (the NIC is not in the snapshot)"
    if shares > max_shares(False):
        return f"more than {max_shares(False)} shares"
    return None


def assign_slots(spec: VmSpec, layout: GuestLayout) -> None:
    """Name the run's ports and shares after the snapshot's slots (``v0``..., ``p0``...),
    in place, before the run's archive (which names them) is built."""
    data = [p for p in spec.ports if p.name != "ctl"]
    ctl = [p for p in spec.ports if p.name == "ctl"]
    spec.ports[:] = ctl + [replace(p, name=f"v{i}") for i, p in enumerate(data)]
    layout.shares[:] = [replace(s, tag=f"p{i}") for i, s in enumerate(layout.shares)]
    if spec.shares is not layout.shares:
        spec.shares[:] = layout.shares


def restore_argv(
    spec: VmSpec, qemu: str, chardev_fds: dict[str, int], incoming_fd: int
) -> list[str]:
    """The restoring QEMU: the run's devices in the snapshot's slots, ``-incoming``."""
    argv = spec.qemu_argv(qemu, chardev_fds, initrd=str(spec.assets.initrd), slots=slots(spec))
    return [*argv, "-incoming", f"fd:{incoming_fd}"]


def key(spec: VmSpec, qemu: str, qemu_version: str | None) -> str:
    bare = VmSpec(spec.assets, spec.accel, memory_mib=spec.memory_mib, cpus=spec.cpus)
    argv = bare.qemu_argv(qemu, None, initrd=str(spec.assets.initrd), slots=slots(spec))
    # The host's "cpu MHz" moves with frequency scaling: a boot parameter, which a booted
    # guest no longer reads (its TSC is the host's, at the rate it calibrated).
    argv = [re.sub(r"\btsc_early_khz=\d+", "tsc_early_khz=*", a) for a in argv]
    st = os.stat(qemu)
    material = [
        FORMAT_VERSION,
        spec.assets.key,
        [os.path.realpath(qemu), st.st_size, st.st_mtime_ns, st.st_ino],
        qemu_version,
        argv,
    ]
    return hashlib.sha256(json.dumps(material).encode()).hexdigest()[:24]


def _directory(spec: VmSpec) -> Path:
    return spec.assets.directory / "snapshots"


def _ours(path: Path) -> bool:
    """This user's, and nobody else can write it (as pysb_core.linux.statedir.trusted)."""
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def find(spec: VmSpec, name: str) -> Snapshot | None:
    directory = _directory(spec)
    path, meta = directory / f"{name}.bin", directory / f"{name}.sha256"
    if not (_ours(directory) and _ours(path) and _ours(meta)):
        return None
    try:
        digest, size = meta.read_text().split()
        if path.stat().st_size != int(size) or len(digest) != 64:
            return None
    except (OSError, ValueError):
        return None
    return Snapshot(path, digest, int(size))


def ensure(  # type: ignore[no-untyped-def]
    spec: VmSpec, qemu: str, qemu_version: str | None, log, *, progress: bool = True
) -> Snapshot | None:
    """The snapshot for this VM, built first if needed; None when it cannot be had (then
    the run boots). ``log(message)`` reports under PYSB_QEMU_DEBUG; ``progress`` says on
    stderr that a build is under way (as the guest assets' first build does)."""
    name = key(spec, qemu, qemu_version)
    found = find(spec, name)
    if found is not None:
        return found
    directory = _directory(spec)
    with contextlib.suppress(OSError):
        if time.time() - (directory / f"{name}.failed").stat().st_mtime < FAILED_FOR:
            return None
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        (directory / "empty").mkdir(mode=0o555, exist_ok=True)
        if not (_ours(directory) and _ours(directory / "empty")):
            return None
        if progress:
            print(
                f"pysb: saving a snapshot of the booted qemu guest ({spec.memory_mib} MiB; "
                f"once per RAM size and vCPU count; cached in {directory})...",
                file=sys.stderr,
                flush=True,
            )
        started = time.monotonic()
        _, size = build(spec, qemu, directory, name)
        log(f"snapshot {name} built in {time.monotonic() - started:.2f} s ({size} bytes)")
    except Exception as exc:  # any failure: boot instead, and do not retry at every run
        log(f"snapshot {name} could not be built: {exc}")
        with contextlib.suppress(OSError):
            (directory / f"{name}.failed").write_text(f"{exc}\n")
        return None
    prune(directory, KEEP_SNAPSHOTS)
    return find(spec, name)


def _snapshot_initrd(spec: VmSpec) -> bytes:
    """The base initramfs plus what only the snapshot's boot has: how many ports to wait
    for (which makes /init take the snapshot branch) and the reseeding program."""
    w = CpioWriter()
    w.add_file("pysb/snapshot", f"{SNAPSHOT_PORTS + 1}\n".encode(), 0o400)
    w.add_file("pysb/reseed", reseed_program(), 0o500)
    return spec.assets.initrd.read_bytes() + w.finish()


def build(spec: VmSpec, qemu: str, directory: Path, name: str) -> tuple[str, int]:
    """Boot the snapshot's guest, wait for its "ready", save it with QMP ``migrate`` to
    a file; return (SHA-256, size) once the file and its digest are in place."""
    bare = VmSpec(spec.assets, spec.accel, memory_mib=spec.memory_mib, cpus=spec.cpus)
    pairs = socketpairs(["console", "ctl", "qmp"])
    initrd = os.memfd_create("pysb-snapshot-initrd", os.MFD_CLOEXEC)
    tmp_fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    proc = None
    try:
        data = _snapshot_initrd(spec)
        view = memoryview(data)
        while view:
            view = view[os.write(initrd, view) :]
        fds = {n: p[1].fileno() for n, p in pairs.items()}
        argv = bare.qemu_argv(qemu, fds, initrd=f"/proc/self/fd/{initrd}", slots=slots(spec))
        argv += ["-chardev", f"socket,id=qmp,fd={fds['qmp']}", "-mon", "chardev=qmp,mode=control"]
        # Killed with pysb, whatever kills it (no preexec_fn: pysb may have threads).
        proc = subprocess.Popen(
            [SETPRIV, "--pdeathsig", "KILL", "--", *argv],
            pass_fds=[initrd, *fds.values()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        for _, qemu_end in pairs.values():
            qemu_end.close()
        ctl, qmp = pairs["ctl"][0], pairs["qmp"][0]
        line = _read_line(ctl, BOOT_TIMEOUT, drain=pairs["console"][0])
        if line != b"ready":
            raise RuntimeError(f"the snapshot's guest said {line[:200]!r}, not 'ready'")
        monitor = _Qmp(qmp)
        monitor.command("getfd", fds=[tmp_fd], fdname="snapshot")
        monitor.command("migrate", uri="fd:snapshot")
        deadline = time.monotonic() + MIGRATE_TIMEOUT
        while True:
            status = monitor.command("query-migrate").get("status")
            if status == "completed":
                break
            if status in ("failed", "cancelled") or time.monotonic() > deadline:
                raise RuntimeError(f"migrate: {status}")
            time.sleep(0.02)
        with contextlib.suppress(OSError, RuntimeError):
            monitor.command("quit")
        proc.wait(10)
        os.fsync(tmp_fd)
        digest, size = file_digest(tmp_fd)
        os.chmod(tmp_name, 0o400)
        os.replace(tmp_name, directory / f"{name}.bin")
        meta = directory / f".{name}.sha256.tmp"
        meta.write_text(f"{digest} {size}\n")
        os.replace(meta, directory / f"{name}.sha256")
        return digest, size
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(initrd)
        os.close(tmp_fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        for a, b in pairs.values():
            a.close()
            b.close()


def _read_line(sock: socket.socket, timeout: float, drain: socket.socket) -> bytes:
    """One line from ``sock`` within ``timeout`` (the console is read and dropped
    meanwhile, so that a chatty guest never blocks on it)."""
    buf = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the snapshot's guest did not get ready")
        ready, _, _ = select.select([sock, drain], [], [], left)
        if drain in ready and not drain.recv(65536):
            raise RuntimeError("QEMU exited while booting the snapshot's guest")
        if sock in ready:
            data = sock.recv(4096)
            if not data:
                raise RuntimeError("QEMU exited while booting the snapshot's guest")
            buf += data
    return buf.split(b"\n", 1)[0].strip()


class _Qmp:
    """Just enough of the QEMU Machine Protocol for ``getfd``, ``migrate`` and ``quit``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        sock.settimeout(MIGRATE_TIMEOUT)
        self._message()  # the greeting
        self.command("qmp_capabilities")

    def _message(self) -> dict:  # type: ignore[type-arg]
        while b"\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise RuntimeError("QEMU closed its monitor")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)  # type: ignore[no-any-return]

    def command(self, name: str, fds: list[int] | None = None, **arguments: object) -> dict:  # type: ignore[type-arg]
        request = {"execute": name, **({"arguments": arguments} if arguments else {})}
        data = json.dumps(request).encode() + b"\n"
        if fds:
            socket.send_fds(self.sock, [data], fds)
        else:
            self.sock.sendall(data)
        while True:
            reply = self._message()
            if "event" in reply:
                continue
            if "error" in reply:
                raise RuntimeError(f"{name}: {reply['error'].get('desc', reply['error'])}")
            return reply.get("return", {})  # type: ignore[no-any-return]


def prune(directory: Path, keep: int) -> None:
    """Keep the ``keep`` most recently written snapshots (and their digests); remove the
    temporary files of builds that were interrupted (older than an hour)."""
    snaps = sorted(directory.glob("*.bin"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in snaps[keep:]:
        for path in (old, old.with_suffix(".sha256")):
            with contextlib.suppress(OSError):
                path.unlink()
    for tmp in directory.glob(".*.tmp"):
        with contextlib.suppress(OSError):
            if time.time() - tmp.stat().st_mtime > 3600:
                tmp.unlink()


def restore_config(
    spec: VmSpec,
    qemu: str,
    snap: Snapshot,
    archive: bytes,
    pairs: Mapping[str, tuple[Any, Any]],
    opened: list[int],
) -> dict[str, Any]:
    """The supervisor's way to a restored VM: the snapshot file (opened here, checked
    there), the run's archive, and a control port of its own (a failed restore leaves the
    boot's untouched)."""
    file_fd = os.open(snap.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    opened.append(file_fd)
    archive_fd = os.memfd_create("pysb-run-archive", os.MFD_CLOEXEC)
    opened.append(archive_fd)
    view = memoryview(archive)
    while view:
        view = view[os.write(archive_fd, view) :]
    os.lseek(archive_fd, 0, os.SEEK_SET)
    chardev_fds = {name: pair[1].fileno() for name, pair in pairs.items() if name != "ctl"}
    chardev_fds["ctl"] = pairs["ctl_snap"][1].fileno()
    del chardev_fds["ctl_snap"]
    return {
        "argv": restore_argv(spec, qemu, chardev_fds, file_fd),
        "fds": [file_fd, *chardev_fds.values()],
        "own_fds": [pairs["ctl_snap"][1].fileno()],
        "ctl_fd": pairs["ctl_snap"][0].fileno(),
        "file_fd": file_fd,
        "archive_fd": archive_fd,
        "digest": snap.digest,
        "discard": [str(snap.path), str(snap.path.with_suffix(".sha256"))],
        "size": snap.size,
    }


def restore_fds(cfg: Mapping[str, Any]) -> list[int]:
    """The descriptors the supervisor inherits for :func:`restore_config`'s restore."""
    return [*cfg["fds"], cfg["ctl_fd"], cfg["archive_fd"]]
