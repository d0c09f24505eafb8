"""Whether this interpreter is the sandboxed one.

The mark lives on the ``sys`` module rather than in a pysb module, because the import
guard may evict framework modules from ``sys.modules`` after start-up: a fresh copy of a
pysb module would forget a flag, ``sys`` cannot be evicted. The mark only decides that
``@sandbox`` calls its function directly; setting it in the host would merely run the
host's own code unsandboxed, which the host can do anyway.
"""

from __future__ import annotations

import sys

_MARK = "_pysb_sandboxed"


_SYS = vars(sys)  # read directly: a missing module attribute costs an AttributeError


def is_in_sandbox() -> bool:
    """True inside a sandboxed interpreter (partial-mode worker or ``pysb run``).

    Asked on every ``@sandbox`` call in the host: a dict look-up, since ``getattr`` with a
    default on a module formats and drops an ``AttributeError`` when the mark is absent."""
    return bool(_SYS.get(_MARK, False))


def mark_in_sandbox() -> None:
    """Called by the sandboxed interpreter's start-up code, before any user code runs."""
    setattr(sys, _MARK, True)
