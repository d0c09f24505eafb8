"""Compile a :class:`~pysb_core.plan.LaunchPlan` into a bubblewrap command line.

Pure: every host fact comes in through :class:`~pysb_bwrap.hostfs.HostLayout`, so the
unit tests can check the command for any host. The order of the mount arguments matters
(bwrap applies them in order, a later mount covers an earlier one):

1. namespaces and process hardening;
2. an exposure of ``/`` itself, if the profile asks for one;
3. the system: ``/usr`` read-only, ``/bin``, ``/lib*``... as on the host, the parts of
   ``/etc`` CPython and glibc need, ``/proc``, ``/dev``, a private ``/tmp``;
4. the exposures, shallowest target first (a read-only directory inside a read-write one
   stays read-only, whatever the order of the profile's lines);
5. the masks over ignored paths, then the read-only rebinds of the profile files;
6. the working directory (created empty when it is not exposed), and ``/`` made read-only
   so that a write outside the read-write exposures fails instead of landing in bwrap's
   throw-away root.

The environment is *not* on this command line: ``--setenv NAME VALUE`` would show every
value in ``/proc/PID/cmdline``, which any user of the host can read. bwrap hands its own
environment to the program, so the provider starts bwrap with exactly ``plan.env``.

Why one module: bwrap applies its mount arguments in order, a later mount covering an earlier
one, so the six steps above are one ordered computation; each function builds one step and
:func:`build_argv` calls them in that order, which is the security argument. Pure, with its host
facts in :mod:`pysb_bwrap.hostfs`.
"""

from __future__ import annotations

import os
import posixpath

from pysb_bwrap.hostfs import (
    TOP_LEVEL_SYSTEM,
    HostLayout,
    depth,
)
from pysb_core.providerkit import (
    ETC_BASE,
    ETC_HOSTS,
    ETC_NETWORK,
    ETC_RESOLV,
    Record,
    SandboxError,
    field,
    is_within,
    mutable_record,
)

TYPE_CHECKING = False  # typing costs ~1.5 ms at every start
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pysb_core.providerkit import Exposure, LaunchPlan

#: Where the system lives read-only inside, bound from the same host path.
SYSTEM_RO = ("/usr",)
#: Mounted by bwrap itself; no exposure may land on or below them.
RESERVED = ("/proc", "/dev")
DEFAULT_HOSTNAME = "pysb"


@mutable_record
class BwrapCommand(Record):
    """The built command plus what the provider must arrange around it."""

    argv: list[str]
    #: Host paths of ignored files/directories actually masked (for ``describe``).
    masked: list[str] = field(default_factory=list)
    #: The working directory as the sandbox sees it.
    cwd: str = "/"
    #: True when a mask needs the provider's empty placeholder file.
    needs_empty_file: bool = False


#: /proc entries that must never be writable from inside (docker/runc keep the same list).
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")


def sandbox_path(host_path: str, exposures: Sequence[Exposure]) -> str | None:
    """Where ``host_path`` appears inside, through the exposure that covers it most
    closely (renames applied); the system trees map to themselves; ``None`` if invisible."""
    best: Exposure | None = None
    for e in exposures:
        if is_within(host_path, e.path) and (best is None or len(e.path) > len(best.path)):
            best = e
    if best is not None:
        rest = host_path[len(best.path) :].lstrip("/") if best.path != "/" else host_path[1:]
        return posixpath.join(best.target, rest) if rest else best.target
    if any(is_within(host_path, root) for root in SYSTEM_RO):
        return host_path
    return None


def covering_exposure(host_path: str, exposures: Sequence[Exposure]) -> Exposure | None:
    best: Exposure | None = None
    for e in exposures:
        if is_within(host_path, e.path) and (best is None or len(e.path) > len(best.path)):
            best = e
    return best


