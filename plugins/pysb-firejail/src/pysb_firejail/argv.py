"""Compile a :class:`~pysb_core.plan.LaunchPlan` into a firejail command line.

Pure: every host fact comes in through :class:`~pysb_firejail.hostfs.HostLayout`, so the
unit tests can check the command for any host. How the view of the file system is made
(firejail applies whitelists first, then the read-only / read-write / blacklist entries
in command-line order, a later one covering an earlier one):

1. ``--noprofile`` (no profile from /etc/firejail: only what is written here applies),
   hardening (``--caps.drop=all``, ``--nonewprivs``, ``--seccomp``,
   ``--restrict-namespaces`` unless the child set-up's seccomp filter refuses the same
   calls, ``--noroot`` when not root), ``--private-dev``, an IPC namespace, ``--net=none``
   unless a filtered network is configured;
2. every top-level entry of ``/``: the system (``/usr``, ``/bin``...) stays; a directory
   holding an exposure is reduced to its exposures (``--whitelist``); any other
   directory or file is ``--blacklist``-ed. ``/etc`` is reduced to what CPython and glibc
   read, ``/run`` to firejail's own directory, ``/tmp`` to a private tmpfs (plus the
   exposures below it);
3. ``--read-only=/`` and every whitelisted tree read-only, then the exposures, shallowest
   first, read-only or read-write (a read-only directory inside a read-write one stays
   read-only whatever the order of the profile's lines);
4. the profile files read-only again, then the ignored paths ``--blacklist``-ed;
5. ``--read-only=/`` for root; a normal user gets one entry per visible top-level
   directory instead (section 3), which keeps firejail's ``--noroot`` user namespace.

The environment is *not* on this command line (``--env`` values would be world-readable
in ``/proc/PID/cmdline``): firejail hands its own environment to the program, and the
provider's child set-up removes what firejail adds.

Why one module: firejail applies its options in command-line order, a later one covering an
earlier one, so the sections above are one ordered computation; each function builds one
section, and the order they are called in by :func:`build_argv` is the security argument. Pure,
with its host facts in :mod:`pysb_firejail.hostfs`.
"""

from __future__ import annotations

import os
import posixpath

from pysb_core.providerkit import SandboxError, field, is_within, mutable_record
from pysb_firejail.hostfs import (
    ALWAYS_HIDDEN,
    ETC_BASE,
    ETC_HOSTS,
    ETC_NETWORK,
    FIREJAIL_RUN,
    SPECIAL,
    SYSTEM,
    HostLayout,
    depth,
    top_of,
)

TYPE_CHECKING = False  # imported by every firejail run: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Sequence

    from pysb_core.providerkit import Exposure, LaunchPlan, Limits

#: Characters firejail would misread in a path option (``,`` separates ``--bind``
#: arguments, glob characters are expanded) or that cannot be passed at all.
_UNSAFE = set(",*?[]\n\0")
#: The provider's child set-up (:mod:`pysb_firejail.child`).
CHILD_MODULE = "pysb_firejail.child"
#: Top-level directories firejail refuses to whitelist or blacklist.
_RESERVED = ("/proc", "/sys", "/dev")
#: firejail always mounts an empty tmpfs here (``/var/lock`` is a link to it), with no
#: option to keep the host's directory: an exposure below would silently be empty.
_LOCK_DIRS = ("/run/lock", "/var/lock")
#: firejail replaces it with a skeleton tmpfs unless ``--writable-var-log``, which makes
#: the host's directory visible *and writable*: the builder then remounts it read-only.
VAR_LOG = "/var/log"


@mutable_record
class FirejailCommand:
    """The built command plus what ``describe`` shows about it."""

    argv: list[str]
    whitelisted: list[str] = field(default_factory=list)
    blacklisted: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    cwd: str = "/"
    notes: list[str] = field(default_factory=list)


def _child_setup_args(plan: LaunchPlan) -> list[dict[str, object]]:
    """The arguments of each of the plan's calls of the provider's child set-up."""
    return [s.args for s in plan.child_setups if s.module == CHILD_MODULE and s.function == "setup"]


def child_restricts_namespaces(plan: LaunchPlan) -> bool:
    """The plan's child set-up loads the namespace refusals (``pysb_firejail.child``)."""
    return any(args.get("namespaces") is True for args in _child_setup_args(plan))


