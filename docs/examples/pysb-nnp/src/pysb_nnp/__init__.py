"""A minimal third-party pysb provider.

It starts the sandboxed interpreter under ``setpriv --no-new-privs``: set-user-ID programs
can no longer raise privileges. Unless the profile says ``providers: {nnp: {core-dumps:
true}}``, the sandboxed process also cannot write core dumps. It confines nothing else at
the OS level, and says so through its capabilities, so ``pysb check`` reports every other
rule as enforced by the Python layer only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pysb_core.providerkit import (
    Capability,
    CheckReport,
    ChildSetup,
    LaunchPlan,
    LaunchSpec,
    Provider,
    ProviderStatus,
    hookimpl,
    unknown_option,
    which,
)

#: The provider kit this module is written for (pysb refuses it if it offers another).
PYSB_PROVIDERKIT = "1.0"

OPTIONS = ("core-dumps",)


class NoNewPrivsProvider(Provider):
    name = "nnp"
    description = "no-new-privileges (setpriv), example third-party provider"
    capabilities = frozenset({Capability.ENV, Capability.LIMITS})
    install_hint = "apt-get install util-linux"

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> list[str]:
        problems = []
        for key, value in options.items():
            if key not in OPTIONS:
                problems.append(unknown_option(key, OPTIONS))
            elif not isinstance(value, bool):
                problems.append(f"{key}: expected true or false, got {value!r}")
        return problems

    def probe(self) -> ProviderStatus:
        if which("setpriv") is None:
            return ProviderStatus.missing("setpriv is not installed", fix=self.install_hint)
        return ProviderStatus.ok()

    def prepare(self, plan: LaunchPlan) -> LaunchSpec:
        if not self.options.get("core-dumps", False):
            # Called by pysb's bootstrap inside the sandbox, before the program.
            plan.add_child_setup(ChildSetup("pysb_nnp.child", "no_core_dumps"))
        setpriv = which("setpriv") or "setpriv"
        return LaunchSpec(
            argv=[setpriv, "--no-new-privs", "--", *plan.argv],
            env=dict(plan.env),
            cwd=plan.cwd,
            pass_fds=list(plan.pass_fds),
        )

    # The provider instance is a pluggy plugin too: it can implement any host hook.
    @hookimpl
    def pysb_check(self, report: CheckReport) -> None:
        report.note("nnp: set-user-ID programs cannot raise privileges (no_new_privs)")