def _check_targets(exposures: Sequence[Exposure]) -> None:
    problems = []
    for e in exposures:
        for p, what in ((e.path, "path"), (e.target, "target")):
            if not posixpath.isabs(p) or posixpath.normpath(p) != p:
                problems.append(
                    f"exposure {what} '{p}' ({e.source}) must be a normalised absolute path"
                )
        if any(is_within(e.target, r) for r in RESERVED):
            problems.append(
                f"exposure target '{e.target}' ({e.source}) lies under {', '.join(RESERVED)}, "
                "which bwrap mounts itself"
            )
        if (
            e.renamed
            and any(is_within(e.target, r) for r in SYSTEM_RO)
            and not os.path.exists(e.target)
        ):
            problems.append(
                f"renamed exposure target '{e.target}' ({e.source}) would need a new directory "
                "inside the read-only /usr; choose a target outside /usr"
            )
    if problems:
        raise SandboxError("bwrap cannot build this sandbox:\n  " + "\n  ".join(problems))


def _file_or_bind(
    source: str | int,
    target: str,
    fd: int | None,
    mounts: list[tuple[str, bool]],
    *,
    on_host_root: bool = False,
) -> list[str]:
    """Arguments putting ``source`` (a host path, or an fd with the content) at ``target``,
    read-only: a copy when there is an fd, else a bind (recorded in ``mounts``).
    ``on_host_root``: ``/`` is a host directory (``expose-ro: [/]``), where bwrap cannot
    create a file (read-only) or should not (read-write: it would land on the host)."""
    if fd is None and isinstance(source, int):
        fd = source
    if fd is not None:
        if on_host_root:  # no new file in a host directory: a bind of the content on top
            return ["--ro-bind-data", str(fd), target]
        return ["--perms", "0444", "--file", str(fd), target]
    assert isinstance(source, str)
    mounts.append((target, source == target))
    return ["--ro-bind", source, target]


def etc_copies(plan: LaunchPlan, layout: HostLayout, *, network: bool) -> list[str]:
    """The host /etc files :func:`build_argv` would bind that may be copies instead: the
    regular files it shows (not directories, not the localtime link, nothing an exposure
    covers, nothing when the profile exposes ``/``). With a network, the provider
    generates ``/etc/hosts`` and ``/etc/resolv.conf`` itself; so does core for pins."""
    if any(e.target == "/" for e in plan.exposures):
        return []
    wanted = [*ETC_BASE]
    if network:
        wanted += [p for p in ETC_NETWORK if p != ETC_RESOLV]
    elif plan.hosts_file is None:
        wanted.append(ETC_HOSTS)
    covering = [e.target for e in plan.exposures]
    return [
        p
        for p in wanted
        if p in layout.etc
        and p not in layout.dirs
        and not (p == "/etc/localtime" and p in layout.symlinks)
        and not any(is_within(p, c) for c in covering)
    ]


def _redundant(target: str, mounts: Sequence[tuple[str, bool]]) -> bool:
    """True when the deepest mount so far that covers ``target`` binds the host's tree at
    the same path, read-only: a read-only bind of the host's ``target`` there would show
    exactly what is already shown (bwrap binds recursively, submounts included, and makes
    them all read-only). Only for canonical host paths: through a symlink the two would
    differ."""
    deepest: tuple[str, bool] | None = None
    for mount in mounts:
        if is_within(target, mount[0]) and (
            deepest is None or depth(mount[0]) >= depth(deepest[0])
        ):
            deepest = mount
    return deepest is not None and deepest[1]


