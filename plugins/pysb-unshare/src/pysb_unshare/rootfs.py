"""Compile a launch plan into the sandbox's root: an empty tmpfs filled by explicit steps.

Nothing of the host is visible unless a step names it: the system directories programs need
to run (``/usr``, ``/lib*`` and the merged-/usr symlinks), a handful of generated ``/etc``
files, CA certificates, the interpreter with its standard library and site-packages (the
plan's implicit exposures), and the profile's exposures. The steps are plain lists so they
cross into ``nsinit.py`` as JSON; this module only decides, it never mounts.
"""

from __future__ import annotations

import os

from pysb_core.providerkit import ALWAYS_HIDDEN, Exposure, LaunchPlan, SandboxError, is_within

TYPE_CHECKING = False  # on every unshare run: no ``collections`` (~1 ms) for annotations
if TYPE_CHECKING:
    from collections.abc import Iterable

#: System directories bound read-only when present (symlinks are recreated as symlinks).
BASE_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: Host /etc entries bound read-only when present: the dynamic loader's cache, time zone,
#: certificates, and the alternatives links some /usr/bin commands go through.
ETC_BINDS = (
    "/etc/ld.so.cache",
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
    "/etc/alternatives",
    "/etc/protocols",
    "/etc/services",
)
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

NSSWITCH = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
PASSWD = (
    "root:x:0:0:sandbox:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
GROUP = "root:x:0:\nnogroup:x:65534:\n"


def _depth(path: str) -> int:
    return len([p for p in path.split("/") if p])


def translate(path: str, exposures: Iterable[Exposure]) -> str | None:
    """Where a host path appears inside (through the exposure that covers it best)."""
    best: Exposure | None = None
    for e in exposures:
        if is_within(path, e.path) and (best is None or len(e.path) > len(best.path)):
            best = e
    if best is None:
        return None
    return best.target + path[len(best.path) :] if path != best.path else best.target


def _localtime_steps() -> list[list]:
    try:
        link = os.readlink("/etc/localtime")
    except OSError:
        return [["optbind", "/etc/localtime", "/etc/localtime"]]
    return [["symlink", link, "/etc/localtime"]]


def _exposure_ops(
    exposures: list[Exposure],
    base: list[str],
    extra_ro: Iterable[str],
    *,
    host_root: bool | None = None,
) -> list[list]:
    """Binds for the exposures, parents before children.

    An exposure already visible, with the same access, through a bind at the same place
    (shallower, or the very same bind: a read-only base directory or /etc entry) needs no
    mount of its own. A symlink on the interpreter's chain is recreated as a symlink (its
    target is exposed on its own): binding it would follow it. ``host_root``: the host's
    ``/`` is the root (``True`` read-write, ``False`` read-only), the widest such bind.
    """
    wanted: dict[tuple[str, str], bool] = {}
    # The profile's own exposures are canonical: nsinit opens them without following any
    # link and mounts the descriptor (a link swapped in since the profile was read fails).
    exact = {e.path for e in exposures if not e.implicit}
    for e in exposures:
        if os.path.lexists(e.path):
            key = (e.path, e.target)
            wanted[key] = wanted.get(key, False) or e.writable
    for path in extra_ro:
        if os.path.exists(path):
            wanted.setdefault((path, path), False)
    kept: list[tuple[str, str, bool]] = [(d, d, False) for d in base]
    if host_root is not None:
        kept.append(("/", "/", host_root))
    ops: list[list] = []
    for (src, dst), rw in sorted(wanted.items(), key=lambda kv: (_depth(kv[0][1]), kv[0][1])):
        # ``kept`` holds only binds still visible, so the deepest one covering ``dst`` is
        # what shows there now.
        parents = [k for k in kept if is_within(dst, k[1])]
        cover = max(parents, key=lambda k: len(k[1]), default=None)
        same_place = cover is not None and cover[0] == cover[1] and src == dst
        if os.path.islink(src):
            if not same_place:
                ops.append(["symlink", os.readlink(src), dst])
            continue
        if same_place and cover is not None and cover[2] == rw:
            continue
        kept = [k for k in kept if not is_within(k[1], dst)]  # hidden below the new bind
        kept.append((src, dst, rw))
        ops.append(["bind", src, dst, not rw, src in exact])
    return ops


def build_ops(
    plan: LaunchPlan, *, hosts: str, resolv: str, extra_ro: Iterable[str] = ()
) -> list[list]:
    """The ordered set-up steps for ``nsinit.run_ops`` (targets are paths inside)."""
    ops: list[list] = []
    exposures = list(plan.exposures)
    root_exposures = [e for e in exposures if e.target == "/"]
    for e in root_exposures:
        if e.path != "/":
            raise SandboxError(
                f"{e.source}: a renamed exposure onto '/' ({e.path}:/) is not supported by the "
                "unshare provider; expose the directories the program needs"
            )
    host_root = bool(root_exposures)
    exposures = [e for e in exposures if e.target != "/"]
    root_writable = any(e.writable for e in root_exposures)
    if host_root:
        # ``expose-ro: [/]``: the host's whole tree is the root (nsinit binds it first and
        # builds on top); the system and /etc are there already.
        ops.append(["hostroot", not root_writable])
        base: list[str] = []
    else:
        base = [d for d in BASE_DIRS if os.path.lexists(d)]
        ops += [["optbind", d, d] for d in base]
    # /etc: generated, plus a few host files. Nothing else of the host's /etc is visible.
    ops += [
        ["file", "/etc/hosts", hosts, 0o644],
        ["file", "/etc/resolv.conf", resolv, 0o644],
        ["file", "/etc/nsswitch.conf", NSSWITCH, 0o644],
        ["file", "/etc/passwd", PASSWD, 0o644],
        ["file", "/etc/group", GROUP, 0o644],
        ["file", "/etc/hostname", "sandbox\n", 0o644],
    ]
    etc = [] if host_root else [p for p in ETC_BINDS if os.path.lexists(p)]
    if not host_root:
        ops += _localtime_steps()
        ops += [["optbind", p, p] for p in etc]
    # /dev: a few device nodes bound from the host (no mknod in a user namespace).
    ops.append(["tmpfs", "/dev", "0755"])
    ops += [["device", d] for d in DEVICES if os.path.exists(f"/dev/{d}")]
    ops += [
        # Pseudo-terminals (os.openpty, pty.fork): a devpts instance of the sandbox's own.
        ["devpts", "/dev/pts"],
        ["symlink", "pts/ptmx", "/dev/ptmx"],
        ["symlink", "/proc/self/fd", "/dev/fd"],
        ["symlink", "/proc/self/fd/0", "/dev/stdin"],
        ["symlink", "/proc/self/fd/1", "/dev/stdout"],
        ["symlink", "/proc/self/fd/2", "/dev/stderr"],
        # Private and bounded (``limits: tmp``: writing past it is ENOSPC).
        ["tmpfs", "/dev/shm", "1777", plan.policy.limits.tmp_bytes()],
        ["tmpfs", "/tmp", "1777", plan.policy.limits.tmp_bytes()],
        ["dir", "/root"],
    ]
    # The /etc binds count as read-only binds already made: the implicit CA exposures
    # (/etc/ssl, /etc/ca-certificates) need no second mount.
    ops += _exposure_ops(
        exposures,
        [*base, *(p for p in etc if not os.path.islink(p))],
        extra_ro,
        host_root=root_writable if host_root else None,
    )
    # Profile files stay read-only even inside a read-write exposure.
    for p in plan.protected:
        inside = translate(os.path.realpath(p), exposures)
        if inside is not None:
            ops.append(["protect", inside])
    # Paths an ignore glob matched: masked with an empty read-only view.
    for h in plan.hidden:
        inside = translate(h, exposures)
        if inside is not None:
            ops.append(["mask", inside])
    # Host secrets inside what the /etc binds show (private TLS keys under /etc/ssl): a
    # root pysb's sandbox is their owner, so their modes alone would not keep them closed.
    for h in ALWAYS_HIDDEN:
        shown = host_root or any(is_within(h, p) for p in etc)
        if shown and os.path.isdir(h) and not os.path.islink(h):
            ops.append(["mask", h])
    visible = [o[2] for o in ops if o[0] == "bind"] + base
    if not host_root and not any(is_within(plan.cwd, v) for v in visible):
        ops.append(["dir", plan.cwd])
    return ops
