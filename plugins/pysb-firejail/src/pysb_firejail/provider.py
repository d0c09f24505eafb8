"""The ``firejail`` provider class: compile the plan, start firejail, route signals.

The sandbox is firejail's: new mount, PID, UTS, IPC and network namespaces, every
capability dropped, ``no_new_privs``, firejail's default seccomp filter plus its
namespace-creation filter, a private ``/dev`` and ``/tmp``, and a file-system view reduced
to the system, a few ``/etc`` files and the exposures (see :mod:`pysb_firejail.argv`).
See docs/providers.md#firejail for the exact view and the residual weaknesses.
"""

from __future__ import annotations

import os

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
    pids_limit_problem,
    seccomp_covers,
    seccomp_describe,
    watch_wrapper_setup,
)
from pysb_firejail import lifeline, mountns, netns, network, nsnet, options
from pysb_firejail.argv import (
    CHILD_MODULE,
    FirejailCommand,
    build_argv,
    child_reaps_orphans,
    uid_is_root,
)
from pysb_firejail.child import pid_namespace
from pysb_firejail.hostfs import scan_host
from pysb_firejail.probe import INSTALL_FIX, probe_firejail

#: The provider kit this plugin is written against (:mod:`pysb_core.kitversion`).
PYSB_PROVIDERKIT = "1.7"

TYPE_CHECKING = False  # imported by every firejail run: no typing at run time
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
        Capability.ENV,
        Capability.LIMITS,
    }
)