def build_argv(
    plan: LaunchPlan,
    layout: HostLayout,
    *,
    bwrap: str = "bwrap",
    hostname: str = DEFAULT_HOSTNAME,
    new_session: bool = True,
    network: bool = False,
    empty_file: str = "/nonexistent/pysb-empty",
    info_fd: int | None = None,
    block_fd: int | None = None,
    hosts_file: str | int | None = None,
    resolv_file: str | int | None = None,
    disable_userns: bool = True,
    seccomp_fd: int | None = None,
    copies: Mapping[str, int] | None = None,
    json_status_fd: int | None = None,
    exposure_fds: Mapping[str, int] | None = None,
) -> BwrapCommand:
    """Return the bwrap command that runs ``plan.argv`` under ``plan``'s view of the system.

    ``network`` says whether a network allow rule is in force (then the resolver's /etc
    files are visible; the filtering itself is the caller's business, through ``info_fd``
    and ``block_fd``). ``empty_file`` is a host file of mode 000 bound over ignored files.
    ``hosts_file`` / ``resolv_file`` replace the host's ``/etc/hosts`` / ``/etc/resolv.conf``
    (generated from the pinned names and the filtered network's resolver): a host path to
    bind, or an fd whose content bwrap copies. ``copies`` maps host /etc files (from
    :func:`etc_copies`) to fds holding their content: each becomes a read-only file of the
    sandbox's root instead of a bind mount (bwrap reads the whole mount table for every
    bind; a copy costs no mount). ``exposure_fds`` maps exposure paths to descriptors
    opened without following links (:func:`pysb_core.linux.nofollow.open_dir_nofollow`): those
    are bound with ``--bind-fd`` / ``--ro-bind-fd``, so the mount is of the very directory
    the profile named, whatever happened to its path since.
    """
    if not plan.argv or not posixpath.isabs(plan.argv[0]):
        raise SandboxError(
            "bwrap needs the interpreter as an absolute path (got "
            f"{plan.argv[0] if plan.argv else 'nothing'!r}) so that sys.executable is right"
        )
    exposures = list(plan.exposures)
    _check_targets(exposures)
    argv = [
        bwrap,
        *_isolation(
            hostname=hostname,
            new_session=new_session,
            disable_userns=disable_userns,
            seccomp_fd=seccomp_fd,
            info_fd=info_fd,
            block_fd=block_fd,
            json_status_fd=json_status_fd,
        ),
    ]
    root_exposed = [e for e in exposures if e.target == "/"]
    for e in sorted(root_exposed, key=lambda e: e.writable):
        argv += ["--bind" if e.writable else "--ro-bind", e.path, "/"]
    # Every mount made, in order: (target, whether it shows the host's tree at the same
    # path read-only). bwrap reads the whole mount table for each bind (~0.15 ms each),
    # so a bind that would change nothing in the view is left out (see _redundant).
    mounts: list[tuple[str, bool]] = [(e.target, False) for e in root_exposed]
    argv += _system(
        plan,
        layout,
        root_exposed,
        mounts,
        network=network,
        # The root is a host directory then: a copy would be written into it.
        copies={} if root_exposed else dict(copies or {}),
        hosts_file=hosts_file,
        resolv_file=resolv_file,
    )
    argv += _exposures(exposures, root_exposed, layout, mounts, exposure_fds or {})
    mask_argv, masked, masked_inside, needs_empty = _masks(plan, layout, empty_file)
    argv += mask_argv
    argv += _protected(plan, layout, masked_inside)
    # -- working directory, then a read-only root ---------------------------------------
    cwd = sandbox_path(plan.cwd, exposures)
    if cwd is None:
        cwd = plan.cwd
        argv += ["--dir", cwd]
    if not root_exposed:
        argv += ["--remount-ro", "/"]
    argv += ["--chdir", cwd, "--", *plan.argv]
    return BwrapCommand(argv=argv, masked=masked, cwd=cwd, needs_empty_file=needs_empty)


def _isolation(
    *,
    hostname: str,
    new_session: bool,
    disable_userns: bool,
    seccomp_fd: int | None,
    info_fd: int | None,
    block_fd: int | None,
    json_status_fd: int | None,
) -> list[str]:
    """Namespaces, process hardening and bwrap's status descriptors."""
    argv = [
        # user, ipc, pid, net, uts, cgroup: nothing of the host's is shared.
        "--unshare-all",
        "--unshare-user",
        "--hostname",
        hostname,
        "--die-with-parent",
        "--cap-drop",
        "ALL",
    ]
    if disable_userns:
        # The program cannot create nested user namespaces (kernel attack surface).
        argv.append("--disable-userns")
    if new_session:
        # setsid(): no controlling terminal, so no TIOCSTI injection into the user's shell.
        argv.append("--new-session")
    if seccomp_fd is not None:
        # pysb_core.linux.seccomp (ptrace, vsock, TIOCSTI...); also sets PR_SET_NO_NEW_PRIVS.
        argv += ["--seccomp", str(seccomp_fd)]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    if block_fd is not None:
        argv += ["--block-fd", str(block_fd)]
    if json_status_fd is not None:
        argv += ["--json-status-fd", str(json_status_fd)]
    return argv


