"""Sandboxed functions for the partial-mode benchmark (pysandboxes 0.7.0 side).

The same four functions as ``_funcs.py``, decorated by the reference implementation.
This module runs only in the reference's own venv.
"""

from pysandboxes import sandbox  # type: ignore[import-not-found]


@sandbox
def noop(x: int = 0) -> int:
    """The trivial call."""
    return x


@sandbox
async def anoop(x: int = 0) -> int:
    """The trivial call for asyncio callers."""
    return x


@sandbox
def size(blob: bytes) -> int:
    """A large argument in, a small result out."""
    return len(blob)


@sandbox
def blob(n: int) -> bytes:
    """A small argument in, a large result out."""
    return bytes(n)