def child_reaps_orphans(plan: LaunchPlan) -> bool:
    """The plan's child set-up starts the reaper (``pysb_firejail.child``), which kills
    what the program leaves behind without ``--deterministic-shutdown``'s 100 ms sleep."""
    return any(args.get("reaper") is not None for args in _child_setup_args(plan))


def _check_paths(exposures: Sequence[Exposure]) -> None:
    problems = []
    for e in exposures:
        p = e.path
        if not posixpath.isabs(p) or posixpath.normpath(p) != p:
            problems.append(f"exposure '{p}' ({e.source}) must be a normalised absolute path")
        elif _UNSAFE & set(p):
            problems.append(
                f"exposure '{p}' ({e.source}) contains a character firejail would misread "
                "(',', '*', '?', '[', ']' or a newline)"
            )
        elif any(is_within(p, r) for r in _LOCK_DIRS):
            problems.append(
                f"exposure '{p}' ({e.source}) lies under /run/lock, where firejail always "
                "mounts an empty directory of its own; move it, or use another provider"
            )
        elif p != "/" and any(is_within(p, r) for r in _RESERVED):
            problems.append(
                f"exposure '{p}' ({e.source}) lies under {', '.join(_RESERVED)}, which "
                "firejail manages itself"
            )
    if problems:
        raise SandboxError("firejail cannot build this sandbox:\n  " + "\n  ".join(problems))


def limit_options(limits: Limits) -> list[str]:
    """``limits`` as firejail rlimits (the bootstrap sets the same values again inside).

    ``cpu-time`` gets one second of slack in the hard limit: firejail sets soft = hard,
    and at the hard limit the kernel sends SIGKILL; the bootstrap lowers the soft limit
    back to the profile's value, so the program gets SIGXCPU (exit 152), as SPEC says.
    """
    out = []
    if limits.memory is not None:
        out.append(f"--rlimit-as={limits.memory}")
    if limits.processes is not None:
        out.append(f"--rlimit-nproc={limits.processes}")
    if limits.open_files is not None:
        out.append(f"--rlimit-nofile={limits.open_files}")
    if limits.cpu_time is not None:
        out.append(f"--rlimit-cpu={limits.cpu_time + 1}")
    return out


def build_argv(
    plan: LaunchPlan,
    layout: HostLayout,
    *,
    firejail: str = "firejail",
    as_root: bool = True,
    hostname: str | None = None,
    network: list[str] | None = None,
    own_netns: bool = False,
) -> FirejailCommand:
    """Return the firejail command that runs ``plan.argv`` under ``plan``'s view.

    ``network`` is the list of firejail network options when a filtered network is in
    force (``--net=BRIDGE --netfilter=FILE``); ``None`` means no network: ``--net=none``,
    or no option at all with ``own_netns`` (the caller starts firejail in a new network
    namespace of its own, :mod:`pysb_firejail.netns`). ``--restrict-namespaces`` is left
    out only when the plan carries the provider's child set-up with ``namespaces`` (it
    loads the same refusals itself: :func:`pysb_core.linux.seccomp.install`).
    """
    if not plan.argv or not posixpath.isabs(plan.argv[0]):
        raise SandboxError(
            "firejail needs the program as an absolute path (got "
            f"{plan.argv[0] if plan.argv else 'nothing'!r}) so that sys.executable is right"
        )
    exposures = list(plan.exposures)
    _check_paths(exposures)
    # A renamed exposure (SRC:DEST) is shown under SRC: the rename is the Python layer's
    # path translation (``Capability.RENAME`` is not declared).
    argv = [firejail, *_isolation(plan, as_root, hostname, network, own_netns)]
    cmd = FirejailCommand(argv=argv)
    paths = [e.path for e in exposures]
    if "/run" in paths:
        raise SandboxError(
            "firejail cannot expose /run as a whole (it needs /run/firejail for itself); "
            "expose the parts of /run the program needs"
        )
    view = _View(
        exposures=exposures,
        paths=paths,
        root_exposed=any(e.path == "/" for e in exposures),
        root_writable=any(e.path == "/" and e.writable for e in exposures),
    )
    #: /tmp is a private tmpfs unless the profile exposes it (or all of /).
    view.tmp_private = not view.root_exposed and "/tmp" not in paths
    #: The host's /var/log is visible (firejail's skeleton would stand in for it).
    view.var_log_visible = view.root_exposed or any(
        is_within(p, VAR_LOG) or is_within(VAR_LOG, p) for p in paths
    )
    if view.var_log_visible:
        argv.append("--writable-var-log")
    _whitelist(cmd, view, layout, network=network is not None)
    # ``--read-only=/`` remounts only the root mount itself (firejail's remount of "/"
    # does not recurse), but it first bind-mounts the whole tree onto itself, doubling
    # the mount table that every later step reads: it goes last (section 5) unless a
    # ``--read-write`` below needs it first (see ``_exposure_states``).
    ro_at = len(argv)
    done = _read_only_tops(cmd, view, layout, as_root=as_root)
    root_first = _exposure_states(cmd, view, done, as_root=as_root)
    _protect_and_hide(cmd, view, plan, layout)
    # -- 5. the unexposed top-level entries, then the root mount read-only ---------------
    # After the remounts above: each of those reads /proc/self/mountinfo, which these
    # entries would lengthen (blacklists cost a bind mount each, no remount).
    argv += [f"--blacklist={top}" for top in cmd.blacklisted]
    # Only for root: firejail makes / read-only by binding the whole tree over itself, and
    # a process whose root directory is then covered by a mount counts as chrooted for
    # the kernel, which refuses it a user namespace: firejail's --noroot (a normal user's
    # sandbox) would silently start without one (RLIMIT_NPROC would then count every
    # process of the user on the host, not those of the sandbox). A normal user cannot
    # write to / itself; the visible top-level directories got their own entries above.
    if not view.root_writable and as_root:
        if root_first:
            argv.insert(ro_at, "--read-only=/")
        else:
            argv.append("--read-only=/")
    _working_directory(cmd, view, plan)
    # No "--" before the program: firejail 0.9.72 would then start it through
    # ``/bin/bash -c`` (one more exec, and bash reads $BASH_ENV). Option parsing stops
    # at the first argument not starting with "-", and the program is an absolute path.
    argv += plan.argv
    return cmd


