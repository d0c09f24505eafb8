"""The link to the shared egress-filtering layer (:class:`pysb_core.net.netns.NetnsNetwork`).

Without a network allow rule the sandbox has its own network namespace with loopback
only, which bwrap alone provides and which needs nothing from here. An allow rule needs a
user-mode network plus a packet filter loaded in the namespace before the program starts;
that is the layer's job, and a launch whose helpers are missing is refused (fail closed)
instead of being run with no network at all or, worse, the host's.
"""

from __future__ import annotations

from pysb_core.providerkit import Capability, memoize

TYPE_CHECKING = False  # typing costs ~1.5 ms at every start
if TYPE_CHECKING:
    from pysb_core.providerkit import LaunchPlan, NetnsNetwork

#: What the filtering layer enforces where its helpers are present.
NETWORK_CAPABILITIES = frozenset(
    {Capability.TCP_PORT, Capability.TCP_HOST, Capability.UDP_PORT, Capability.UDP_HOST}
)


@memoize
def layer_usable() -> frozenset[Capability]:
    """Network capabilities the layer can enforce on *this* machine (its helpers present).

    A quick look (no import of the layer: ``pysb check`` and every launch ask this) for the
    programs ``NetnsNetwork.problems()`` requires; the layer's own ``check()`` stays the
    authority and runs again, failing closed, when a plan with allow rules is launched.
    """
    from pysb_core.providerkit import which

    have = lambda name: which(name, ":/usr/sbin:/sbin:/usr/bin:/bin") is not None  # noqa: E731
    if have("nft") and (have("slirp4netns") or have("pasta")):
        return NETWORK_CAPABILITIES
    return frozenset()


def needs_layer(plan: LaunchPlan) -> bool:
    """True when a rule allows traffic: loopback-only is then not what the profile says."""
    return any(rule.action == "allow" for rule in plan.policy.network)


def network_for(plan: LaunchPlan) -> NetnsNetwork:
    """The checked ``NetnsNetwork`` of a plan with allow rules, or refuse the launch:
    :class:`~pysb_core.errors.ProviderUnavailableError` (with the fix) when a helper it
    needs (slirp4netns/pasta, nft) is missing.
    """
    from pysb_core.providerkit import NetnsNetwork

    net = NetnsNetwork.from_plan(plan)
    net.check()
    return net
