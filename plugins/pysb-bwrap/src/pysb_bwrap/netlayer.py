"""The link to the shared egress-filtering layer (``pysb_core.netns``), when it exists.

Without a network allow rule the sandbox has its own network namespace with loopback
only, which bwrap alone provides and which needs nothing from here. An allow rule needs a
user-mode network plus a packet filter loaded in the namespace before the program starts;
that is ``pysb_core.netns``'s job. Until it is installed, such a profile is refused (fail
closed) instead of being run with no network at all or, worse, the host's.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from types import ModuleType

from pysb_core.errors import SandboxError
from pysb_core.provider import Capability

TYPE_CHECKING = False  # typing costs ~1.5 ms at every start
if TYPE_CHECKING:
    from typing import Any

    from pysb_core.plan import LaunchPlan

#: What the filtering layer enforces when it is present.
NETWORK_CAPABILITIES = frozenset(
    {Capability.TCP_PORT, Capability.TCP_HOST, Capability.UDP_PORT, Capability.UDP_HOST}
)
MISSING = (
    "the bwrap provider enforces network allow rules only through pysb's network filtering "
    "layer (pysb_core.netns), which is not installed; without an allow rule the sandbox has "
    "loopback only"
)


def netns_module() -> ModuleType | None:
    """The filtering layer's module, or ``None`` when pysb-core does not ship it (yet)."""
    try:
        return importlib.import_module("pysb_core.netns")
    except ImportError:
        return None


def layer_capabilities() -> frozenset[Capability]:
    """Network capabilities the layer declares (empty when it is not installed).

    Looks the package up without importing it: this runs when pysb_bwrap is imported.
    """
    try:
        found = importlib.util.find_spec("pysb_core.netns") is not None
    except ImportError:
        found = False
    return NETWORK_CAPABILITIES if found else frozenset()


@functools.lru_cache(maxsize=1)
def layer_usable() -> frozenset[Capability]:
    """Network capabilities the layer can enforce on *this* machine (its helpers present).

    A quick look (no import of the layer: ``pysb check`` and every launch ask this) for the
    programs ``NetnsNetwork.problems()`` requires; the layer's own ``check()`` stays the
    authority and runs again, failing closed, when a plan with allow rules is launched.
    """
    if not layer_capabilities():
        return frozenset()
    from pysb_core.probecache import which

    have = lambda name: which(name, ":/usr/sbin:/sbin:/usr/bin:/bin") is not None  # noqa: E731
    if have("nft") and (have("slirp4netns") or have("pasta")):
        return NETWORK_CAPABILITIES
    return frozenset()


def needs_layer(plan: LaunchPlan) -> bool:
    """True when a rule allows traffic: loopback-only is then not what the profile says."""
    return any(rule.action == "allow" for rule in plan.policy.network)


def network_for(plan: LaunchPlan) -> Any:
    """The checked ``NetnsNetwork`` of a plan with allow rules, or refuse the launch.

    Raises :class:`SandboxError` when the layer is not installed and
    :class:`~pysb_core.errors.ProviderUnavailableError` (with the fix) when a helper it needs
    (slirp4netns/pasta, nft) is missing.
    """
    mod = netns_module()
    if mod is None:
        rules = ", ".join(f"'{r}' ({r.source})" for r in plan.policy.network if r.action == "allow")
        raise SandboxError(f"{MISSING}. Refusing to start with network rules: {rules}")
    net = mod.NetnsNetwork.from_plan(plan)
    net.check()
    return net