@mutable_record
class _View:
    """What one build knows about the profile's view of the file system."""

    exposures: list[Exposure]
    paths: list[str]
    root_exposed: bool
    root_writable: bool
    tmp_private: bool = False
    var_log_visible: bool = False


def _isolation(
    plan: LaunchPlan,
    as_root: bool,
    hostname: str | None,
    network: list[str] | None,
    own_netns: bool,
) -> list[str]:
    """-- 1. namespaces, hardening, network, inherited descriptors and limits."""
    argv = [
        "--noprofile",
        "--quiet",
        "--caps.drop=all",
        "--nonewprivs",
        "--seccomp",
        "--private-dev",
        "--ipc-namespace",
        # firejail's status is the program's (not that of the last process to exit).
        "--deterministic-exit-code",
        # firejail's default tmpfs on /var/tmp would hide a project, venv or working
        # directory there (whitelisted paths below it vanish): the profile says what of
        # /var is visible (blacklisted, whitelisted or exposed), not firejail's defaults.
        "--keep-var-tmp",
    ]
    if not child_reaps_orphans(plan):
        # The sandbox ends with the program: orphans (a double-forked daemon) are killed
        # instead of being waited for (firejail then sleeps 100 ms at every exit).
        argv.insert(argv.index("--deterministic-exit-code") + 1, "--deterministic-shutdown")
    if not child_restricts_namespaces(plan):
        argv.insert(argv.index("--seccomp") + 1, "--restrict-namespaces")
    if not as_root:
        argv.append("--noroot")  # as root firejail refuses it ("not available")
    if hostname:
        argv.append(f"--hostname={hostname}")
    if network is not None:
        argv += network
    elif not own_netns:
        argv.append("--net=none")
    if plan.pass_fds:
        argv.append("--keep-fd=" + ",".join(str(fd) for fd in sorted(set(plan.pass_fds))))
    argv += limit_options(plan.policy.limits)
    return argv


