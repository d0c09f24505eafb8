"""The guest's packet filter: the profile's rules, compiled by pysb's one network-rule
compiler (:func:`pysb_core.providerkit.compile_nft`) for the network QEMU gives the guest.

The guest reaches the outside only through QEMU's user-mode network (slirp), the same
shape as slirp4netns in front of a network namespace: the guest is 10.0.2.15 on ``eth0``,
10.0.2.2 is the host's loopback and 10.0.2.3 its resolver. So the rules mean exactly what
they mean under unshare and bwrap: ``allow tcp 127.0.0.1 8000 out`` is NATed to 10.0.2.2
(the host's service), slirp's own addresses are refused otherwise, ``allow tcp 127.0.0.1 P
in`` is forwarded (QEMU's ``hostfwd`` from the host's loopback, NATed in the guest to its
127.0.0.1). One difference, said by the target: the guest's loopback is its own kernel's,
not the host's, so traffic that stays on it passes after the deny rules.
"""

from __future__ import annotations

from pysb_core.providerkit import FilterTarget

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pysb_core.providerkit import CompiledNetwork, Policy

#: QEMU's slirp as the guest sees it (guest_init.sh sets the guest's address and route):
#: slirp's addresses, as slirp4netns has them (FilterTarget's defaults: 10.0.2.0/24,
#: gateway 10.0.2.2 = the host's loopback, reached by NAT; resolver 10.0.2.3).
GUEST_NETWORK = FilterTarget(
    name="qemu user-mode network", uplink="eth0", guest="10.0.2.15", open_loopback=True
)


def compile_guest_filter(policy: Policy) -> CompiledNetwork:
    """The guest's ``nft -f`` input, the ports QEMU forwards, and the notes for the user.
    (The compiler loads here: a run without network rules needs none of it.)"""
    from pysb_core.providerkit import compile_nft

    return compile_nft(policy.network, policy.pins, GUEST_NETWORK)
