"""Linux primitives: libc calls without ctypes, no-follow opens, the seccomp filter,
the system files a sandbox shows, the process tree, pids cgroups, what an
executable needs, pysb's state directory, path containment. They import nothing of
pysb's stages (an import-linter contract: pyproject.toml).

:func:`read_file` sits here rather than in a module of its own: the kernel's files are
read on every run's start path, where each module costs an import. (``pysb_core._startup``
keeps its own reader for the entry points: it sits below this package, which imports
``pysb_core.plan`` and through it ``_startup``.)
"""

from __future__ import annotations

import os


def read_file(path: str, limit: int | None = None) -> bytes | None:
    """The bytes of ``path`` (its first ``limit`` bytes), or None when it cannot be read.

    Through the descriptor, in one piece: a text file object costs more than the read of
    a small file (``/proc``'s), and a failed ``os.open`` far less
    than a failed ``open()``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    chunks = []
    try:
        if limit is not None:
            chunks.append(os.read(fd, limit))
        else:
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks)
