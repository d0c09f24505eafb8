"""The sandbox's network: none at all, or refused -- never the host's.

Without an allow rule the sandbox gets ``--net=none``: a new network namespace with
loopback only (its own ``127.0.0.1``: the host's loopback services are unreachable).

With an allow rule, firejail's own filtering would need a new network namespace
connected to the host through a bridge (``--net=BRIDGE``) with an iptables ruleset loaded
inside it (``--netfilter=FILE``). That needs host set-up pysb does not do on its own: a
bridge interface with an address, forwarding and NAT from it, and (for a non-root pysb)
``restricted-network no`` in ``/etc/firejail/firejail.config``. Even then it could not
give SPEC §4's loopback meaning (an ``allow ... 127.0.0.1 P out`` rule reaching the
*host's* service), since the host's loopback is not reachable from a bridge. This version
of the provider therefore refuses such a profile, fail closed, with a message that says
which providers enforce network rules and what the host would need; it never starts the
program with the host's network.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pysb_core.errors import ProviderUnavailableError

if TYPE_CHECKING:
    from pysb_core.plan import LaunchPlan

FIREJAIL_CONFIG = "/etc/firejail/firejail.config"


def needs_network(plan: LaunchPlan) -> bool:
    """True when a rule allows traffic: loopback-only is then not what the profile says."""
    return any(rule.action == "allow" for rule in plan.policy.network)


def restricted_network(config: str = FIREJAIL_CONFIG) -> bool:
    """firejail's ``restricted-network`` setting (default ``no``): when ``yes``, only root
    may use ``--net``/``--netfilter``."""
    try:
        with open(config) as f:
            for line in f:
                words = line.split()
                if len(words) == 2 and words[0] == "restricted-network":
                    return words[1] == "yes"
    except OSError:
        pass
    return False


def host_settings(plan: LaunchPlan, *, as_root: bool | None = None) -> list[str]:
    """What the host would need for firejail's own filtering (for the refusal message)."""
    root = os.getuid() == 0 if as_root is None else as_root
    needs = [
        "a host bridge for firejail's --net (e.g. `ip link add pysb0 type bridge; "
        "ip addr add ADDR/24 dev pysb0; ip link set pysb0 up`, with forwarding and NAT "
        "from it)",
    ]
    if not root and restricted_network():
        needs.append(f"`restricted-network no` in {FIREJAIL_CONFIG} (it is `yes` here)")
    loopback = [
        r for r in plan.policy.network if r.action == "allow" and r.network.startswith("127.")
    ]
    if loopback:
        needs.append(
            "and no rule on the host's loopback ("
            + ", ".join(f"'{r}' ({r.source})" for r in loopback)
            + "): a bridged namespace cannot reach the host's 127.0.0.1"
        )
    return needs


def refuse(plan: LaunchPlan) -> ProviderUnavailableError:
    """The error a launch with network allow rules fails with (exit 125)."""
    rules = ", ".join(f"'{r}' ({r.source})" for r in plan.policy.network if r.action == "allow")
    return ProviderUnavailableError(
        "firejail: the profile allows network traffic ("
        + rules
        + "), but this provider does not set up firejail's filtered networking "
        "(--net=BRIDGE with --netfilter); it would need "
        + "; ".join(host_settings(plan))
        + ". Refusing to start rather than run with the host's network or none",
        fix="use the bwrap or unshare provider (they filter by host and port through "
        "pysb_core.netns), or remove the network allow rules",
    )
