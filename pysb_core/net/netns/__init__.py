"""Kernel-enforced network filtering for providers that give the sandbox its own network
namespace (``unshare``, ``bwrap``): an nftables ruleset loaded into the namespace before the
program starts, plus a user-mode network helper (slirp4netns, else pasta) on the host.

Provider-independent on purpose: plugins must not import each other, so both namespace
providers use this package. API (everything a provider needs)::

    from pysb_core.net.netns import NetnsNetwork

    net = NetnsNetwork(plan.policy.network, plan.policy.pins)   # or NetnsNetwork.from_plan(plan)
    net.enabled          # False: no allow rule -> keep the namespace loopback-only, nothing to do
    net.problems()       # [(reason, fix)] for probe()/check: helper or nft missing
    net.check()          # raises ProviderUnavailableError (-> exit 125) with the fix
    net.describe()       # list[str] for Provider.describe(): helper, forwards, DNS, ruleset
    net.hosts_text()     # /etc/hosts from the pins (loopback names + one line per address)
    net.resolv_text()    # /etc/resolv.conf: the namespace resolver only when a rule is wide

    # at launch -- the sandbox process must be in its new user+net namespaces and BLOCKED
    # before the program (unshare: our init waits on a pipe; bwrap: --info-fd gives the
    # child PID, --block-fd holds it):
    net.attach(child_pid) # 1. nft ruleset loaded into the namespace (netns.enter; fails
                          #    closed: SandboxError, nothing left running)
                          # 2. slirp4netns/pasta attached by PID (tap0 appears already filtered)
                          # 3. inbound forwards (host 127.0.0.1:P -> sandbox port P)
    ...release the child...
    net.close()           # after the sandbox exits (idempotent). If pysb is SIGKILLed the
                          # helper exits by itself: it holds the read end of a lifeline pipe
                          # (slirp4netns --exit-fd) whose write end only pysb holds.

The loopback rule (SPEC §4): ``allow ... 127.0.0.1 P out`` reaches the *host's* 127.0.0.1:P
(slirp4netns: DNAT to its gateway 10.0.2.2 with ``route_localnet``; pasta: ``-T P``), and
without such a rule the host's loopback is unreachable (the gateway address is rejected).
``allow tcp 127.0.0.1 P in`` forwards the host's 127.0.0.1:P to a server bound inside on P.

Modules: :mod:`~pysb_core.net.netns.usernet` (helper processes), :mod:`~pysb_core.net.netns.session`
(the order above); the ruleset comes from the one network-rule compiler,
:mod:`pysb_core.net.netfilter`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing import: this package is on every unshare run
if TYPE_CHECKING:
    from typing import Any

    from pysb_core.net.netns.session import NetnsNetwork
    from pysb_core.net.netns.usernet import INSTALL_HINT, Pasta, Slirp4netns, UserNet, choose_helper

_WHERE = {
    "NetnsNetwork": "session",
    "INSTALL_HINT": "usernet",
    "Pasta": "usernet",
    "Slirp4netns": "usernet",
    "UserNet": "usernet",
    "choose_helper": "usernet",
}

__all__ = [
    "INSTALL_HINT",
    "NetnsNetwork",
    "Pasta",
    "Slirp4netns",
    "UserNet",
    "choose_helper",
]


def __getattr__(name: str) -> Any:
    """Lazy exports: a run without network rules never imports the helpers' modules."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'pysb_core.net.netns' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"pysb_core.net.netns.{module}"), name)
