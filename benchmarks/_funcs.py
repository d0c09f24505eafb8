"""Sandboxed functions for the partial-mode benchmark (pysb side).

They travel by reference (``module:qualname``), so they live in an importable module
that the benchmark copies next to its profile; they need no import and no file.
"""

from pysb_core import sandbox


@sandbox
def noop(x: int = 0) -> int:
    """The trivial call: measures the transport, nothing else."""
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
