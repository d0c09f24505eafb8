"""What the argv builder needs to know about the host's file system, gathered in one place.

The builder itself is a pure function of the plan and of a :class:`HostLayout`, so that its
unit tests can describe any host (merged ``/usr`` or not, ``/etc/localtime`` a link or a
file) without touching the real one.
"""

from __future__ import annotations

import os

from pysb_core.providerkit import (
    ALWAYS_HIDDEN,
    ETC_BASE,
    ETC_HOSTS,
    ETC_NETWORK,
    Record,
    field,
    record,
)

#: Top-level entries that hold the system's programs and libraries. On a merged-/usr
#: system (Debian 12) they are symlinks into /usr and are recreated as the same symlinks;
#: where they are real directories they are bound read-only.
TOP_LEVEL_SYSTEM = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@record
class HostLayout(Record):
    """A snapshot of the host facts the builder uses.

    ``top_level`` maps each entry of :data:`TOP_LEVEL_SYSTEM` that exists to ``"dir"`` or
    to the target of its symlink; ``etc`` lists the /etc entries that exist; ``symlinks``
    maps /etc entries that are symlinks to their link text; ``dirs`` is the set of paths
    (among those the builder asks about) that are directories.
    """

    top_level: dict[str, str] = field(default_factory=dict)
    etc: frozenset[str] = frozenset()
    symlinks: dict[str, str] = field(default_factory=dict)
    dirs: frozenset[str] = frozenset()
    always_hidden: frozenset[str] = frozenset()
    #: Hidden/protected paths that are symlinks, mapped to their canonical target (a
    #: mount cannot sit on a symlink: bwrap would follow it inside the sandbox).
    resolved: dict[str, str] = field(default_factory=dict)
    #: Exposure paths that are symlinks (the interpreter's link chain), mapped to their
    #: link text: they are recreated as the same links, not bound.
    exposure_links: dict[str, str] = field(default_factory=dict)
    #: Exposure paths lying below another exposure (or /usr) that are their own canonical
    #: path: the builder may leave their bind out when an enclosing one already shows them.
    canonical: frozenset[str] = frozenset()

    def is_dir(self, path: str) -> bool:
        return path in self.dirs


def scan_host(
    extra_paths: tuple[str, ...] = (), exposure_paths: tuple[str, ...] = ()
) -> HostLayout:
    """Look at the real host: the system entries, the /etc files, ``extra_paths`` (hidden
    and protected paths, whose kind decides how they are masked) and which
    ``exposure_paths`` are symlinks."""
    top: dict[str, str] = {}
    for path in TOP_LEVEL_SYSTEM:
        if os.path.islink(path):
            top[path] = os.readlink(path)
        elif os.path.isdir(path):
            top[path] = "dir"
    etc: set[str] = set()
    links: dict[str, str] = {}
    for path in (*ETC_BASE, ETC_HOSTS, *ETC_NETWORK):
        if os.path.lexists(path):
            etc.add(path)
            if os.path.islink(path):
                links[path] = os.readlink(path)
    hidden = frozenset(p for p in ALWAYS_HIDDEN if os.path.lexists(p))
    resolved = {p: os.path.realpath(p) for p in extra_paths if os.path.islink(p)}
    dirs = frozenset(
        p
        for p in (*ETC_BASE, *ETC_NETWORK, *hidden, *extra_paths, *resolved.values())
        if os.path.isdir(p)
    )
    exp_links = {p: os.readlink(p) for p in exposure_paths if os.path.islink(p)}
    roots = {*exposure_paths, "/usr"}
    nested = {p for p in exposure_paths if any(a in roots for a in _ancestors(p))}
    canonical = frozenset(p for p in nested if os.path.realpath(p) == p)
    return HostLayout(top, frozenset(etc), links, dirs, hidden, resolved, exp_links, canonical)


def _ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``/a/b``, ``/a``, ``/``."""
    out = []
    while path not in ("/", ""):
        path = os.path.dirname(path)
        out.append(path)
    return out


def depth(path: str) -> int:
    return 0 if path == "/" else path.rstrip("/").count("/")
