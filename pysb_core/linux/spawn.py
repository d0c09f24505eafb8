"""Start the sandbox's first process as ``subprocess.Popen`` would, without ``subprocess``.

``import subprocess`` brings ``locale`` (and with it ``re``), ``selectors``, ``signal``,
``contextlib`` and more: about a third of ``python -c pass``, paid by every ``pysb run``
for one ``fork`` and one ``exec``. :class:`Process` does what ``Popen`` does for the
launches pysb makes (CPython's ``_posixsubprocess`` child, step by step, in its order):
the standard streams set up, ``pass_fds`` kept and every other descriptor closed, the
working directory entered, SIGPIPE and SIGXFSZ back to their defaults, the process group
or session set, the ``preexec_fn`` run, then ``execve``; a failure before the ``exec``
comes back through a close-on-exec pipe and is raised in the parent as ``Popen`` raises
it (``OSError`` with the file it concerns, ``subprocess.SubprocessError`` for the
``preexec_fn``). The object answers what pysb asks of a ``Popen`` (``pid``,
``returncode``, ``poll``, ``wait``, ``send_signal``, ``kill``, ``terminate``), so a
provider's ``on_started`` and :func:`pysb_core.launch.execute.wait` see no difference.

:func:`start` takes this path only for what it covers (an absolute program, streams given
as descriptors, files or ``DEVNULL``); anything else goes to ``subprocess.Popen`` itself.
"""

from __future__ import annotations

import _signal
import _thread
import os

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

#: ``subprocess.PIPE`` / ``subprocess.DEVNULL`` (the same values, without the import).
PIPE, DEVNULL = -1, -3

#: The ``Popen`` keyword arguments :class:`Process` implements.
HANDLED = frozenset(
    {"env", "cwd", "pass_fds", "stdin", "stdout", "stderr", "process_group", "preexec_fn"}
)

_MAXFD = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1 << 16


def start(argv: Sequence[str], *, light: bool = True, **kwargs: Any) -> Any:
    """``subprocess.Popen(argv, **kwargs)``: a :class:`Process` when it covers the call
    (and ``light``: the caller does not need a ``Popen`` object itself), else ``Popen``."""
    streams = (kwargs.get("stdin"), kwargs.get("stdout"), kwargs.get("stderr"))
    if (
        light
        and set(kwargs) <= HANDLED
        and argv
        and os.sep in str(argv[0])
        and PIPE not in streams
        and os.name == "posix"
    ):
        return Process(list(argv), **kwargs)
    import subprocess

    return subprocess.Popen(argv, **kwargs)


def _fd_of(stream: Any) -> int | None:
    if stream is None or isinstance(stream, int):
        return stream  # type: ignore[no-any-return]
    return int(stream.fileno())


def _keep_only(keep: Sequence[int]) -> None:
    """Close every descriptor from 3 up but those of ``keep`` (``close_range`` between)."""
    low = 3
    for fd in sorted(set(keep)):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, _MAXFD)


class Process:
    """A started child process, ``Popen``'s way (see the module's docstring)."""

    def __init__(
        self,
        args: list[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        pass_fds: Sequence[int] = (),
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        process_group: int | None = None,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.args = args
        self.returncode: int | None = None
        self.stdin = self.stdout = self.stderr = None
        self._lock = _thread.allocate_lock()
        devnull = None
        if DEVNULL in (stdin, stdout, stderr):
            devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        streams = [devnull if s == DEVNULL else _fd_of(s) for s in (stdin, stdout, stderr)]
        env_list = None if env is None else dict(env)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = os.fork()
            if pid == 0:  # the child: never returns
                self._child(streams, pass_fds, err_w, cwd, process_group, preexec_fn, env_list)
            self.pid = pid
        finally:
            os.close(err_w)
            if devnull is not None:
                os.close(devnull)
        try:
            report = b""
            while chunk := os.read(err_r, 4096):
                report += chunk
                if len(report) > 50_000:
                    break
        finally:
            os.close(err_r)
        if report:
            self._reap()
            self._raise(report, cwd, args[0])

    def _child(
        self,
        streams: list[int | None],
        pass_fds: Sequence[int],
        err_w: int,
        cwd: str | None,
        process_group: int | None,
        preexec_fn: Callable[[], None] | None,
        env: dict[str, str] | None,
    ) -> None:
        stage = b"setup"
        try:
            for fd in pass_fds:
                os.set_inheritable(fd, True)
            # A source that is itself 0-2 could be overwritten by an earlier dup2: moved
            # above 2 first (``_posixsubprocess`` does the same).
            sources = [os.dup(s) if s is not None and s < 3 and s != i else s
                       for i, s in enumerate(streams)]  # fmt: skip
            for target, source in enumerate(sources):
                if source is None:
                    continue
                if source == target:
                    os.set_inheritable(target, True)
                else:
                    os.dup2(source, target)
            if cwd is not None:
                stage = b"chdir"
                os.chdir(cwd)
                stage = b"setup"
            for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):
                signo = getattr(_signal, name, None)
                if signo is not None:
                    _signal.signal(signo, _signal.SIG_DFL)
            if process_group is not None:
                os.setpgid(0, process_group)
            if preexec_fn is not None:
                stage = b"preexec"
                preexec_fn()
                stage = b"setup"
            _keep_only([*pass_fds, err_w])
            stage = b"exec"
            if env is None:
                os.execv(self.args[0], self.args)
            else:
                os.execve(self.args[0], self.args, env)
        except BaseException as exc:
            errno = getattr(exc, "errno", None) if isinstance(exc, OSError) else None
            try:
                os.write(err_w, b"%s:%d:%s" % (stage, errno or 0, type(exc).__name__.encode()))
            finally:
                os._exit(255)

    @staticmethod
    def _raise(report: bytes, cwd: str | None, executable: str) -> None:
        """The child's failure as ``Popen`` raises it: the file is the working directory
        for ``chdir``, the program for ``exec``, none for the steps between."""
        stage, _, rest = report.partition(b":")
        number, _, name = rest.partition(b":")
        errno = int(number or 0)
        if stage == b"preexec" or not errno:
            import subprocess

            if stage == b"preexec":
                raise subprocess.SubprocessError("Exception occurred in preexec_fn.")
            raise subprocess.SubprocessError(f"the child failed before exec ({name.decode()})")
        where = {b"chdir": cwd, b"exec": executable}.get(stage)
        raise OSError(errno, os.strerror(errno), where)

    def _reap(self) -> None:
        while True:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.returncode = 0
                return
            except InterruptedError:  # pragma: no cover - retried by Python itself
                continue
            self.returncode = os.waitstatus_to_exitcode(status)
            return

    def poll(self) -> int | None:
        """The exit status once the process has ended (and is reaped), else None."""
        if self.returncode is not None or not self._lock.acquire(False):
            return self.returncode
        try:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped by someone else: as Popen says
                    self.returncode = 0
                else:
                    if pid == self.pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
        finally:
            self._lock.release()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit status; ``subprocess.TimeoutExpired`` after ``timeout``."""
        if timeout is None:
            with self._lock:
                if self.returncode is None:
                    self._reap()
            return self.returncode  # type: ignore[return-value]
        import time

        end = time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            left = end - time.monotonic()
            if left <= 0:
                import subprocess

                raise subprocess.TimeoutExpired(self.args, timeout)
            delay = min(delay * 2, left, 0.05)
            time.sleep(delay)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        """Signal the process unless it has ended (and been reaped): never a reused pid."""
        self.poll()
        if self.returncode is not None:
            return
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def terminate(self) -> None:
        self.send_signal(_signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(_signal.SIGKILL)

    def __repr__(self) -> str:
        return f"<pysb Process: returncode: {self.returncode} args: {self.args!r}>"


__all__ = ["DEVNULL", "PIPE", "Process", "start"]
