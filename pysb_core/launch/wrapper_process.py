"""The host process of a wrapper sandbox (bwrap, firejail), made to behave like the program.

pysb forwards the signals it receives with ``proc.send_signal``. Wrapper tools do not pass
them on: on SIGTERM bwrap dies (and ``--die-with-parent`` SIGKILLs the program, which
never runs its handlers), firejail shuts the sandbox down. With a PID namespace the tree
is *wrapper -> the sandbox's PID 1 -> program* (a provider names another depth: firejail's
reaper stands between PID 1 and the program), so signals go to the program's host PID,
found by walking the children of our own child (descendants only, by PID). SIGKILL and
SIGSTOP still go to the wrapper; :meth:`kill` ends the program first and waits briefly,
so that a caller that kills a worker and sends the next request at once (partial mode's
timeout) never talks to a dying one.

Two shapes of the same behaviour: :class:`WrapperProcess` is a ``subprocess.Popen`` (what
the kit has promised since 1.0, to subclass), built when first asked for; the light
variants sit on :class:`pysb_core.linux.spawn.Process`, which a launch whose
``LaunchSpec.light`` is set starts without importing ``subprocess`` (~40 modules, ~4 ms of
every bwrap and firejail start). :func:`adopt` and :func:`watch_setup` take either.
"""

from __future__ import annotations

import _signal as signal  # the C module: ``signal``'s enums cost ~2 ms on the start path
import os
import time

from pysb_core.linux.proctree import children, running
from pysb_core.linux.spawn import Process

TYPE_CHECKING = False  # imported by every wrapper launch: no typing at run time
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from typing import Any


class _Forwarding:
    """What makes a wrapper's process behave like the program (the module's docstring);
    mixed into a ``Popen`` or a light :class:`Process`."""

    pid: int
    returncode: int | None
    if TYPE_CHECKING:

        def poll(self) -> int | None: ...

    #: Levels between our child and the program: wrapper -> sandbox PID 1 -> program
    #: (``adopt(depth=...)`` for another shape).
    depth = 2

    def chain(self) -> list[int]:
        """Host PIDs from the sandbox's PID 1 down to the program (our descendants)."""
        out: list[int] = []
        pid = self.pid
        for _ in range(self.depth):
            kids = children(pid)
            if len(kids) > 1:
                kids = _same_session(pid, kids)
            if len(kids) != 1:
                break
            pid = kids[0]
            out.append(pid)
        return out

    def program_pid(self) -> int | None:
        """The program's host PID, or ``None`` if not (yet) or no longer running."""
        chain = self.chain()
        return chain[-1] if len(chain) == self.depth else None

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        target = None if sig in (signal.SIGKILL, signal.SIGSTOP) else self.program_pid()
        if target is not None and not running(target):
            target = None  # a zombie the sandbox's PID 1 does not reap: the wrapper's turn
        if target is None:
            super().send_signal(sig)  # type: ignore[misc]
            return
        try:
            os.kill(target, sig)
        except ProcessLookupError:
            super().send_signal(sig)  # type: ignore[misc]

    def kill(self) -> None:
        """SIGKILL the program and the sandbox's PID 1, then the wrapper; wait (briefly)
        until the program is gone."""
        if self.poll() is not None:
            return
        chain = self.chain()
        for target in reversed(chain):
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass
        super().kill()  # type: ignore[misc]
        if chain:
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and running(chain[-1]):
                time.sleep(0.002)


def _same_session(parent: int, kids: list[int]) -> list[int]:
    """The children of ``parent`` in its session: a helper the sandbox starts beside the
    program in a session of its own (a daemon the program left, adopted by the sandbox's
    init or by firejail's reaper) is not the program."""
    try:
        session = os.getsid(parent)
    except OSError:
        return kids
    out = []
    for kid in kids:
        try:
            if os.getsid(kid) == session:
                out.append(kid)
        except OSError:
            continue
    return out


