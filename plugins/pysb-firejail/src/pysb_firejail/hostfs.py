"""What the argv builder needs to know about the host's file system, gathered in one place.

firejail's ``--whitelist`` works per *top-level directory*: whitelisting ``/work/app``
replaces ``/work`` with a tmpfs holding only ``/work/app``, but leaves every other
top-level directory as it is. So "nothing is readable but the exposures" needs the list
of what sits in ``/``: each entry is kept (the system), whitelisted (it holds an exposure)
or blacklisted. The builder itself is pure; this module is the only one that looks at the
real host, so that the unit tests can describe any host.
"""

from __future__ import annotations

import os

from pysb_core.providerkit import ALWAYS_HIDDEN, ETC_BASE, ETC_HOSTS, ETC_NETWORK, field, record

#: The system's programs and libraries: left visible (read-only). On a merged-/usr host
#: the ``/bin``-style entries are symlinks into /usr.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

#: Managed by firejail itself: ``/proc`` (its own pid namespace), ``/dev``
#: (``--private-dev``); ``/run/firejail`` must stay (firejail mounts its own files from
#: there), so ``/run`` is whitelisted down to it; ``/tmp`` is private.
SPECIAL = ("/proc", "/dev", "/run", "/tmp", "/etc")

#: firejail's own run-time directory, which it needs inside.
FIREJAIL_RUN = "/run/firejail"


@record
class HostLayout:
    """A snapshot of the host facts the builder uses.

    ``top_level`` maps each entry of ``/`` to ``"dir"``, ``"file"`` or ``"link"``;
    ``etc`` is the set of the /etc paths above that exist; ``resolved`` maps hidden or
    protected paths that are symlinks to their canonical target; ``existing`` is the set of
    paths (among those asked about) that exist.
    """

    top_level: dict[str, str] = field(default_factory=dict)
    etc: frozenset[str] = frozenset()
    resolved: dict[str, str] = field(default_factory=dict)
    existing: frozenset[str] = frozenset()
    firejail_run: bool = True
    #: Mount points of the host (``/proc/self/mountinfo``): firejail's ``--read-only=/``
    #: does not reach into other mounts, so visible ones get their own entry.
    mounts: frozenset[str] = frozenset()


def scan_host(extra_paths: tuple[str, ...] = ()) -> HostLayout:
    """Look at the real host: the entries of ``/``, the /etc files, and ``extra_paths``
    (hidden and protected paths, whose canonical spelling the builder needs)."""
    top: dict[str, str] = {}
    try:
        names = os.listdir("/")
    except OSError:
        names = []
    for name in names:
        path = "/" + name
        if os.path.islink(path):
            top[path] = "link"
        elif os.path.isdir(path):
            top[path] = "dir"
        else:
            top[path] = "file"
    wanted = (*ETC_BASE, ETC_HOSTS, *ETC_NETWORK, *ALWAYS_HIDDEN)
    etc = frozenset(p for p in wanted if os.path.lexists(p))
    resolved = {p: os.path.realpath(p) for p in extra_paths if os.path.islink(p)}
    existing = frozenset(p for p in (*extra_paths, *resolved.values()) if os.path.lexists(p))
    return HostLayout(top, etc, resolved, existing, os.path.isdir(FIREJAIL_RUN), mount_points())


def mount_points() -> frozenset[str]:
    """The mount points of this mount namespace (``/proc/self/mountinfo``)."""
    out = set()
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4:
                    out.add(unescape(fields[4]))
    except OSError:
        pass
    return frozenset(out)


def unescape(field: str) -> str:
    """A mountinfo field without the octal escapes the kernel writes (``\\040`` for a
    space, also tab, newline and backslash)."""
    if "\\" not in field:
        return field
    raw = field.encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(raw):
        code = raw[i + 1 : i + 4]
        if raw[i] == 0x5C and len(code) == 3 and all(0x30 <= c <= 0x37 for c in code):
            out.append(int(code, 8))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "surrogateescape")


def top_of(path: str) -> str:
    """The top-level directory ``path`` lies in (``/work/a/b`` -> ``/work``)."""
    parts = path.split("/")
    return "/" + parts[1] if len(parts) > 1 and parts[1] else "/"


def depth(path: str) -> int:
    return 0 if path == "/" else path.rstrip("/").count("/")
