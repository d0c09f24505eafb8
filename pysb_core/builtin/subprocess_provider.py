"""The ``subprocess`` provider: a fresh interpreter with no OS boundary.

It still enforces two things by construction: the environment (the child starts with
exactly the whitelist) and resource limits (rlimits set before user code, enforced by the
kernel). Everything else is the Python layer's job. It is the provider of learning runs,
because a learning run must see every access rather than have the kernel refuse it.
"""

from __future__ import annotations

from pysb_core.plan import LaunchSpec
from pysb_core.provider import Capability, Provider, ProviderStatus

#: The provider kit this plugin is written against (:mod:`pysb_core.kitversion`).
PYSB_PROVIDERKIT = "1.7"

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from pysb_core.plan import LaunchPlan


class SubprocessProvider(Provider):
    name = "subprocess"
    partial_pipes = True  # a local process: partial mode over two pipes
    description = "a fresh interpreter, no OS boundary (Python guards only)"
    capabilities = frozenset({Capability.ENV, Capability.LIMITS})

    def probe(self) -> ProviderStatus:
        return ProviderStatus.ok(note="no isolation: the Python layer is the only guard")

    def prepare(self, plan: LaunchPlan) -> LaunchSpec:
        return LaunchSpec(
            argv=list(plan.argv), env=dict(plan.env), cwd=plan.cwd, pass_fds=list(plan.pass_fds)
        )
