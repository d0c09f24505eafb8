"""Helpers for partial-mode tests: importable modules on the fly, profiles, worker PIDs.

Sandboxed functions must live in importable modules, so tests write small modules into a
temporary directory put on ``sys.path``. Under an OS provider the worker's host PID is not
the launcher's (bwrap, firejail and unshare start it below themselves), so tests that kill
the worker find it among the launcher's descendants: the deepest process running this
interpreter.
"""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
import time
import uuid
from pathlib import Path
from types import ModuleType

from pysb_core.linux.proctree import descendants


def write_module(directory: Path, source: str, prefix: str = "sbmod") -> ModuleType:
    """Write ``source`` as a uniquely named module in ``directory`` and import it."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    importlib.invalidate_caches()
    return importlib.import_module(name)


def profile_text(provider: str, root: Path, rw: Path | None = None, extra: str = "") -> str:
    """A permissive profile for ``provider``: the tests' files, any import, any API.

    Files rules are always given: under ``subprocess`` the Python guards enforce them (and
    the protection of the profile file itself), under an OS provider both layers do.
    """
    lines = [
        "version: 1",
        f"provider: {provider}",
        'imports: ["*"]',
        'api: {allow: ["*"]}',
        "files:",
        f"  expose-ro: [{root}]",
    ]
    if rw is not None:
        lines.append(f"  expose-rw: [{rw}]")
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"


def _pysb_helper(pid: int) -> bool:
    """A process pysb's providers start beside the program and name ``pysb-...``."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().startswith("pysb-")
    except OSError:
        return False


def _runs_python(pid: int) -> bool:
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        # Not ours to look into (a normal user's firejail sandbox runs in a user namespace
        # firejail made as root): the command name is readable by anyone.
        try:
            with open(f"/proc/{pid}/comm") as f:
                return f.read().startswith("python")
        except OSError:
            return False
    return os.path.basename(exe).startswith("python")


def _namespace_pids(pid: int) -> list[int]:
    """``pid`` as each PID namespace from the host's down to its own sees it (NSpid)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return [int(n) for n in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return [pid]


def worker_host_pid(launcher_pid: int, timeout: float = 10.0) -> int:
    """The host PID of the Python worker started as (or below) ``launcher_pid``.

    The worker is the first Python process of the deepest PID namespace below the
    launcher, that namespace's init aside (unshare's is a Python too) and pysb's own
    helpers too (firejail's reaper, ``pysb-reaper`` in ``comm``: the worker's parent, a
    fork of the interpreter that became the worker).
    """
    deadline = time.monotonic() + timeout
    while True:
        chain = [launcher_pid, *descendants(launcher_pid)]
        pythons = [
            (p, _namespace_pids(p)) for p in chain if _runs_python(p) and not _pysb_helper(p)
        ]
        depth = max((len(ns) for _, ns in pythons), default=0)
        candidates = [(ns[-1], p) for p, ns in pythons if len(ns) == depth and ns[-1] != 1]
        if candidates:
            return min(candidates)[1]
        if time.monotonic() > deadline:
            raise AssertionError(f"no python worker below pid {launcher_pid}")
        time.sleep(0.01)


def is_descendant(pid: int, ancestor: int | None = None) -> bool:
    """True when ``pid`` is a descendant of ``ancestor`` (default: this process)."""
    return pid in descendants(os.getpid() if ancestor is None else ancestor)


def wait_for_file(path: Path, timeout: float = 20.0) -> str:
    """Wait until ``path`` exists and is not empty; return its text."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = path.read_text()
        except OSError:
            text = ""
        if text.strip():
            return text
        time.sleep(0.01)
    raise AssertionError(f"{path} was not written within {timeout} s")
