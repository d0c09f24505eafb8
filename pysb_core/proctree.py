"""Our own process tree, read from /proc: who is a descendant of whom.

pysb only ever signals processes it started, by PID, after checking they descend from its
own child; these are the checks.
"""

from __future__ import annotations

import os


def children(pid: int) -> list[int]:
    """Direct children of ``pid``, from every thread's ``children`` file."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
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
