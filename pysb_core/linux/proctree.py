"""Our own process tree, read from /proc: who is a descendant of whom.

pysb only ever signals processes it started, by PID, after checking they descend from its
own child; these are the checks.
"""

from __future__ import annotations

import os

from pysb_core.linux import read_file


def children(pid: int) -> list[int]:
    """Direct children of ``pid``, from every thread's ``children`` file."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        # the bytes: a text file object costs more than the read (twice every run)
        data = read_file(f"/proc/{pid}/task/{tid}/children")
        if data is None:
            continue
        try:
            out.extend(int(x) for x in data.split())
        except ValueError:
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid``, breadth first."""
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children(todo.pop(0)):
            found.append(child)
            todo.append(child)
    return found


def running(pid: int) -> bool:
    """Running: neither gone nor a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (``PR_SET_CHILD_SUBREAPER``):
    a daemon the sandbox double-forks stays our child and can be ended with the run.
    Without a PID namespace (landlock, subprocess) nothing else would. False if refused."""
    from pysb_core.linux import cfuncs

    prctl = cfuncs.function("prctl", cfuncs.Long)
    zero = cfuncs.Long(0)
    return prctl(cfuncs.Long(_PR_SET_CHILD_SUBREAPER), cfuncs.Long(1), zero, zero, zero) == 0


def end_adopted(known: set[int], *, timeout: float = 5.0) -> list[int]:
    """SIGKILL and reap every child of ours not in ``known`` (the processes pysb started
    itself): orphans of the sandbox adopted as subreaper, until none is left. Only our own
    children are signalled, by PID. Returns the PIDs ended."""
    import _signal as signal  # the C module: `signal` would import enum, at every run's end
    import time

    ended: list[int] = []
    deadline = time.monotonic() + timeout
    me = os.getpid()
    while time.monotonic() < deadline:
        adopted = [pid for pid in children(me) if pid not in known]
        if not adopted:
            break
        for pid in adopted:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        for pid in adopted:
            try:
                os.waitpid(pid, 0)  # its own children are ours now: the next turn ends them
            except ChildProcessError:
                pass
            ended.append(pid)
    return ended


def reap_adopted(known: set[int]) -> None:
    """Reap the adopted orphans that have exited (zombies count against process limits),
    without waiting and without touching the processes pysb started (``known``)."""
    for pid in children(os.getpid()):
        if pid in known or running(pid):
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
