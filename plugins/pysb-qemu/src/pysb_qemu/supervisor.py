"""The host process that runs one VM and stands for the sandboxed program.

Started by :meth:`QemuProvider.launch` as ``python -S -E -s supervisor.py CONFIG_FD`` (a
plain script, standard library only, so it starts in ~15 ms). The Popen object pysb waits
on is *this* process, so the usual contract holds: its exit status is the program's
(``sys.exit(7)`` gives 7, death by signal N gives 128+N), its stdin/stdout/stderr are the
program's, and a signal sent to it (Ctrl-C) is forwarded to the program in the guest.

It relays each port's bytes between QEMU's socket and the host fd. Bytes the guest queued
just before powering off would be lost, so the guest writes an end marker on every output
port after the program exits, then its status on the control port; only when the status
and every marker have arrived does the supervisor stop QEMU.

Lifetime: QEMU gets ``PR_SET_PDEATHSIG(SIGKILL)`` (and is in its own session, so a
terminal's Ctrl-C reaches the program only through the control port). The supervisor holds
the read end of a "lifeline" pipe whose write end only pysb holds: when pysb dies, however
it dies, the read returns EOF and the supervisor kills QEMU and exits. Nothing is written
to disk: the initramfs is a memfd and the channels are socketpairs.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

TYPE_CHECKING = False  # no typing import in this script at run time
if TYPE_CHECKING:
    from types import ModuleType

SETUP_FAILED = 125
FORWARDED_SIGNALS = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """preexec_fn of QEMU (the supervisor is single-threaded at that point)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        view = view[n:]


def _marker_prefix_len(data: bytes, marker: bytes) -> int:
    """Length of the longest suffix of ``data`` that is a proper prefix of ``marker``."""
    for k in range(min(len(data), len(marker) - 1), 0, -1):
        if data.endswith(marker[:k]):
            return k
    return 0


