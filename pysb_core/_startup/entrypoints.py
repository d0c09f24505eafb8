"""A small, fast reader of installed entry points, with importlib.metadata's semantics.

``importlib.metadata`` costs about 20 ms to import here (it pulls in the ``email``
package), more than a sandboxed ``-c pass`` may cost in total. Entry points are plain
INI-like files (``*.dist-info/entry_points.txt``, ``*.egg-info/entry_points.txt``) next to
each distribution's metadata, so ``pysb run`` reads them directly. ``pysb providers``
goes through stevedore (which uses importlib.metadata), so the two must agree on every
point (tests/test_startup_entrypoints.py compares them): the same distributions (the first of a
normalized name on ``sys.path`` wins), the distribution's name and version from its
METADATA, and values with extras (``module:attr [extra]``) that load the same object.
"""

from __future__ import annotations

import os
import sys

from pysb_core._lazy import import_module
from pysb_core._startup.memo import cache

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from typing import Any

    #: :func:`stat_key`'s answer.
    Stat = tuple[int, int, int, int, int] | None
    #: ``(path, its stat)`` of every file a scan looked at, in order.
    Watch = list[tuple[str, Stat]]


class EntryPoint(tuple):  # a named tuple without typing.NamedTuple's cost
    """``(name, value, group, dist_name, dist_version)`` of one entry point."""

    __slots__ = ()

    def __new__(
        cls, name: str, value: str, group: str, dist_name: str, dist_version: str
    ) -> EntryPoint:
        return tuple.__new__(cls, (name, value, group, dist_name, dist_version))

    def __repr__(self) -> str:
        return (
            f"EntryPoint(name={self[0]!r}, value={self[1]!r}, group={self[2]!r}, "
            f"dist_name={self[3]!r}, dist_version={self[4]!r})"
        )

    @property
    def name(self) -> str:
        return self[0]  # type: ignore[no-any-return]

    @property
    def value(self) -> str:
        return self[1]  # type: ignore[no-any-return]

    @property
    def group(self) -> str:
        return self[2]  # type: ignore[no-any-return]

    @property
    def dist_name(self) -> str:
        return self[3]  # type: ignore[no-any-return]

    @property
    def dist_version(self) -> str:
        return self[4]  # type: ignore[no-any-return]

    @property
    def module(self) -> str:
        return self.value.partition("[")[0].partition(":")[0].strip()

    @property
    def attr(self) -> str | None:
        """The object path after ``:`` (None for a module), as importlib.metadata says."""
        _module, colon, attr = self.value.partition("[")[0].partition(":")
        return attr.strip() if colon else None

    @property
    def extras(self) -> list[str]:
        """``[a, b]`` of ``module:attr [a, b]`` (importlib.metadata's ``extras``)."""
        inside = self.value.partition("[")[2].rpartition("]")[0]
        return [e.strip() for e in inside.split(",") if e.strip()]

    def load(self) -> Any:
        """The object named, as importlib.metadata loads it (extras are not checked)."""
        obj = import_module(self.module)
        attr = self.attr
        for part in attr.split(".") if attr else ():
            obj = getattr(obj, part)
        return obj


def _stem_name(info_dir: str) -> str:
    """The distribution name a ``.dist-info`` / ``.egg-info`` directory is named after."""
    return os.path.basename(info_dir).rsplit(".", 1)[0].partition("-")[0]


def normalized(name: str) -> str:
    """PEP 503 normalization (``Foo.Bar_baz`` -> ``foo-bar-baz``): one distribution, one key."""
    out = name.lower().replace("_", "-").replace(".", "-")
    while "--" in out:
        out = out.replace("--", "-")
    return out


def _dist_of(info_dir: str, watch: Watch | None = None) -> tuple[str, str]:
    """Name and version as importlib.metadata gives them: from METADATA (PKG-INFO for an
    egg), else from the directory's name. ``watch``: each file looked at is recorded in
    it (:func:`_watched`) before it is read."""
    base = os.path.basename(info_dir).rsplit(".", 1)[0]
    name, _, version = base.partition("-")
    version = version.partition("-")[0]
    for meta in ("METADATA", "PKG-INFO"):
        meta_path = _watched(watch, os.path.join(info_dir, meta))
        # Name and Version open the headers: the first KiB nearly always holds both.
        for limit in (1 << 10, None):
            text = _read_text(meta_path, limit)
            if text is None:
                break
            fields: dict[str, str] = {}
            for line in text.splitlines():
                if not line.strip():
                    break
                key, _, val = line.partition(":")
                fields.setdefault(key.strip().lower(), val.strip())
            if limit is None or ("name" in fields and "version" in fields):
                return fields.get("name", name), fields.get("version", version or "?")
    return name.replace("_", "-"), version or "?"