class FirejailProvider(Provider):
    """firejail's namespaces, whitelists and seccomp filter; network rules through firejail's
    netfilter on a host bridge (``providers: {firejail: {bridge: NAME}}``) when configured."""

    name = "firejail"
    partial_pipes = True  # a local process: partial mode over two pipes
    description = (
        "firejail: whitelisted file system, caps dropped, seccomp; no network, or a "
        "host bridge filtered by --netfilter"
    )
    capabilities = BASE_CAPABILITIES | network.NETWORK_CAPABILITIES
    install_hint = INSTALL_FIX
    #: firejail's own processes in the pids cgroup of a root pysb (the base launch joins
    #: it): the host process and the sandbox's PID 1.
    own_processes = 2
    private_tmp = "/tmp"  # firejail's own tmpfs (pysb_firejail.argv)
    #: firejail's private /dev (``--private-dev``) holds a /dev/shm of its own: an exposure of
    #: the host's means that one (pysb_core.launch.tmpdir.shm_exposures). Unbounded
    # (docs/providers.md).
    private_shm = "/dev/shm"
    private_pts = "/dev/pts"  # --private-dev mounts a devpts instance of its own
    tmp_unbounded = True  # firejail has no size option: watched (pysb_core.launch.tmpwatch)

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        #: Filtered namespaces launch() made, by plan, for prepare() to take.
        self._started: dict[int, nsnet.NamespaceNetwork] = {}
        #: The read end of each plan's started-marker pipe (pysb_contribute).
        self._started_fds: dict[int, int] = {}

    # -- configuration --------------------------------------------------------------

    @classmethod
    def validate_options(cls, options_: Mapping[str, Any]) -> list[str]:
        return options.validate(options_)

    # -- discovery ------------------------------------------------------------------

    def probe(self) -> ProviderStatus:
        return probe_firejail()

    def enforced(self) -> frozenset[Capability]:
        """The network capabilities when the configured bridge is usable here, or, without
        a bridge, when pysb runs as root and the shared layer's helpers are present
        (:mod:`pysb_firejail.nsnet`)."""
        if self.bridge:
            return BASE_CAPABILITIES | network.usable(self.bridge, as_root=uid_is_root())
        if uid_is_root() and nsnet.layer_usable():
            return BASE_CAPABILITIES | network.NETWORK_CAPABILITIES
        return BASE_CAPABILITIES

    @property
    def bridge(self) -> str | None:
        value = self.options.get("bridge")
        return str(value) if value else None

    def preflight(self, plan: LaunchPlan) -> None:
        """What :meth:`launch` does before firejail starts: for a root pysb without a
        bridge, the network filter loaded into a throwaway namespace
        (``NetnsNetwork.preflight``); then the command (options, mount layout). A normal
        user's network rules are refused by :meth:`enforced` already; a bridge's filter is
        loaded by firejail itself."""
        net_options: list[str] | None = None
        if network.needs_network(plan.policy) and not self.bridge and uid_is_root():
            nsn = self._namespace_network(plan)
            try:
                nsn.net.preflight()
                net_options = list(nsn.options)
            finally:
                nsn.close()
        self._command(plan, net_options)

    def describe(self, plan: LaunchPlan) -> list[str]:
        lines = [seccomp_describe() + ", and new namespaces; firejail's --seccomp too"]
        net_options: list[str] | None = None
        if not network.needs_network(plan.policy):
            how = (
                "made by pysb before firejail starts: the command has no --net option"
                if self._own_netns(plan)
                else "--net=none"
            )
            lines.append(f"network: own namespace, loopback only ({how})")
        elif not self.bridge:
            try:
                nsn = self._namespace_network(plan)
            except ProviderUnavailableError as exc:
                lines.append(f"network: REFUSED: {exc.reason}")
            else:
                try:
                    lines.append("network: a namespace made and filtered by pysb, firejail in it")
                    lines += [f"  {line}" for line in nsn.describe()]
                    net_options = [
                        o.split("=", 1)[0] + "=FILE" if "=/" in o else o for o in nsn.options
                    ]
                finally:
                    nsn.close()
        else:
            refused = network.refusal(plan.policy, self.bridge, as_root=uid_is_root())
            if refused is not None:
                lines.append(f"network: REFUSED: {refused.reason}")
            else:
                net = network.BridgedNetwork.create(plan, str(self.bridge))
                try:
                    lines.append(f"network: bridge {self.bridge}, filtered by firejail:")
                    lines += [f"  {line}" for line in net.files["rules4.net"].splitlines()]
                    net_options = [
                        o.split("=", 1)[0] + "=FILE" if "=/" in o else o for o in net.options
                    ]
                finally:
                    net.close()
        problem = pids_limit_problem(plan.policy.limits.processes)
        if problem:
            lines.append(f"limits: {problem}")
        try:
            cmd = self._command(plan, net_options)
        except SandboxError as exc:
            return [*lines, f"cannot build: {exc}"]
        lines += [f"note: {n}" for n in cmd.notes]
        lines.append("command: " + " ".join(cmd.argv))
        return lines

    # -- launch ---------------------------------------------------------------------

    def _namespace_network(self, plan: LaunchPlan) -> nsnet.NamespaceNetwork:
        """The checked (not started) network of a plan with allow rules and no bridge;
        refused for a normal user (ProviderUnavailableError with the fix)."""
        if not uid_is_root():
            rules = ", ".join(
                f"'{r}' ({r.source})" for r in plan.policy.network if r.action == "allow"
            )
            raise nsnet.refusal_for_user(rules)
        return nsnet.NamespaceNetwork.checked(plan)

    @staticmethod
    def _own_netns(plan: LaunchPlan) -> bool:
        """No network, and pysb makes the namespace itself (:mod:`pysb_firejail.netns`)."""
        return not network.needs_network(plan.policy) and netns.usable(as_root=uid_is_root())

    def _command(self, plan: LaunchPlan, net_options: list[str] | None = None) -> FirejailCommand:
        problems = options.validate(plan.provider_options)
        if problems:
            raise SandboxError("providers: firejail: " + "; ".join(problems))
        status = probe_firejail()
        layout = scan_host((*plan.hidden, *plan.protected))
        hostname = plan.provider_options.get("hostname")
        return build_argv(
            plan,
            layout,
            firejail=str(status.details.get("binary", "firejail")),
            as_root=uid_is_root(),
            hostname=str(hostname) if hostname else None,
            network=net_options,
            own_netns=net_options is None and self._own_netns(plan),
        )

    def prepare(self, plan: LaunchPlan) -> LaunchSpec:
        status = probe_firejail()
        if not status.available:
            raise ProviderUnavailableError(f"firejail: {status.reason}", fix=status.fix)
        net: network.BridgedNetwork | None = None
        net_options: list[str] | None = None
        namespace_net = self._started.pop(id(plan), None)
        if network.needs_network(plan.policy) and self.bridge:
            refused = network.refusal(plan.policy, self.bridge, as_root=uid_is_root())
            if refused is not None:
                raise refused
            net = network.BridgedNetwork.create(plan, str(self.bridge))
            net_options = net.options
        elif network.needs_network(plan.policy):
            if namespace_net is None:  # only launch() makes the namespace firejail joins
                raise SandboxError(
                    "firejail: the filtered network namespace was not made before firejail "
                    "(FirejailProvider.launch makes it); refusing to start"
                )
            net_options = namespace_net.options
        try:
            cmd = self._command(plan, net_options)
        except BaseException:
            if net is not None:
                net.close()
            raise
        spec = LaunchSpec(
            argv=cmd.argv,
            env=dict(plan.env),
            cwd=cmd.cwd,
            pass_fds=list(plan.pass_fds),
            cleanups=[net.close] if net is not None else [],
        )
        if (net is None and self._own_netns(plan)) or namespace_net is not None:
            spec.on_started.append(netns.check_started)
        # The reaper stands between firejail's PID 1 and the program (pysb_firejail.child).
        depth = 3 if child_reaps_orphans(plan) else 2
        spec.on_started.append(lambda proc: adopt_wrapper(proc, depth=depth))
        started_r = self._started_fds.pop(id(plan), None)
        if started_r is not None:
            spec.on_started.append(watch_wrapper_setup(started_r, tool="firejail", marker=b"1"))
        spec.light = True  # the hooks above take pysb's light process: no subprocess
        return spec

    def launch(self, plan: LaunchPlan, **popen_kwargs: Any) -> subprocess.Popen[bytes]:
        """Like :meth:`Provider.launch`, with steps between ``fork`` and ``exec`` of
        firejail when pysb runs as root (``plan.pre_exec``, after the base's pids cgroup
        for a ``processes`` limit, which ``RLIMIT_NPROC`` does not apply to root): it
        enters a new mount namespace whose root mount is read-only
        (:mod:`pysb_firejail.mountns`: firejail's bind mounts are then read-only from the
        start) and, without network allow rules, a new network namespace with ``lo`` up
        (:mod:`pysb_firejail.netns`), both of which firejail keeps for the sandbox. Run by
        a normal user, a last step forks the watcher that ends firejail when the process
        that started it ends (:mod:`pysb_firejail.lifeline`)."""
        problem = pids_limit_problem(plan.policy.limits.processes)
        if problem:  # before any set-up (the base launch would refuse it after)
            raise SandboxError(f"firejail: {problem}")
        if network.needs_network(plan.policy) and not self.bridge:
            # Allow rules without a bridge: the filtered namespace is made (and any
            # failure raised, exit 125) before firejail starts; firejail joins it.
            namespace_net = self._namespace_network(plan)
            plan.add_cleanup(namespace_net.close)
            namespace_net.start()
            self._started[id(plan)] = namespace_net
            plan.add_cleanup(lambda: self._started.pop(id(plan), None))
            plan.add_pre_exec("the filtered network namespace", namespace_net.enter_step())
        # prepare() leaves --net=none out for this plan: the namespace is made here.
        own_netns = self._own_netns(plan)
        read_only_root = mountns.usable(
            as_root=uid_is_root(),
            root_writable=any(e.path == "/" and e.writable for e in plan.exposures),
        )
        flags = (netns.CLONE_NEWNET if own_netns else 0) | (
            mountns.CLONE_NEWNS if read_only_root else 0
        )
        if flags:
            plan.add_pre_exec("new namespaces", netns.unshare_function(flags))
        if read_only_root:
            bind = mountns.firejail_run_on_root()
            plan.add_pre_exec(
                "a mount namespace with a read-only root",
                mountns.read_only_root(bind_firejail_run=bind),
            )
        if own_netns:
            netns.prepare_loopback()
            plan.add_pre_exec("a network namespace of its own", netns.loopback_up)
        if not uid_is_root() and lifeline.supported():
            # Set-uid firejail loses the death signal pysb sets: a watcher stands in.
            plan.add_pre_exec("a watcher that ends firejail with pysb", lifeline.step())
        return super().launch(plan, **popen_kwargs)

    # -- hooks (the loaded provider is registered with pluggy) ---------------------------

    @hookimpl
    def pysb_check(self, policy: Policy, provider: Provider | None, report: Any) -> None:
        """Say which host setting would let firejail enforce the network rules."""
        if provider is not self or not network.needs_network(policy):
            return
        if not self.bridge:
            if not uid_is_root():
                report.note(f"{nsnet.NOT_ROOT}; {nsnet.NOT_ROOT_FIX}")
            return
        refused = network.refusal(policy, self.bridge, as_root=uid_is_root())
        if refused is not None:
            report.note(refused.reason)

    @hookimpl(trylast=True)
    def pysb_contribute(self, policy: Policy, plan: LaunchPlan) -> None:
        """Undo what firejail adds to the program's start (see :mod:`pysb_firejail.child`).

        Last of the contributions (``trylast``): the child set-up restores ``plan.env`` as
        every plugin left it (an egress proxy's variables), not as it stood before them.
        """
        here = os.path.dirname(os.path.realpath(__file__))
        plan.add_exposure(Exposure(path=here, target=here, writable=False, implicit=True))
        # firejail exits 1 with "Error: ..." when it cannot build the sandbox, as a program
        # exiting 1 would: the child set-up writes a byte here once the sandbox runs.
        started_r, started_w = os.pipe()
        plan.pass_fds.append(started_w)
        plan.add_cleanup(lambda: (os.close(started_r), os.close(started_w)))
        self._started_fds[id(plan)] = started_r
        plan.add_child_setup(
            ChildSetup(
                module=CHILD_MODULE,
                function="setup",
                args={
                    "env": dict(plan.env),
                    "foreground": True,
                    "tty_filter": True,
                    # Refused by the child's filter, not by firejail's --restrict-namespaces
                    # (whose filter firejail 0.9.72 compiles at every start, ~3 ms).
                    "namespaces": seccomp_covers(),
                    "started_fd": started_w,
                    # A processes limit counts every process of the sandbox exactly: the
                    # reaper would take one of them (firejail then kills orphans itself).
                    # The host's PID namespace: the reaper checks it has another one.
                    "reaper": pid_namespace() if policy.limits.processes is None else None,
                },
            )
        )
