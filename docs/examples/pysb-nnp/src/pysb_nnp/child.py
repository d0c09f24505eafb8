"""Runs inside the sandbox: pysb's bootstrap imports this module before the guards are
installed and calls :func:`no_core_dumps` before the program's first line."""

from __future__ import annotations

import resource


def no_core_dumps() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