def _whitelist(cmd: FirejailCommand, view: _View, layout: HostLayout, *, network: bool) -> None:
    """-- 2. the view: whitelist or blacklist each top-level entry."""
    argv, paths = cmd.argv, view.paths
    whitelist: list[str] = []
    if not view.root_exposed:
        for top, kind in sorted(layout.top_level.items()):
            if top in SYSTEM or top in SPECIAL or kind == "link":
                continue  # links point into the system or at entries handled on their own
            inside = [p for p in paths if is_within(p, top)]
            if top in inside and top != "/sys":
                continue  # the whole directory is exposed: keep it as it is
            if inside and top != "/sys":
                whitelist += inside
            else:
                cmd.blacklisted.append(top)  # emitted last (section 5)
        if "/etc" not in paths:
            whitelist += [p for p in ETC_BASE if p in layout.etc]
            if network:
                whitelist += [p for p in ETC_NETWORK if p in layout.etc]
            if ETC_HOSTS in layout.etc:  # replaced by --hosts-file when names are pinned
                whitelist.append(ETC_HOSTS)
            whitelist += [p for p in paths if is_within(p, "/etc")]
        if view.tmp_private:
            tmp = [p for p in paths if is_within(p, "/tmp")]
            whitelist += tmp
            if not tmp:
                argv.append("--private-tmp")
    # /run is reduced to firejail's own directory (and exposures below /run) even when
    # all of / is exposed: the host's /run is a separate, writable mount that firejail
    # cannot make read-only without breaking its own start.
    if layout.firejail_run:
        whitelist.append(FIREJAIL_RUN)
    whitelist += [p for p in paths if is_within(p, "/run")]
    if whitelist:
        # A path below another whitelisted one is already visible through it.
        unique = set(whitelist)
        kept = sorted(p for p in unique if not any(is_within(p, q) and p != q for q in unique))
        argv += [f"--whitelist={p}" for p in kept]
        cmd.whitelisted = kept


def _read_only_tops(
    cmd: FirejailCommand, view: _View, layout: HostLayout, *, as_root: bool
) -> list[str]:
    """-- 3a. read-only everywhere: the whitelisted tops, the other file systems in the
    visible tree, /var/log, and (for a normal user) each visible top-level directory.
    Returns the places made read-only."""
    argv = cmd.argv
    # /tmp stays a writable private tmpfs; /run holds only firejail's own directory,
    # which firejail itself writes to while it sets the sandbox up.
    tops = sorted({top_of(p) for p in cmd.whitelisted} - {"/tmp", "/run"})
    argv += [f"--read-only={t}" for t in tops]
    if FIREJAIL_RUN in cmd.whitelisted and as_root:
        # The host's own /run/firejail, bound in: read-only, or a root program could
        # write into firejail's bookkeeping on the host. Its mnt/ is this sandbox's own
        # tmpfs, which firejail writes to while it finishes the set-up. Not for a normal
        # user: firejail ignores a user's --read-write there (mnt/ would stay read-only
        # and its start fail: "cannot save umask"), and the host's directory is root's,
        # mode 0755: the user's program cannot write to it anyway.
        argv += [f"--read-only={FIREJAIL_RUN}", f"--read-write={FIREJAIL_RUN}/mnt"]
    # Other file systems mounted in the visible part of the tree (a separate /usr...):
    # the read-only remount of / stops at their mount points.
    hidden_tops = set(cmd.blacklisted)
    done: list[str] = ["/", *tops]
    for m in sorted(layout.mounts, key=depth):
        private = ("/run", "/tmp") if view.tmp_private else ("/run",)
        if any(is_within(m, r) for r in (*_RESERVED, *private, *hidden_tops)):
            continue
        if any(is_within(m, d) and (d != "/" or m == "/") for d in done):
            continue
        argv.append(f"--read-only={m}")
        done.append(m)
    # --writable-var-log leaves the host's /var/log writable (its own bind mount): back to
    # read-only, which the exposures below then widen where the profile says.
    if view.var_log_visible and not any(
        e.writable and is_within(VAR_LOG, e.path) for e in view.exposures
    ):
        argv.append(f"--read-only={VAR_LOG}")
        done.append(VAR_LOG)
    if not as_root and not view.root_writable:
        # No --read-only=/ for a normal user (section 5): each visible top-level
        # directory is made read-only on its own instead.
        covered = {*tops, *cmd.blacklisted, *_RESERVED, "/run"}
        if view.tmp_private:
            covered.add("/tmp")
        rw_tops = {e.path for e in view.exposures if e.writable}
        for top, kind in sorted(layout.top_level.items()):
            if kind == "dir" and top not in covered and top not in rw_tops:
                argv.append(f"--read-only={top}")
                done.append(top)
    return done


def _exposure_states(
    cmd: FirejailCommand, view: _View, done: Sequence[str], *, as_root: bool
) -> bool:
    """-- 3b. each exposure as the profile says, where it differs from what it inherits.
    Returns whether a ``--read-write`` needs the root mount read-only first."""
    # Each remount costs firejail about a millisecond and a half, so only the exposures
    # whose state differs from what they inherit get an entry of their own (read-only is
    # recursive: below a read-only top, every whitelisted path is read-only already).
    # What a path whitelisted into the private /tmp or /run inherits is its source mount's
    # state (writable on the host, read-only when pysb made the root mount read-only
    # before firejail started: pysb_firejail.mountns), so those always get an entry.
    state: dict[str, bool] = {}
    root_first = False
    for e in sorted(view.exposures, key=lambda e: (depth(e.path), e.writable)):
        if e.path == "/":
            continue  # the root mount's state is section 5's
        parents = [p for p in state if is_within(e.path, p) and p != e.path]
        inherited: bool | None
        if parents:
            inherited = state[max(parents, key=depth)]
        elif (view.tmp_private and is_within(e.path, "/tmp")) or is_within(e.path, "/run"):
            inherited = None  # the source mount's: say it
        elif as_root:
            inherited = view.root_writable
        else:  # the root mount stays writable: read-only only below a read-only entry
            inherited = not any(is_within(e.path, d) for d in done if d != "/")
        if e.path in state:
            inherited = state[e.path]
        state[e.path] = e.writable or state.get(e.path, False)
        if state[e.path] != inherited:
            cmd.argv.append(f"--read-write={e.path}" if e.writable else f"--read-only={e.path}")
            # firejail skips a --read-write whose target is writable already: one that
            # still lies on the root mount (not inside a whitelisted tree, which the
            # read-only tops above cover) only works after the root mount is read-only.
            if e.writable and not any(is_within(e.path, w) for w in cmd.whitelisted):
                root_first = True
    return root_first


def _protect_and_hide(
    cmd: FirejailCommand, view: _View, plan: LaunchPlan, layout: HostLayout
) -> None:
    """-- 4. profile files read-only, ignored paths blacklisted."""
    for host in sorted({layout.resolved.get(p, p) for p in plan.protected}):
        under_rw = any(e.writable and is_within(host, e.path) for e in view.exposures)
        if host in layout.existing and under_rw:
            cmd.argv.append(f"--read-only={host}")
    hidden: set[str] = set()
    for host in (*plan.hidden, *(p for p in ALWAYS_HIDDEN if p in layout.etc)):
        real = layout.resolved.get(host, host)
        if _UNSAFE & set(real):
            raise SandboxError(
                f"firejail cannot hide '{real}': its name holds a character firejail would "
                "misread as a pattern"
            )
        if real not in layout.existing and host not in ALWAYS_HIDDEN:
            continue
        if view.root_exposed or any(is_within(real, p) for p in [*view.paths, *cmd.whitelisted]):
            hidden.add(real)
    for real in sorted(hidden, key=lambda p: (depth(p), p)):
        if any(is_within(real, h) and real != h for h in cmd.hidden):
            continue
        cmd.argv.append(f"--blacklist={real}")
        cmd.hidden.append(real)


def _working_directory(cmd: FirejailCommand, view: _View, plan: LaunchPlan) -> None:
    """The working directory, when the sandbox can see it; else ``/`` (with a note).

    Also visible: an ancestor of a whitelisted path (firejail creates it, holding only
    the whitelisted entries), so relative paths into the exposures work from there."""
    visible = (
        view.root_exposed
        or any(is_within(plan.cwd, p) for p in [*view.paths, *SYSTEM])
        or any(is_within(w, plan.cwd) for w in cmd.whitelisted)
    )
    if visible and not any(is_within(plan.cwd, h) for h in cmd.hidden):
        cmd.cwd = plan.cwd
    else:
        cmd.cwd = "/"
        cmd.notes.append(
            f"the working directory {plan.cwd} is not exposed: the program starts in /"
        )
    cmd.argv.append(f"--private-cwd={cmd.cwd}")


def uid_is_root() -> bool:
    return os.getuid() == 0