def _system(
    plan: LaunchPlan,
    layout: HostLayout,
    root_exposed: Sequence[Exposure],
    mounts: list[tuple[str, bool]],
    *,
    network: bool,
    copies: Mapping[str, int],
    hosts_file: str | int | None,
    resolv_file: str | int | None,
) -> list[str]:
    """The system, read-only: /usr, the top-level trees and links, the /etc files CPython
    and glibc need, /proc, /dev and a private /tmp (recorded in ``mounts``)."""
    # Exposures mounted after the system files, over them: what they cover is not bound.
    covering = [
        e.target
        for e in plan.exposures
        if e.target != "/" and not (e.path in layout.exposure_links and not e.renamed)
    ]
    # A host directory at / (``expose-ro: [/]``) holds the system already: /bin and the
    # other top-level links exist there (bwrap cannot make a link over them: "Can't make
    # symlink at /bin: File exists"), and /usr is the host's. Read-write, /usr is bound
    # read-only on top as usual.
    host_root = any(e.path == "/" for e in root_exposed)
    ro_root = host_root and not any(e.writable for e in root_exposed)
    argv: list[str] = []
    for path in SYSTEM_RO:
        if ro_root:
            continue
        argv += ["--ro-bind", path, path]
        mounts.append((path, True))
    for path in TOP_LEVEL_SYSTEM:
        kind = layout.top_level.get(path)
        if kind is None or host_root:
            continue
        if kind == "dir":
            argv += ["--ro-bind", path, path]
            mounts.append((path, True))
        else:
            argv += ["--symlink", kind, path]
    etc_wanted = [*ETC_BASE, *(ETC_NETWORK if network else ())]
    for path in etc_wanted:
        if path not in layout.etc or (path == ETC_RESOLV and resolv_file is not None):
            continue
        if host_root:
            continue  # the host's /etc is there already
        link = layout.symlinks.get(path)
        if link is not None and path == "/etc/localtime":
            # Keep the link: tz libraries read the zone's name from its target.
            argv += ["--symlink", link, path]
        elif not any(is_within(path, c) for c in covering):
            argv += _file_or_bind(path, path, copies.get(path), mounts)
    # The plan's generated hosts file agrees with the pinned names (SPEC §6).
    hosts = hosts_file if hosts_file is not None else plan.hosts_file
    if hosts is None and ETC_HOSTS in layout.etc:
        hosts = copies.get(ETC_HOSTS, ETC_HOSTS)
    if hosts is not None:
        argv += _file_or_bind(hosts, ETC_HOSTS, None, mounts, on_host_root=bool(root_exposed))
    if network and resolv_file is not None:
        argv += _file_or_bind(
            resolv_file, ETC_RESOLV, None, mounts, on_host_root=bool(root_exposed)
        )
    argv += ["--proc", "/proc", "--dev", "/dev"]
    mounts += [("/proc", False), ("/dev", False)]
    # /dev/shm: a private tmpfs of its own (POSIX semaphores and shared memory,
    # multiprocessing), bounded like /tmp (``limits: tmp``); bwrap's /dev has an unbounded one.
    size = str(plan.policy.limits.tmp_bytes())
    argv += ["--perms", "1777", "--size", size, "--tmpfs", "/dev/shm"]
    # The kernel's global knobs: a root program is the host's uid 0 inside (bwrap keeps the
    # uid), and /proc/sys files check the uid, not a capability -- kernel.core_pattern would
    # run a program of the sandbox's choosing as root on the host. Read-only, as in runc.
    for knob in PROC_READ_ONLY:
        argv += ["--ro-bind-try", knob, knob]
    # The program's private temporary directory (pysb_core.launch.tmpdir): always a fresh tmpfs
    # of ``limits: tmp`` bytes (writing past it is ENOSPC); exposures below /tmp are bound
    # onto it below.
    argv += ["--perms", "1777", "--size", size, "--tmpfs", "/tmp"]
    mounts.append(("/tmp", False))
    return argv


