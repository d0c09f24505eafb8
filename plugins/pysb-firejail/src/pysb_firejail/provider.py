"""The ``firejail`` provider class: compile the plan, start firejail, route signals.

The sandbox is firejail's: new mount, PID, UTS, IPC and network namespaces, every
capability dropped, ``no_new_privs``, firejail's default seccomp filter plus its
namespace-creation filter, a private ``/dev`` and ``/tmp``, and a file-system view reduced
to the system, a few ``/etc`` files and the exposures (see :mod:`pysb_firejail.argv`).
See docs/providers.md#firejail for the exact view and the residual weaknesses.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pysb_core.errors import ProviderUnavailableError, SandboxError
from pysb_core.markers import hookimpl
from pysb_core.plan import ChildSetup, LaunchSpec
from pysb_core.policy import Exposure
from pysb_core.provider import Capability, Provider, ProviderStatus
from pysb_firejail import network, options
from pysb_firejail.argv import FirejailCommand, build_argv, uid_is_root
from pysb_firejail.hostfs import scan_host
from pysb_firejail.limits import PidsCgroup, processes_problem
from pysb_firejail.probe import INSTALL_FIX, probe_firejail
from pysb_firejail.process import adopt

if TYPE_CHECKING:
    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import Policy

CAPABILITIES = frozenset(
    {
        Capability.FILES,
        Capability.FILES_WRITE,
        Capability.IGNORE,
        Capability.ENV,
        Capability.LIMITS,
    }
)


class FirejailProvider(Provider):
    """firejail's namespaces, whitelists and seccomp filter; no network beyond loopback."""

    name = "firejail"
    description = "firejail: whitelisted file system, no network, caps dropped, seccomp"
    capabilities = CAPABILITIES
    install_hint = INSTALL_FIX

    # -- configuration --------------------------------------------------------------

    @classmethod
    def validate_options(cls, options_: Mapping[str, Any]) -> list[str]:
        return options.validate(options_)

    # -- discovery ------------------------------------------------------------------

    def probe(self) -> ProviderStatus:
        return probe_firejail()

    def describe(self, plan: LaunchPlan) -> list[str]:
        lines = []
        if network.needs_network(plan):
            lines.append(f"network: REFUSED: {network.refuse(plan).reason}")
        else:
            lines.append("network: own namespace, loopback only (--net=none)")
        problem = processes_problem(plan.policy.limits, as_root=uid_is_root())
        if problem:
            lines.append(f"limits: {problem}")
        try:
            cmd = self._command(plan)
        except SandboxError as exc:
            return [*lines, f"cannot build: {exc}"]
        lines += [f"note: {n}" for n in cmd.notes]
        lines.append("command: " + " ".join(cmd.argv))
        return lines

    # -- launch ---------------------------------------------------------------------

    def _command(self, plan: LaunchPlan) -> FirejailCommand:
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
        )

    def prepare(self, plan: LaunchPlan) -> LaunchSpec:
        status = probe_firejail()
        if not status.available:
            raise ProviderUnavailableError(f"firejail: {status.reason}", fix=status.fix)
        if network.needs_network(plan):
            raise network.refuse(plan)
        cmd = self._command(plan)
        spec = LaunchSpec(
            argv=cmd.argv,
            env=dict(plan.env),
            cwd=cmd.cwd,
            pass_fds=list(plan.pass_fds),
        )
        spec.on_started.append(adopt)
        return spec

    def launch(self, plan: LaunchPlan, **popen_kwargs: Any) -> subprocess.Popen[bytes]:
        """Like :meth:`Provider.launch`; with a ``processes`` limit while pysb runs as root
        (where ``RLIMIT_NPROC`` does not apply), firejail starts inside a pids cgroup of
        its own, joined before ``exec`` so that nothing escapes it."""
        problem = processes_problem(plan.policy.limits, as_root=uid_is_root())
        if problem:
            raise SandboxError(f"firejail: {problem}")
        limit = plan.policy.limits.processes
        if limit is not None and uid_is_root():
            group = PidsCgroup.create(limit)
            plan.add_cleanup(group.remove)
            previous = popen_kwargs.pop("preexec_fn", None)

            def join() -> None:
                group.join_self()
                if previous is not None:
                    previous()

            popen_kwargs["preexec_fn"] = join
        return super().launch(plan, **popen_kwargs)

    # -- hooks (the loaded provider is registered with pluggy) ---------------------------

    @hookimpl
    def pysb_contribute(self, policy: Policy, plan: LaunchPlan) -> None:
        """Undo what firejail adds to the program's start (see :mod:`pysb_firejail.child`)."""
        here = os.path.dirname(os.path.realpath(__file__))
        plan.add_exposure(Exposure(path=here, target=here, writable=False, implicit=True))
        plan.add_child_setup(
            ChildSetup(
                module="pysb_firejail.child",
                function="setup",
                args={"env": dict(plan.env), "foreground": True},
            )
        )
