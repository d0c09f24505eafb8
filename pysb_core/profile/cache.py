"""On-disk cache of parsed profile files, so a warm ``pysb run`` never imports yaml.

Importing PyYAML and composing a file costs ~15 ms, a noticeable share of the start-up
budget. The parsed node tree (plain tuples, see :mod:`pysb_core.profile.loader`) is stored
with :mod:`marshal` under ``${XDG_CACHE_HOME:-~/.cache}/pysb/profiles/``, keyed by the
file's canonical path; an entry is used only when the file's size, ``mtime_ns`` *and* the
digest of the bytes just read all match, so an edited file is always re-parsed (even one
edited twice within the same mtime tick). Variables are expanded after the cache, so the
cache never holds host environment values.

The directory is never writable inside a sandbox (it is protected like the profile files:
:mod:`pysb_core.linux.statedir`), and an entry is read only when it and its directory belong to
this user and nobody else can write them.

Every failure here (unwritable home, corrupt entry, foreign marshal version) silently
falls back to parsing: the cache can make a start faster, never different.
"""

from __future__ import annotations

import marshal
import os

from pysb_core.linux.statedir import state_dir, trusted

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

try:  # the C module directly: ``hashlib`` drags in OpenSSL (~4 ms)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - exotic builds
    from hashlib import blake2b

#: Bump when the node-tree format of the loader changes.
FORMAT = 1


def cache_dir(environ: Mapping[str, str]) -> str | None:
    """The cache directory, in pysb's state directory (:mod:`pysb_core.linux.statedir`)."""
    base = state_dir(environ)
    return None if base is None else os.path.join(base, "profiles")


def digest(data: bytes) -> bytes:
    return blake2b(data, digest_size=20).digest()


def _entry(directory: str, path: str) -> str:
    name = blake2b(os.fsencode(path), digest_size=16).hexdigest()
    return os.path.join(directory, name + ".marshal")


def load(directory: str | None, path: str, st: os.stat_result, data: bytes) -> Any | None:
    """Return the cached tree of ``path`` when it matches ``data`` exactly, else None."""
    if directory is None:
        return None
    try:
        with open(_entry(directory, path), "rb") as f:
            # Only an entry this user alone could have written (pysb_core.linux.statedir).
            if not (trusted(directory) and trusted("", os.fstat(f.fileno()))):
                return None
            # loads of the bytes: load() of a file reads it item by item, ~4x slower
            record = marshal.loads(f.read())
        fmt, cpath, size, mtime_ns, dig, tree = record
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if (fmt, cpath, size, mtime_ns) != (FORMAT, path, st.st_size, st.st_mtime_ns):
        return None
    if dig != digest(data):
        return None
    return tree


def store(directory: str | None, path: str, st: os.stat_result, data: bytes, tree: Any) -> None:
    """Write the entry atomically (temp + rename); never raise."""
    if directory is None:
        return
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        target = _entry(directory, path)
        tmp = f"{target}.{os.getpid()}.tmp"
        record = (FORMAT, path, st.st_size, st.st_mtime_ns, digest(data), tree)
        with open(tmp, "wb") as f:
            marshal.dump(record, f)
        os.replace(tmp, target)
    except (OSError, ValueError):
        try:
            os.unlink(tmp)  # type: ignore[possibly-undefined]
        except (OSError, NameError):
            pass
