"""firejail started by a normal user ends when the process that started it ends.

pysb's host process dies with pysb by ``PR_SET_PDEATHSIG`` (pysb_core/cli/run.py; bwrap has
``--die-with-parent``). The kernel clears that death signal when a normal user executes a
set-user-ID program, and firejail is one (as root nothing changes at the exec, and the
signal holds): after a SIGKILL of pysb (its process group, the OOM killer) firejail and
the program went on, printing on the terminal (issue 26 #9). A SIGKILL of firejail ends its
whole sandbox (tested), and a normal user may send it one (firejail keeps the user's real
uid), so a watcher does what the death signal would have done.

The watcher is forked by the host process between ``fork`` and the ``exec`` of firejail
(:func:`step`, a ``LaunchPlan.pre_exec`` step): it holds a pidfd of pysb (the parent) and
one of the host process itself, whose PID firejail keeps, so no PID is ever reused under
it; it is in a session of its own (no terminal signal or group kill meant for the run
reaches it), blocks every signal it can, and closes every other descriptor (pipes to the
program still end when the program ends). When pysb ends first it SIGKILLs firejail through
its pidfd; when firejail ends it exits (pysb, its subreaper, reaps it). The program, in
firejail's PID namespace, cannot see it.
"""

from __future__ import annotations

import _signal as signal  # the C module: no enums built on the start path
import os
import select

from pysb_firejail.child import bind_prctl, detach

TYPE_CHECKING = False  # imported by firejail runs: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable


def supported() -> bool:
    """Whether this kernel and Python have pidfds (Linux 5.3, Python 3.9)."""
    try:
        fd = os.pidfd_open(os.getpid())
    except (AttributeError, OSError):
        return False
    os.close(fd)
    return True


def step() -> Callable[[], None]:
    """The pre-exec step that forks the watcher (system calls only, as ``preexec_fn``
    allows: the modules it uses are imported here, in pysb)."""
    bind_prctl()  # the watcher's name (detach) without an import after the fork

    def fork_watcher() -> None:
        parent = os.getppid()
        parent_fd = os.pidfd_open(parent)
        if os.getppid() != parent:  # the parent ended before its pidfd was taken
            os.close(parent_fd)
            raise OSError("the process starting firejail ended")
        wrapper_fd = os.pidfd_open(os.getpid())
        try:
            if os.fork() == 0:  # pragma: no cover - runs in the watcher
                _watch(parent_fd, wrapper_fd)
        finally:
            os.close(parent_fd)
            os.close(wrapper_fd)

    return fork_watcher


def _watch(parent_fd: int, wrapper_fd: int) -> None:  # pragma: no cover - in the watcher
    """The watcher's life (see the module's docstring); never returns."""
    try:
        detach("pysb-lifeline", keep=(parent_fd, wrapper_fd))
        poller = select.poll()
        poller.register(parent_fd, select.POLLIN)
        poller.register(wrapper_fd, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if wrapper_fd in ready:
                break  # firejail ended first: nothing to do
            if parent_fd in ready:
                signal.pidfd_send_signal(wrapper_fd, signal.SIGKILL)
                break
    finally:
        os._exit(0)