def adopt(proc: Any, *, own_session: bool | None = None, depth: int | None = None) -> None:
    """``on_started`` hook: turn the process the base launch made (a ``Popen``, or the
    light process of a ``LaunchSpec.light`` launch) into a :class:`WrapperProcess` (or its
    light twin). ``own_session`` tells pysb's waiter whether the program has left the
    terminal's process group (then Ctrl-C must be forwarded, not assumed delivered:
    pysb_core.launch.execute). ``depth`` (kit 1.6) counts the processes from the wrapper's
    child down to the program when it is not :attr:`WrapperProcess.depth` (firejail's
    reaper is the program's parent: 3)."""
    if depth is not None and depth < 1:
        raise ValueError(f"adopt_wrapper: depth must be at least 1, not {depth}")
    proc.__class__ = _LightWrapper if isinstance(proc, Process) else _popen_classes()[0]
    if depth is not None:
        proc.depth = depth
    if own_session is not None:
        proc.pysb_own_session = own_session


class _SetupChecking:
    """A wrapper whose own set-up failure becomes status 125 with pysb's words.

    Wrapper tools exit 1 with their message on stderr when they cannot build the sandbox,
    the same status as a program that exits 1. The provider gives the launch a pipe that
    receives ``marker`` only once the program ran (bwrap's ``--json-status-fd``, or a byte
    the provider's child set-up writes); once the wrapper has exited with status 1, no
    marker means the program never started: pysb says so after the tool's own message.
    """

    returncode: int | None
    status_fd: int | None = None
    marker: bytes = b""
    tool: str = "the sandbox tool"

    def _judge_exit(self) -> None:
        fd, self.status_fd = self.status_fd, None
        if fd is None:
            return
        try:
            if self.returncode != 1:
                return
            os.set_blocking(fd, False)
            data = b""
            while True:
                try:
                    chunk = os.read(fd, 4096)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                data += chunk
            if self.marker not in data:
                import sys

                sys.stderr.write(
                    f"pysb: error: {self.tool} could not set the sandbox up (its own message, "
                    "above, says what failed); the program was not started\n"
                )
                sys.stderr.flush()
                self.returncode = 125
        finally:
            os.close(fd)

    def poll(self) -> int | None:
        status = super().poll()  # type: ignore[misc]
        if status is not None and self.status_fd is not None:
            self._judge_exit()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        super().wait(timeout)  # type: ignore[misc]
        if self.status_fd is not None:
            self._judge_exit()
        return self.returncode  # type: ignore[return-value]


def watch_setup(status_r: int, *, tool: str, marker: bytes) -> Callable[[Any], None]:
    """``on_started`` hook, after :func:`adopt`: the process becomes a
    :class:`SetupCheckedProcess` (or its light twin) reading its own copy of ``status_r``."""

    def started(proc: Any) -> None:
        light = isinstance(proc, Process)
        proc.__class__ = _LightSetupChecked if light else _popen_classes()[1]
        proc.status_fd = os.dup(status_r)
        proc.tool = tool
        proc.marker = marker

    return started


class _LightWrapper(_Forwarding, Process):
    """:class:`WrapperProcess` on pysb's light process."""


class _LightSetupChecked(_SetupChecking, _LightWrapper):
    """:class:`SetupCheckedProcess` on pysb's light process."""


if TYPE_CHECKING:  # what the two names are; at run time __getattr__ makes them

    class WrapperProcess(_Forwarding, subprocess.Popen[bytes]): ...

    class SetupCheckedProcess(_SetupChecking, WrapperProcess): ...


_POPEN_CLASSES: list[type] = []


def _popen_classes() -> list[type]:
    """``[WrapperProcess, SetupCheckedProcess]``, made (and ``subprocess`` imported) once,
    when first needed."""
    if not _POPEN_CLASSES:
        import subprocess

        class WrapperProcess(_Forwarding, subprocess.Popen):  # type: ignore[type-arg]
            """A ``Popen`` of a wrapper whose ``send_signal`` reaches the sandboxed
            program (the module's docstring)."""

        class SetupCheckedProcess(_SetupChecking, WrapperProcess):
            __doc__ = _SetupChecking.__doc__

        for cls in (WrapperProcess, SetupCheckedProcess):
            cls.__module__ = __name__
        _POPEN_CLASSES.extend((WrapperProcess, SetupCheckedProcess))
    return _POPEN_CLASSES


def __getattr__(name: str) -> type:
    """``WrapperProcess`` and ``SetupCheckedProcess``, the ``Popen`` classes, built when
    first asked for (PEP 562): importing this module imports no ``subprocess``."""
    index = {"WrapperProcess": 0, "SetupCheckedProcess": 1}.get(name)
    if index is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _popen_classes()[index]
