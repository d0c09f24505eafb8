"""The run path's entry points, remembered across runs and keyed by every file their scan
looked at.

The scan (:func:`pysb_core._startup.entrypoints.scan`) lists every ``sys.path`` directory
and opens every distribution's ``entry_points.txt``: ~280 system calls and ~1.2 ms of
every ``pysb run`` in a development venv (130 distributions). Its answer is kept under
pysb's state directory (``${XDG_CACHE_HOME:-~/.cache}/pysb/entrypoints/``, beside the
probe and profile caches: :mod:`pysb_core.linux.statedir`), one file per ``sys.path``
and family, with the :func:`~pysb_core._startup.entrypoints.stat_key` (device, inode,
size, ``mtime_ns``, ``ctime_ns``, or "absent") of every path the scan read or found
missing: each ``sys.path`` directory (installing or removing a distribution changes its
listing, so its times), each distribution's ``entry_points.txt`` (present or not) and
the metadata read for a name and version. An entry is used only when every one of those
paths still stats the same, for the same format, pysb version, interpreter, ``sys.path``
(and working directory, when ``sys.path`` names it); else the scan runs and is stored
anew. Checking costs one ``stat`` per path (~0.6 ms there, half the scan).

Never staler than the scan: each ``stat`` is taken before its path is read (a change in
between makes the next run's key differ), and a scan is not stored while one of its
paths changed within :data:`SETTLE_NS` (two changes within one tick of the file system's
clock could leave the same times). Like the other state caches, an entry is read only
when its directory and file belong to this user and nobody else can write them, and no
sandbox can (the state directory is protected in every plan). Any failure -- no home, a
corrupt entry, another marshal version -- falls back to the scan: the cache can make a
start faster, never different.
"""

from __future__ import annotations

import marshal
import os
import sys
import time

from pysb_core._startup.entrypoints import EntryPoint, family_of, of_group, scan, stat_key
from pysb_core._startup.memo import cache
from pysb_core.linux.statedir import state_dir, trusted

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from typing import Any

    from pysb_core._startup.entrypoints import Watch

#: Bump when the scan's semantics or this file's layout change.
FORMAT = 1
#: A scan one of whose paths changed this recently (ns) is not stored.
SETTLE_NS = 2_000_000_000

try:  # the C module directly: ``hashlib`` drags in OpenSSL
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - exotic builds
    from hashlib import blake2b


def entry_points(group: str) -> list[EntryPoint]:
    """:func:`pysb_core._startup.entrypoints.entry_points`, from the remembered scan."""
    return of_group(installed(family_of(group)), group)


@cache
def installed(prefix: str) -> tuple[EntryPoint, ...]:
    """Every entry point of the groups starting with ``prefix``, as the scan finds them:
    remembered when nothing it depends on changed, else scanned (and remembered)."""
    remembered = load(prefix)
    if remembered is not None:
        return tuple(EntryPoint(*ep) for ep in remembered)
    watch: Watch = []
    found = scan(prefix, watch)
    store(prefix, watch, found)
    return found


def _identity(prefix: str) -> tuple[Any, ...]:
    """Everything besides the files that the scan's answer depends on."""
    core = sys.modules.get("pysb_core")
    return (
        FORMAT,
        getattr(core, "__version__", ""),
        sys.hexversion,
        prefix,
        tuple(sys.path),
        os.getcwd() if any(not p or not os.path.isabs(p) for p in sys.path) else "",
    )


def _entry_file(identity: tuple[Any, ...]) -> str | None:
    base = state_dir()
    if base is None:
        return None
    name = blake2b(repr(identity).encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()
    return os.path.join(base, "entrypoints", f"{name}.marshal")


def _valid(found: object) -> bool:
    return type(found) is tuple and all(
        type(ep) is tuple and len(ep) == 5 and all(type(x) is str for x in ep) for ep in found
    )


def load(prefix: str) -> tuple[tuple[str, str, str, str, str], ...] | None:
    """The remembered scan for ``prefix``, when every path it depends on is unchanged."""
    try:
        identity = _identity(prefix)
        path = _entry_file(identity)
        if path is None:
            return None
        with open(path, "rb") as f:
            # Only an entry this user alone could have written (pysb_core.linux.statedir).
            if not (trusted(os.path.dirname(path)) and trusted("", os.fstat(f.fileno()))):
                return None
            # loads() of the bytes: load() of a file reads it item by item, ~8x slower
            fmt, ident, stats, found = marshal.loads(f.read())
        if fmt != FORMAT or ident != identity or type(stats) is not tuple or not _valid(found):
            return None
        for watched, key in stats:
            if stat_key(watched) != key:
                return None
        return found  # type: ignore[no-any-return]
    except (OSError, EOFError, ValueError, TypeError):
        return None


def store(prefix: str, stats: Watch, found: tuple[EntryPoint, ...]) -> None:
    """Keep the scan (a temporary file renamed over the entry); never raise. Not when one
    of its paths changed within :data:`SETTLE_NS` (its times may not tell a second change)."""
    settled = time.time_ns() - SETTLE_NS
    if any(key is not None and max(key[3], key[4]) >= settled for _path, key in stats):
        return
    tmp = None
    try:
        identity = _identity(prefix)
        path = _entry_file(identity)
        if path is None:
            return
        directory = os.path.dirname(path)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if not trusted(directory):
            return
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            marshal.dump((FORMAT, identity, tuple(stats), tuple(map(tuple, found))), f)
        os.replace(tmp, path)
    except (OSError, ValueError):
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