class Supervisor:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.marker: bytes = config["marker"].encode()
        self.ctl = socket.socket(fileno=config["ctl_fd"])
        self.console = socket.socket(fileno=config["console_fd"])
        self.console_tail = bytearray()
        self.rc: int | None = None
        self.failure: str | None = None
        self.status = threading.Event()
        self.qemu_exited = threading.Event()
        self.outputs_done: list[threading.Event] = []
        self.qemu: subprocess.Popen[bytes] | None = None
        self.qemu_stderr = b""
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self.ctl_pending = b""  # bytes read from the control port with "restored"
        self.signals_held: list[int] | None = []  # None once the control port is chosen

    # -- relays ----------------------------------------------------------------------

    def _thread(self, target, *args) -> None:
        threading.Thread(target=target, args=args, daemon=True).start()

    def host_to_guest(self, host_fd: int, sock: socket.socket) -> None:
        try:
            while True:
                data = os.read(host_fd, 65536)
                if not data:
                    break
                sock.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)

    def guest_to_host(
        self, sock: socket.socket, host_fd: int, done: threading.Event, guest_fd: int | None
    ) -> None:
        """Copy until the end marker (or EOF).

        A host fd that breaks (``pysb run ... | head -1``) does not stall the guest: the
        rest is read and dropped, and for stdout/stderr the guest is told (``brk N``): it
        stops the relay behind the program's fd, whose next write fails with EPIPE, as it
        would natively (CPython raises BrokenPipeError; ``sh`` or ``cat`` get SIGPIPE).
        """
        pending = b""
        broken = False

        def emit(data: bytes) -> None:
            nonlocal broken
            if not data or broken:
                return
            try:
                _write_all(host_fd, data)
            except OSError:
                broken = True
                if guest_fd in (1, 2):
                    with contextlib.suppress(OSError):
                        self.ctl.sendall(f"brk {guest_fd}\n".encode())

        try:
            while True:
                data = sock.recv(1 << 16)
                if not data:
                    emit(pending)
                    break
                pending += data
                at = pending.find(self.marker)
                if at >= 0:
                    emit(pending[:at])
                    break
                # Hold back only a tail that could be the start of the marker, so that
                # interactive output (a prompt, a short reply) is never delayed.
                hold = _marker_prefix_len(pending, self.marker)
                emit(pending[: len(pending) - hold])
                pending = pending[len(pending) - hold :]
        except OSError:
            pass
        finally:
            done.set()

    def control(self) -> None:
        buf = self.ctl_pending
        try:
            while True:
                data = self.ctl.recv(4096)
                if not data:
                    break
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self._control_line(line.decode(errors="replace").strip())
        except OSError:
            pass

    def _control_line(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        if kind == "start":
            self.report_start()
        elif kind == "rc" and rest.strip().isdigit():
            self.rc = int(rest)
            self.status.set()
        elif kind == "fail":
            self.failure = rest
            self.status.set()

    def report_start(self) -> None:
        """Tell pysb when the program started in the guest (this host's monotonic clock):
        ``limits: wall-time`` is the program's time, not the VM's boot."""
        fd = self.config.get("started_fd")
        if fd is None:
            return
        self.config["started_fd"] = None
        try:
            os.write(fd, f"{time.monotonic()!r}\n".encode())
        except OSError:
            pass  # pysb is gone: the lifeline ends us
        finally:
            os.close(fd)

    def read_console(self) -> None:
        debug = self.config.get("debug", False)
        try:
            while True:
                data = self.console.recv(65536)
                if not data:
                    break
                if debug:
                    with contextlib.suppress(OSError):
                        _write_all(2, data)
                self.console_tail += data
                del self.console_tail[:-65536]
        except OSError:
            pass

    def lifeline(self, fd: int) -> None:
        """Returns only when pysb is gone: stop everything."""
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        self.kill_qemu()
        os._exit(SETUP_FAILED)

    # -- qemu ------------------------------------------------------------------------

    def kill_qemu(self) -> None:
        with self.lock:
            if self.qemu is not None and self.qemu.poll() is None:
                with contextlib.suppress(OSError):
                    self.qemu.kill()

    def forward_signal(self, signum: int, _frame: object) -> None:
        if self.signals_held is not None:  # restoring: which control port is not known yet
            self.signals_held.append(signum)
            return
        with contextlib.suppress(OSError):
            self.ctl.sendall(f"sig {signum}\n".encode())

    def wait_qemu(self) -> None:
        assert self.qemu is not None and self.qemu.stderr is not None
        self.qemu_stderr = self.qemu.stderr.read()[-16384:]
        self.qemu.wait()
        self.qemu_exited.set()
        self.status.set()

    def stamp(self, event: str) -> None:
        """PYSB_QEMU_DEBUG: a host phase on stderr, on the clock every process shares
        (benchmarks/qemu_start.py reads these beside the guest's stage lines)."""
        if self.config.get("debug"):
            with contextlib.suppress(OSError):
                _write_all(2, f"pysb-host: {time.monotonic():.6f}: {event}\n".encode())

    def run(self) -> int:
        cfg = self.config
        parent = os.getpid()
        for event, at in cfg.get("debug_times", []):
            with contextlib.suppress(OSError):
                _write_all(2, f"pysb-host: {at:.6f}: {event}\n".encode())
        self.stamp("supervisor started")
        # Signals that come while the VM is being restored wait for its control port.
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, self.forward_signal)
        # QEMU is spawned (with a preexec_fn) while this process has one thread.
        if not (cfg.get("snapshot") and _restoring().restore(self, cfg["snapshot"], parent)):
            self.qemu = self.spawn(cfg["qemu_argv"], cfg["qemu_fds"], parent)
            self.stamp("qemu spawned")
        for fd in cfg["qemu_fds"]:
            os.close(fd)
        held, self.signals_held = self.signals_held or [], None
        for signum in held:
            self.forward_signal(signum, None)
        if cfg.get("lifeline_fd") is not None:
            self._thread(self.lifeline, cfg["lifeline_fd"])
        self._thread(self.control)
        self._thread(self.read_console)
        for port in cfg["ports"]:
            sock = socket.socket(fileno=port["sock_fd"])
            # Keep every socket open until the end: closing one (even after its EOF) is a
            # hang-up for QEMU, which would then drop bytes the guest has not read yet.
            self.sockets.append(sock)
            if port["direction"] in ("in", "both"):
                self._thread(self.host_to_guest, port["host_fd"], sock)
            if port["direction"] in ("out", "both"):
                done = threading.Event()
                self.outputs_done.append(done)
                self._thread(self.guest_to_host, sock, port["host_fd"], done, port["guest_fd"])
        self._thread(self.wait_qemu)
        while not self.status.wait(0.5):
            pass
        self.stamp("status received")
        if self.rc is not None:
            # The program is done; its last bytes may still be in flight.
            for done in self.outputs_done:
                while not done.wait(0.2):
                    if self.qemu_exited.is_set():
                        break
        self.stamp("outputs ended")
        self.kill_qemu()
        self.qemu_exited.wait(10)
        self.stamp("qemu stopped")
        if self.rc is not None:
            return self.rc
        self.report_failure()
        return SETUP_FAILED

    def spawn(self, argv: list[str], fds: list[int], parent: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            pass_fds=fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=lambda: _die_with_parent(parent),
        )

    def report_failure(self) -> None:
        if self.failure:
            msg = f"pysb: qemu guest: {self.failure}\n"
        else:
            console = bytes(self.console_tail[-4000:]).decode(errors="replace")
            stderr = self.qemu_stderr.decode(errors="replace")
            msg = (
                "pysb: the qemu VM stopped before the program reported an exit status"
                f" (qemu exit status {self.qemu.returncode if self.qemu else '?'})\n"
            )
            if stderr.strip():
                msg += f"qemu: {stderr.strip()}\n"
            if console.strip():
                msg += f"guest console (tail):\n{console.rstrip()}\n"
        with contextlib.suppress(OSError):
            _write_all(2, msg.encode())


def _restoring() -> ModuleType:
    """:mod:`pysb_qemu.restoring`, imported as this script imports it (its directory first
    on ``sys.path``) or as the package's module (tests)."""
    if __package__:
        from pysb_qemu import restoring
    else:
        import restoring  # type: ignore[no-redef]
    return restoring


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    fd = int(argv[0])
    with os.fdopen(fd, "rb") as f:
        config = json.loads(f.read())
    return Supervisor(config).run()


if __name__ == "__main__":
    sys.exit(main())