def _read_text(path: str, limit: int | None = None) -> str | None:
    """The file's text (its first ``limit`` bytes), or None when it cannot be read. Most
    distributions have no ``entry_points.txt``: a failed ``os.open`` is far cheaper than a
    failed ``open()``."""
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
    return b"".join(chunks).decode("utf-8", "replace")


def _parse(
    path: str, dist: tuple[str, str] | str, prefix: str = "", watch: Watch | None = None
) -> list[EntryPoint]:
    """Entry points of one ``entry_points.txt``. ``dist`` is ``(name, version)``, or the
    ``.dist-info`` directory to read them from (only when the file names entry points).
    ``prefix``: only the groups whose name starts with it; a file that does not even
    contain it is not parsed, and its distribution's metadata is not read. ``watch``:
    each file looked at is recorded in it (:func:`_watched`) before it is read."""
    out: list[EntryPoint] = []
    group = ""
    text = _read_text(_watched(watch, path))
    if text and prefix and prefix not in text:
        return out
    if text and isinstance(dist, str):
        dist = _dist_of(dist, watch)
    for raw in text.splitlines() if text else ():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
            continue
        name, eq, value = line.partition("=")
        if eq and group and group.startswith(prefix):
            out.append(EntryPoint(name.strip(), value.strip(), group, *dist))  # type: ignore[misc]
    return out


def stat_key(path: str) -> Stat:
    """What identifies ``path``'s current content: device, inode, size, ``mtime_ns``,
    ``ctime_ns`` (None: it cannot be stat'ed)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _watched(watch: Watch | None, path: str) -> str:
    """``path``, its :func:`stat_key` first recorded in ``watch`` (what the run path's
    cache of the scan is keyed by: :mod:`pysb_core.launch.entrycache`)."""
    if watch is not None:
        watch.append((path, stat_key(path)))
    return path


@cache
def all_entry_points(prefix: str = "") -> tuple[EntryPoint, ...]:
    """Every entry point of every distribution on ``sys.path`` (first one of a name wins,
    as with importlib.metadata), of the groups whose name starts with ``prefix``."""
    return scan(prefix)


def scan(prefix: str = "", watch: Watch | None = None) -> tuple[EntryPoint, ...]:
    """:func:`all_entry_points` read from the disk; ``watch`` records each path looked at
    and its :func:`stat_key`, taken before the path was read."""
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for entry in sys.path:
        try:
            names = os.listdir(_watched(watch, entry or "."))
        except OSError:
            continue
        for n in sorted(names):
            if not n.endswith((".dist-info", ".egg-info")):
                continue
            info_dir = os.path.join(entry or ".", n)
            key = normalized(_stem_name(info_dir))
            if key in seen:
                continue
            seen.add(key)
            found.extend(
                _parse(os.path.join(info_dir, "entry_points.txt"), info_dir, prefix, watch)
            )
    return tuple(found)


def entry_points(group: str) -> list[EntryPoint]:
    """Entry points of ``group``, sorted by name.

    One scan serves every group of a family (``pysb``, ``pysb.providers``, ``pysb.guards``:
    the name before the first dot): of the ~110 distributions of a development venv, only
    the few whose ``entry_points.txt`` mentions the family are parsed and have their
    metadata read (about 2 ms of every ``pysb run`` before, docs/performance.md)."""
    return of_group(all_entry_points(family_of(group)), group)


def family_of(group: str) -> str:
    """The family a group is scanned with: its name up to the first dot."""
    return group.partition(".")[0]


def of_group(found: tuple[EntryPoint, ...], group: str) -> list[EntryPoint]:
    """The entry points of ``group`` among ``found``, sorted by name."""
    return sorted((ep for ep in found if ep.group == group), key=lambda e: e.name)
