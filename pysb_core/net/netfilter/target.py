"""Where a compiled packet filter runs: the parameters in which the back ends differ.

The rules mean the same on every provider (SPEC §4); what differs is the network the
sandbox sits on. A :class:`FilterTarget` says it once, and :mod:`pysb_core.net.netfilter.plan`
turns the rules into the same decisions for every target:

- a **user-mode network** (slirp4netns, pasta, QEMU's slirp): the sandbox's only way out is
  a helper that owns ``subnet``; ``gateway`` is the host's loopback, ``resolver`` answers
  DNS. Those addresses are refused except through loopback rules (and DNS when a rule is
  wide), and inbound traffic only ever arrives through the helper, so an ``in`` rule on a
  wildcard or loopback address is judged by its port alone;
- a **bridge** (firejail's ``--net=BRIDGE``): ``subnet`` is ``None``; the sandbox has a real
  link, so an ``in`` rule is judged by the real local address and IPv6 neighbour discovery
  must pass.
"""

from __future__ import annotations

from pysb_core._startup.records import Record, record


@record
class FilterTarget(Record):
    """The network a ruleset is compiled for (see the module docstring).

    ``uplink`` is the interface towards the helper or the bridge (NAT of forwarded ports
    and of loopback replies is tied to it). ``host_loopback_nat``: reaching the host's
    loopback is done by rewriting ``127.0.0.1`` to ``gateway`` inside the sandbox
    (slirp4netns, QEMU); false when the helper listens on the sandbox's loopback itself
    (pasta ``-T``). ``open_loopback``: the sandbox's own loopback is not the host's (a VM
    guest, a bridged namespace), so traffic that stays on it passes after the deny rules
    instead of being judged as traffic to the host.
    """

    name: str = "slirp4netns"
    uplink: str = "tap0"
    subnet: str | None = "10.0.2.0/24"
    gateway: str | None = "10.0.2.2"
    resolver: str | None = "10.0.2.3"
    guest: str | None = "10.0.2.100"
    host_loopback_nat: bool = True
    open_loopback: bool = False
    table: str = "pysb"

    @classmethod
    def bridge(cls, uplink: str = "eth0", *, name: str = "bridge") -> FilterTarget:
        """A sandbox on a host bridge: no helper addresses, no NAT, its own loopback open."""
        return cls(
            name=name,
            uplink=uplink,
            subnet=None,
            gateway=None,
            resolver=None,
            guest=None,
            host_loopback_nat=False,
            open_loopback=True,
        )

    @property
    def bridged(self) -> bool:
        """True on a real link (no user-mode helper between the sandbox and the world)."""
        return self.subnet is None


#: slirp4netns attached to a network namespace (the default of the namespace providers).
SLIRP4NETNS = FilterTarget()
