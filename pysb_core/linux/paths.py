"""Whether a path lies under a root: the one answer every provider and guard uses.

Plain string work on absolute, normalised paths (no ``..``, no ``.``, no doubled ``/``;
a trailing ``/`` on the root is ignored): nothing on disk is looked at and no link is
followed, so the caller decides which spelling it compares (``realpath`` first when links
matter). Component-wise: ``/a/bc`` is not under ``/a/b``.
"""

from __future__ import annotations

__all__ = ["is_within"]


def is_within(path: str, root: str) -> bool:
    """``path`` is ``root`` or lies below it."""
    root = root.rstrip("/")
    if not root:  # "/" contains every absolute path
        return path.startswith("/")
    return path == root or path.startswith(root + "/")
