"""The one network-rule compiler: the profile's ``network:`` rules as a kernel packet filter.

Every provider that filters in the kernel compiles through here -- unshare and bwrap (their
own network namespace behind slirp4netns or pasta, :mod:`pysb_core.net.netns`), qemu (the
guest's kernel behind QEMU's slirp) and firejail (a namespace on a host bridge) -- so the
rules mean the same everywhere, and one differential test holds every back end and target
to the reference matcher (:class:`pysb_core.policy.netrules.NetworkMatcher`)::

    from pysb_core.providerkit import FilterTarget, compile_iptables, compile_nft

    target = FilterTarget(name="qemu", uplink="eth0", guest="10.0.2.15", open_loopback=True)
    compiled = compile_nft(policy.network, policy.pins, target)
    compiled.ruleset   # nft -f input
    compiled.inbound   # ports the helper must forward from the host's loopback
    compiled.nat       # the ruleset rewrites addresses (NAT modules, route_localnet)
    compiled.notes     # what the user should be told (rules that cannot do all they say)
    v4, v6 = compile_iptables(policy.network, policy.pins, target)

Modules: :mod:`~.target` (the parameters in which networks differ), :mod:`~.plan` (the
decisions), :mod:`~.nft` and :mod:`~.iptables` (the two back ends, which only write the
decisions down), :mod:`~.merge` (many statements of a kind as one set lookup) and
:mod:`~.ruleset` (a large ruleset as several inputs, ``CompiledNetwork.batches``: any
number of rules loads, issue 27).
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing import: a provider may name FilterTarget at import time
if TYPE_CHECKING:
    from typing import Any

    from pysb_core.net.netfilter.iptables import compile_iptables
    from pysb_core.net.netfilter.nft import CompiledNetwork, compile_nft
    from pysb_core.net.netfilter.plan import (
        MAX_FORWARDED_PORTS,
        NAMESPACE_EPHEMERAL,
        FilterPlan,
        Forward,
        Match,
        plan_filter,
    )
    from pysb_core.net.netfilter.target import SLIRP4NETNS, FilterTarget

#: The package's modules and the public names each defines, cheapest first. Lazy, so that
#: naming a target (``target``: records only) does not load the compiler (``ipaddress``,
#: ``netrules``).
_MODULES = {
    "target": ("SLIRP4NETNS", "FilterTarget"),
    "plan": (
        "MAX_FORWARDED_PORTS",
        "NAMESPACE_EPHEMERAL",
        "FilterPlan",
        "Forward",
        "Match",
        "plan_filter",
    ),
    "nft": ("CompiledNetwork", "compile_nft"),
    "iptables": ("compile_iptables",),
}

__all__ = [
    "MAX_FORWARDED_PORTS",
    "NAMESPACE_EPHEMERAL",
    "SLIRP4NETNS",
    "CompiledNetwork",
    "FilterPlan",
    "FilterTarget",
    "Forward",
    "Match",
    "compile_iptables",
    "compile_nft",
    "plan_filter",
]


def __getattr__(name: str) -> Any:
    from importlib import import_module

    for module, names in _MODULES.items():
        if name in names:
            return getattr(import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
