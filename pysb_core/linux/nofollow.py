"""Open a canonical directory without following any symbolic link on its way.

A profile's exposure is stored canonical when the profile is read. A provider that can
take a file descriptor instead of a path (``bwrap --bind-fd``) opens it with
:func:`open_dir_nofollow`: each component is opened from the one before with
``O_NOFOLLOW | O_DIRECTORY``, so a directory swapped for a link in between (a sandbox
running at the same time can do that inside its read-write exposures) makes the open
fail instead of redirecting the mount. Pure ``os`` calls: no ctypes on the host.
"""

from __future__ import annotations

import os

_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC


def open_dir_nofollow(path: str) -> int:
    """An ``O_PATH`` descriptor of the directory ``path`` (absolute, canonical).

    Raises ``OSError`` (ENOTDIR or ELOOP) when a component is a symbolic link, and as
    ``os.open`` would when one is missing.
    """
    if not os.path.isabs(path):
        raise ValueError(f"not an absolute path: {path!r}")
    fd = os.open("/", _FLAGS)
    try:
        for name in path.split("/"):
            if not name or name == ".":
                continue
            if name == "..":
                raise ValueError(f"not a canonical path: {path!r}")
            nxt = os.open(name, _FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd
