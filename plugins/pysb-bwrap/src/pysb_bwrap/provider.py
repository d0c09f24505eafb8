"""The ``bwrap`` provider class: compile the plan, start bwrap, attach the network.

The sandbox is a fresh mount namespace whose root holds only what the plan exposes (plus
read-only system trees and a handful of /etc files), and fresh user, pid, ipc, uts, cgroup
and network namespaces. Capabilities are dropped, nested user namespaces are disabled,
and the sandbox dies with pysb. See docs/providers.md#bwrap for the exact view.

Works with bubblewrap 0.8.0 (Debian 12): no ``--argv0`` is used; the interpreter is
exec'd by its absolute path, so ``sys.executable`` is right.
"""

from __future__ import annotations

import _signal as signal  # the C module: no enums built on the start path
import os

from pysb_bwrap import netlayer, options
from pysb_bwrap.argv import DEFAULT_HOSTNAME, BwrapCommand, build_argv, etc_copies
from pysb_bwrap.hostfs import scan_host
from pysb_bwrap.netsession import NetworkLaunch, Resources
from pysb_bwrap.probe import INSTALL_FIX, probe_bwrap
from pysb_core.providerkit import (
    Capability,
    ChildSetup,
    Exposure,
    LaunchSpec,
    Provider,
    ProviderStatus,
    ProviderUnavailableError,
    SandboxError,
    adopt_wrapper,
    hookimpl,
    seccomp_describe,
    seccomp_filter_bytes,
    watch_wrapper_setup,
)

#: The provider kit this plugin is written against (:mod:`pysb_core.kitversion`).
PYSB_PROVIDERKIT = "1.7"

TYPE_CHECKING = False  # typing costs ~1.5 ms at every start
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping
    from typing import Any

    from pysb_core.providerkit import LaunchPlan, Policy

BASE_CAPABILITIES = frozenset(
    {
        Capability.FILES,
        Capability.FILES_WRITE,
        Capability.IGNORE,
        Capability.RENAME,
        Capability.ENV,
        Capability.LIMITS,
    }
)


class BwrapProvider(Provider):
    """Bubblewrap namespaces; network allow rules through ``pysb_core.net.netns`` when present."""

    name = "bwrap"
    partial_pipes = True  # a local process: partial mode over two pipes
    description = "bubblewrap: private mount, user, pid, ipc, uts, cgroup and network namespaces"
    capabilities = BASE_CAPABILITIES | netlayer.NETWORK_CAPABILITIES
    install_hint = INSTALL_FIX
    #: bwrap itself and its init (PID 1 of the sandbox) are counted by the pids cgroup.
    own_processes = 2
    private_tmp = "/tmp"  # a tmpfs of its own (pysb_bwrap.argv)
    private_shm = "/dev/shm"  # a tmpfs of its own, bounded like /tmp (pysb_bwrap.argv)
    private_pts = "/dev/pts"  # --dev mounts a devpts instance of its own

    # -- configuration --------------------------------------------------------------

    @classmethod
    def validate_options(cls, options_: Mapping[str, Any]) -> list[str]:
        return options.validate(options_)

    # -- discovery ------------------------------------------------------------------

    def probe(self) -> ProviderStatus:
        return probe_bwrap()

    def enforced(self) -> frozenset[Capability]:
        return BASE_CAPABILITIES | netlayer.layer_usable()

    def preflight(self, plan: LaunchPlan) -> None:
        """What :meth:`launch` does before bwrap starts: the network filter, loaded into a
        throwaway namespace (``NetnsNetwork.preflight``), and the command (the mount plan)."""
        needs_network = netlayer.needs_layer(plan)
        if needs_network:
            netlayer.network_for(plan).preflight()
        seccomp = seccomp_filter_bytes() is not None
        self._command(
            plan,
            empty_file="<empty-file>",
            network=needs_network,
            seccomp=seccomp,
            seccomp_fd=-1 if seccomp else None,
        )

    def describe(self, plan: LaunchPlan) -> list[str]:
        lines = [seccomp_describe()]
        if not netlayer.needs_layer(plan):
            lines.append("network: own namespace, loopback only (no allow rule)")
        else:
            try:
                lines += netlayer.network_for(plan).describe()
            except SandboxError as exc:
                lines.append(f"network: REFUSED: {exc}")
        if shares_terminal(plan):
            lines.append(
                "session: shared with the terminal (a run on it: --new-session would break "
                "job control); TIOCSTI/TIOCLINUX refused by a seccomp filter"
            )
        try:
            cmd = self._command(
                plan,
                empty_file="<empty-file>",
                network=netlayer.needs_layer(plan),
                seccomp=seccomp_filter_bytes() is not None,
                seccomp_fd=-1 if seccomp_filter_bytes() is not None else None,
            )
        except SandboxError as exc:
            return [*lines, f"cannot build: {exc}"]
        shown = list(cmd.argv)
        for i, arg in enumerate(shown[:-1]):
            if arg in ("--seccomp", "--file"):
                shown[i + 1] = "FD"  # the filter, copies of /etc files: fds made at launch
        lines.append("command: " + " ".join(shown))
        return lines

    # -- launch ---------------------------------------------------------------------

    def _command(
        self,
        plan: LaunchPlan,
        *,
        empty_file: str,
        seccomp: bool = True,
        res: Resources | None = None,
        child_fds: list[int] | None = None,
        described: dict[int, tuple[str, Any]] | None = None,
        **kwargs: Any,
    ) -> BwrapCommand:
        """The command for ``plan``. With ``res``, the host /etc files are handed over as
        copies in memory files (their fds appended to ``child_fds``, and said in
        ``described``: ``LaunchSpec.ahead``); without, the command shows where they would
        go (``pysb check``)."""
        problems = options.validate(plan.provider_options)
        if problems:
            raise SandboxError("\n".join(problems))
        status = probe_bwrap()
        layout = scan_host((*plan.hidden, *plan.protected), tuple(e.path for e in plan.exposures))
        copies: dict[str, int] = {}
        for path in etc_copies(plan, layout, network=bool(kwargs.get("network"))):
            fd = res.copy(path) if res is not None else -1
            if fd is not None:
                copies[path] = fd
                if child_fds is not None:
                    child_fds.append(fd)
                if described is not None:
                    described[fd] = ("copy", path)
        if res is not None and _binds_fds(status.version or ""):
            kwargs["exposure_fds"] = _exposure_fds(plan, res, child_fds)
            if described is not None:
                described.update((fd, ("dir", p)) for p, fd in kwargs["exposure_fds"].items())
        return build_argv(
            plan,
            layout,
            bwrap=str(status.details.get("binary", "bwrap")),
            hostname=str(plan.provider_options.get("hostname", DEFAULT_HOSTNAME)),
            # Without the TIOCSTI filter, even a run on the terminal gets its own session.
            new_session=not ((plan.interactive or plan.terminal) and seccomp),
            empty_file=empty_file,
            copies=copies,
            **kwargs,
        )

    def prepare(self, plan: LaunchPlan) -> LaunchSpec:
        status = probe_bwrap()
        if not status.available:
            raise ProviderUnavailableError(f"bwrap: {status.reason}", fix=status.fix)
        res = Resources()
        netlaunch: NetworkLaunch | None = None
        child_fds: list[int] = []
        # What each descriptor holds, so that the next run may start this command ahead
        # (pysb_core.launch.prestart compares all of it): not with a network layer (its
        # pipes take part in the set-up) or hidden paths (their mask is a file of this run).
        described: dict[int, tuple[str, Any]] | None = None
        try:
            net = netlayer.network_for(plan) if netlayer.needs_layer(plan) else None
            if net is None and not plan.hidden:
                described = {}
            empty = res.file("empty", b"", 0o000) if plan.hidden else "/nonexistent/pysb-empty"
            extra: dict[str, Any] = {}
            if net is not None:
                netlaunch = NetworkLaunch.create(net, res)
                extra = {
                    "network": True,
                    "info_fd": netlaunch.info_w,
                    "block_fd": netlaunch.block_r,
                    "resolv_file": res.memfile(net.resolv_text().encode()),
                }
                if plan.hosts_file is None:
                    extra["hosts_file"] = res.memfile(net.hosts_text().encode())
                    child_fds.append(extra["hosts_file"])
                child_fds.append(extra["resolv_file"])
            # bwrap's set-up failure vs the program's exit 1 (providerkit.watch_wrapper_setup)
            status_r, status_w = res.pipe()
            extra["json_status_fd"] = status_w
            child_fds.append(status_w)
            bpf = seccomp_filter_bytes()
            if bpf is not None:
                seccomp_r, seccomp_w = res.pipe()
                os.write(seccomp_w, bpf)  # a few hundred bytes: fits the pipe buffer
                res.close(seccomp_w)
                extra["seccomp_fd"] = seccomp_r
                child_fds.append(seccomp_r)
            if described is not None:
                described[status_w] = ("report", status_r)
                if bpf is not None:
                    described[seccomp_r] = ("bytes", bytes(bpf))
            cmd = self._command(
                plan,
                empty_file=empty,
                seccomp=bpf is not None,
                res=res,
                child_fds=child_fds,
                described=described,
                **extra,
            )
        except BaseException:
            res.release()
            raise
        # No --clearenv/--setenv: values on bwrap's command line are world-readable in
        # /proc/PID/cmdline. bwrap passes its own environment on, so it gets exactly plan.env.
        spec = LaunchSpec(
            argv=cmd.argv,
            env=dict(plan.env),
            cwd="/",
            pass_fds=[*plan.pass_fds, *child_fds, *(netlaunch.child_fds if netlaunch else ())],
            cleanups=[res.release],
        )
        own_session = not shares_terminal(plan)
        spec.on_started.append(lambda proc: adopt_wrapper(proc, own_session=own_session))
        # {"exit-code": N} only once the program ran: else bwrap's own set-up failed
        spec.on_started.append(watch_wrapper_setup(status_r, tool="bwrap", marker=b'"exit-code"'))
        # bwrap has its own copies now; ours would only keep the pipes alive.
        spec.on_started.append(lambda _proc: res.close_all(child_fds))
        if netlaunch is not None:
            spec.on_started.append(netlaunch.on_started)
            spec.cleanups.insert(0, netlaunch.close)
        spec.light = True  # every hook above takes pysb's light process: no subprocess
        spec.ahead = described
        return spec

    def launch(self, plan: LaunchPlan, **popen_kwargs: Any) -> subprocess.Popen[bytes]:
        """Like :meth:`Provider.launch`, with two bwrap specifics: the returned process
        routes ``send_signal``/``terminate`` to the program
        (:mod:`pysb_core.launch.wrapper_process`), and
        in a run that shares the terminal bwrap ignores SIGINT and SIGQUIT (see
        :mod:`pysb_bwrap.child`)."""
        if shares_terminal(plan):
            plan.add_pre_exec("ignoring SIGINT and SIGQUIT", _ignore_terminal_signals)
        elif "start_new_session" not in popen_kwargs:
            # The program is in a session of its own (--new-session); bwrap goes into a
            # process group of its own too, so the terminal's Ctrl-C does not kill bwrap
            # (and with it, the program) but reaches pysb, which forwards it to the
            # program (proc.pysb_own_session, pysb_core.launch.execute).
            popen_kwargs.setdefault("process_group", 0)
        return super().launch(plan, **popen_kwargs)

    # -- hooks (the loaded provider is registered with pluggy) ---------------------------

    @hookimpl
    def pysb_contribute(self, policy: Policy, plan: LaunchPlan) -> None:
        """Undo what bwrap adds to the program's start (see :mod:`pysb_bwrap.child`)."""
        unset = [] if "PWD" in policy.env else ["PWD"]
        if not unset and not shares_terminal(plan):
            return
        here = os.path.dirname(os.path.realpath(__file__))
        plan.add_exposure(Exposure(path=here, target=here, writable=False, implicit=True))
        plan.add_child_setup(
            ChildSetup(
                module="pysb_bwrap.child",
                function="setup",
                args={"unset": unset, "restore_sigint": shares_terminal(plan)},
            )
        )


def _ignore_terminal_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


def shares_terminal(plan: LaunchPlan) -> bool:
    """A run on the user's terminal (the prompt, or a program whose process group pysb
    makes the terminal's foreground group: ``plan.terminal``) stays in the terminal's
    session (job control: Ctrl-C, Ctrl-Z), which is safe only with the seccomp filter
    against terminal injection."""
    return (plan.interactive or plan.terminal) and seccomp_filter_bytes() is not None


#: The first bwrap with ``--bind-fd`` / ``--ro-bind-fd``.
BIND_FD_VERSION = (0, 8, 0)


def _binds_fds(version: str) -> bool:
    """Whether this bwrap binds from descriptors (older ones bind by path only)."""
    try:
        parts = tuple(int(p) for p in version.split(".")[:3])
    except ValueError:
        return False
    return parts >= BIND_FD_VERSION


def _exposure_fds(plan: LaunchPlan, res: Resources, child_fds: list[int] | None) -> dict[str, int]:
    """Open each of the profile's exposures without following links (issue 22): bwrap then
    binds the very directory the profile named, even if a running sandbox swapped a
    directory of its path for a link since the profile was read. A link there now is an
    error (exit 125), never followed."""
    from pysb_core.providerkit import open_dir_nofollow

    fds: dict[str, int] = {}
    for e in plan.exposures:
        if e.implicit or e.target == "/" or e.path in fds:
            continue
        try:
            fd = open_dir_nofollow(e.path)
        except OSError as exc:
            import errno

            why = (
                "a directory of its path was replaced by a symbolic link since the profile was read"
                if exc.errno in (errno.ELOOP, errno.ENOTDIR)
                else exc.strerror
            )
            raise SandboxError(
                f"{e.source}: the exposure {e.path} cannot be opened ({why}); refusing to start"
            ) from None
        res.fds.add(fd)
        if child_fds is not None:
            child_fds.append(fd)
        fds[e.path] = fd
    return fds