def _exposures(
    exposures: Sequence[Exposure],
    root_exposed: Sequence[Exposure],
    layout: HostLayout,
    mounts: list[tuple[str, bool]],
    exposure_fds: Mapping[str, int],
) -> list[str]:
    """The exposures: shallowest first, read-write after read-only at equal target."""
    argv: list[str] = []
    bound: list[str] = [*SYSTEM_RO, *(e.target for e in root_exposed)]
    fds_used: set[int] = set()
    fd_bound: set[tuple[str, bool]] = set()
    for e in sorted(
        (e for e in exposures if e.target != "/"), key=lambda e: (depth(e.target), e.writable)
    ):
        link = layout.exposure_links.get(e.path)
        if link is not None and not e.renamed:
            # A link of the interpreter's chain: recreate it (its target is exposed on its
            # own), unless a directory bound above already shows it -- a mount there would
            # follow the link inside the sandbox.
            if not any(is_within(e.target, b) and b != e.target for b in bound):
                argv += ["--symlink", link, e.target]
                bound.append(e.target)
            continue
        same_ro = not e.writable and not e.renamed
        if same_ro and e.path in layout.canonical and _redundant(e.target, mounts):
            bound.append(e.target)
            continue
        if (e.target, e.writable) in fd_bound:
            continue  # the same exposure twice (the profile's and the caller's): bound once
        fd = exposure_fds.get(e.path)
        if fd is not None and fd not in fds_used:
            # bwrap closes a descriptor once it has bound it: each one is usable once
            argv += ["--bind-fd" if e.writable else "--ro-bind-fd", str(fd), e.target]
            fds_used.add(fd)
            fd_bound.add((e.target, e.writable))
        else:
            argv += ["--bind" if e.writable else "--ro-bind", e.path, e.target]
        bound.append(e.target)
        mounts.append((e.target, same_ro))
    return argv


def _masks(
    plan: LaunchPlan, layout: HostLayout, empty_file: str
) -> tuple[list[str], list[str], list[str], bool]:
    """Ignored paths masked by an unreadable placeholder: ``(argv, masked host paths,
    the same inside, whether the empty placeholder file is needed)``."""
    argv: list[str] = []
    masked: list[str] = []
    needs_empty = False
    targets = set()
    for host in {*plan.hidden, *layout.always_hidden}:
        # An ignored symlink: what must not be read is its target (canonical path), and
        # only if the sandbox can see it; a link to an unexposed path is dangling inside.
        targets.add(layout.resolved.get(host, host))
    masked_dirs: list[str] = []
    masked_inside: list[str] = []
    for host in sorted(targets, key=lambda p: (depth(p), p)):
        inside = sandbox_path(host, plan.exposures)
        if inside is None or any(is_within(inside, d) for d in masked_dirs):
            continue  # not visible anyway, or inside a directory already masked
        masked_inside.append(inside)
        if layout.is_dir(host):
            masked_dirs.append(inside)
            argv += ["--perms", "0000", "--tmpfs", inside, "--remount-ro", inside]
        else:
            argv += ["--ro-bind", empty_file, inside]
            needs_empty = True
        masked.append(host)
    return argv, masked, masked_inside, needs_empty


def _protected(plan: LaunchPlan, layout: HostLayout, masked_inside: Sequence[str]) -> list[str]:
    """The profile files under a read-write exposure, rebound read-only."""
    argv: list[str] = []
    for host in sorted({layout.resolved.get(p, p) for p in plan.protected}):
        cover = covering_exposure(host, plan.exposures)
        if cover is None or not cover.writable:
            continue
        inside = sandbox_path(host, plan.exposures)
        if inside is not None and not any(is_within(inside, m) for m in masked_inside):
            argv += ["--ro-bind-try", host, inside]
    return argv
