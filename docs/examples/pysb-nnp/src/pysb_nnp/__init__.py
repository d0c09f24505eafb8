"""A minimal third-party pysb provider.

It starts the sandboxed interpreter under ``setpriv --no-new-privs``: setuid binaries can
no longer raise privileges. It enforces nothing else at the OS level, and says so through
its capabilities, so ``pysb check`` reports every other rule as Python-layer only.
"""

from __future__ import annotations

import shutil

from pysb_core import Capability, LaunchPlan, LaunchSpec, Provider, ProviderStatus


class NoNewPrivsProvider(Provider):
    name = "nnp"
    description = "no-new-privileges (setpriv), example third-party provider"
    capabilities = frozenset({Capability.ENV, Capability.LIMITS})
    install_hint = "apt-get install util-linux"

    def probe(self) -> ProviderStatus:
        if shutil.which("setpriv") is None:
            return ProviderStatus.missing("setpriv is not installed", fix=self.install_hint)
        return ProviderStatus.ok()

    def prepare(self, plan: LaunchPlan) -> LaunchSpec:
        setpriv = shutil.which("setpriv") or "setpriv"
        return LaunchSpec(
            argv=[setpriv, "--no-new-privs", "--", *plan.argv],
            env=dict(plan.env),
            cwd=plan.cwd,
            pass_fds=list(plan.pass_fds),
        )
