"""Exit statuses that belong to pysb, not to the sandboxed program."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Exit statuses that belong to pysb, not to the sandboxed program."""

    #: The wall-time limit expired and pysb killed the sandbox (as ``timeout`` does).
    WALL_TIME = 124
    #: pysb failed before the program started: bad profile, missing provider, unenforceable rule.
    SETUP_FAILED = 125
    #: The program could not be executed.
    CANNOT_EXECUTE = 126
    #: The program was not found.
    NOT_FOUND = 127
