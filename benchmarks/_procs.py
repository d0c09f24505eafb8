"""Process-tree and memory helpers shared by the benchmark and its worker scripts.

Standard library only: the worker scripts also run in the reference's venv. Peak RSS is
read from ``/proc/PID/status`` (``VmHWM``, the high-water mark), which is monotonic, so
the last reading before a process exits is its peak up to that moment.
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
        except OSError:
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


def peak_rss_kib(pid: int | str = "self") -> int | None:
    """``VmHWM`` of ``pid`` in KiB, or None when the process is gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_name(pid: int) -> str:
    """The command name of ``pid`` (``comm``), or '' when it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def largest_descendant(pid: int) -> tuple[int, str] | None:
    """(peak RSS in KiB, name) of the descendant of ``pid`` with the largest peak RSS."""
    best: tuple[int, str] | None = None
    for child in descendants(pid):
        rss = peak_rss_kib(child)
        if rss is not None and (best is None or rss > best[0]):
            best = (rss, process_name(child))
    return best
