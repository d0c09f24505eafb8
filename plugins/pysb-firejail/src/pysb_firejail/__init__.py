"""pysb provider: firejail (being implemented; reports itself unavailable until then)."""

from __future__ import annotations

from pysb_core import LaunchPlan, LaunchSpec, Provider, ProviderStatus
from pysb_core.errors import ProviderUnavailableError


class FirejailProvider(Provider):
    name = "firejail"
    description = "firejail (not implemented yet)"

    def probe(self) -> ProviderStatus:
        return ProviderStatus.missing("the firejail provider is not implemented yet")

    def prepare(self, plan: LaunchPlan) -> LaunchSpec:
        raise ProviderUnavailableError("the firejail provider is not implemented yet")
