"""The sandbox's network: none, or a bridge filtered by firejail -- never the host's.

Without an allow rule the sandbox gets ``--net=none``: a new network namespace with
loopback only (its own ``127.0.0.1``: the host's loopback services are unreachable).

With an allow rule, firejail's own filtering is used: the sandbox gets a new network
namespace connected to a host bridge (``--net=BRIDGE``, a veth pair firejail makes) with
the profile's rules loaded inside as iptables rulesets (``--netfilter`` /
``--netfilter6``, compiled by pysb's one network-rule compiler for a bridge:
:func:`bridge_network`) before the program starts, and an
``/etc/hosts`` holding the pinned names (``--hosts-file``). That needs host set-up pysb
does not do on its own, named with ``providers: {firejail: {bridge: NAME}}``: a bridge
interface with an address (firejail gives the sandbox a free address of its subnet and
the bridge's address as gateway), plus forwarding and NAT from it for traffic beyond the
host. A non-root pysb also needs ``restricted-network no`` in
``/etc/firejail/firejail.config``. When any of this is missing, or when a rule names the
host's loopback (a bridged namespace cannot reach the host's ``127.0.0.1``, which SPEC §4
requires), the launch is refused with a message naming the setting: fail closed, never
the host's network.
"""

from __future__ import annotations

import os

from pysb_core.providerkit import Capability, ProviderUnavailableError

# shutil, socket, tempfile and the rule compiler (ipaddress) are imported where used: a run
# without network allow rules (nearly every run) needs none of them.
TYPE_CHECKING = False  # imported by every firejail run: no typing at run time
if TYPE_CHECKING:
    from typing import Any

    from pysb_core.providerkit import FilterTarget, LaunchPlan, Policy

FIREJAIL_CONFIG = "/etc/firejail/firejail.config"
NETWORK_CAPABILITIES = frozenset(
    {Capability.TCP_PORT, Capability.TCP_HOST, Capability.UDP_PORT, Capability.UDP_HOST}
)
BRIDGE_HINT = (
    "create a host bridge with an address (`ip link add pysb0 type bridge; "
    "ip addr add ADDR/24 dev pysb0; ip link set pysb0 up`, plus forwarding and NAT from it "
    "for traffic beyond the host) and name it in the profile: "
    "`providers: {firejail: {bridge: pysb0}}`"
)


def bridge_network() -> FilterTarget:
    """What firejail's ``--net=BRIDGE`` gives the sandbox: a veth named ``eth0`` on the
    bridge, no user-mode helper (no NAT, nothing forwarded), and its own loopback, which
    is not the host's (rules on the host's loopback are refused: :func:`rule_problems`).
    A function: the compiler's package (``ipaddress``) loads only for a filtered run."""
    from pysb_core.providerkit import FilterTarget

    return FilterTarget.bridge("eth0", name="firejail bridge")


def needs_network(policy: Policy) -> bool:
    """True when a rule allows traffic: loopback-only is then not what the profile says."""
    return any(rule.action == "allow" for rule in policy.network)


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


def bridge_exists(name: str) -> bool:
    """The interface exists in pysb's own network namespace (where firejail looks for it;
    /sys may show another namespace's interfaces)."""
    import socket

    try:
        socket.if_nametoindex(name)
    except OSError:
        return False
    return True


def host_problems(bridge: Any, *, as_root: bool) -> list[str]:
    """What the host lacks for firejail's filtered networking (empty when ready)."""
    problems = []
    if not bridge:
        problems.append(f"no bridge is configured: {BRIDGE_HINT}")
    elif not bridge_exists(str(bridge)):
        problems.append(f"the host bridge '{bridge}' does not exist: {BRIDGE_HINT}")
    if not as_root and restricted_network():
        problems.append(
            f"firejail lets only root use --net here: set `restricted-network no` in "
            f"{FIREJAIL_CONFIG}"
        )
    import shutil

    for tool in ("iptables-restore", "ip6tables-restore"):
        if shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin:/bin") is None:
            problems.append(f"{tool} is missing (apt-get install iptables)")
    return problems


def rule_problems(policy: Policy) -> list[str]:
    """Rules a bridged namespace cannot honour (the host's loopback, SPEC §4)."""
    from pysb_core.providerkit import rule_networks

    return [
        f"'{r}' ({r.source}) names the host's loopback, which a bridged sandbox cannot reach "
        "(use the bwrap or unshare provider for it)"
        for r in policy.network
        if r.action == "allow"
        and r.network != "*"
        and any(n.network_address.is_loopback for n in rule_networks(r, policy.pins))
    ]


def usable(bridge: Any, *, as_root: bool) -> frozenset[Capability]:
    """The network capabilities this host gives the provider."""
    if not bridge:
        return frozenset()  # the common case, without looking at the host
    return frozenset() if host_problems(bridge, as_root=as_root) else NETWORK_CAPABILITIES


def refusal(policy: Policy, bridge: Any, *, as_root: bool) -> ProviderUnavailableError | None:
    """The error a launch with network allow rules fails with (exit 125), or ``None``."""
    problems = [*host_problems(bridge, as_root=as_root), *rule_problems(policy)]
    if not problems:
        return None
    rules = ", ".join(f"'{r}' ({r.source})" for r in policy.network if r.action == "allow")
    return ProviderUnavailableError(
        f"firejail: the profile allows network traffic ({rules}), which firejail filters "
        "only on a bridged network namespace (--net=BRIDGE with --netfilter); "
        "refusing to start rather than run with the host's network:\n  " + "\n  ".join(problems),
        fix=BRIDGE_HINT if any("bridge" in p for p in problems) else None,
    )


class BridgedNetwork:
    """The files and options of one filtered launch (removed by :meth:`close`)."""

    def __init__(self, options: list[str], directory: str) -> None:
        self.options = options
        self.directory = directory
        self.files: dict[str, str] = {}

    @classmethod
    def create(cls, plan: LaunchPlan, bridge: str) -> BridgedNetwork:
        import tempfile

        from pysb_core.providerkit import compile_iptables

        v4_rules, v6_rules = compile_iptables(
            plan.policy.network, plan.policy.pins, bridge_network()
        )
        directory = tempfile.mkdtemp(prefix="pysb-firejail-net-")
        net = cls(options=[], directory=directory)
        try:
            v4 = net._write("rules4.net", v4_rules)
            v6 = net._write("rules6.net", v6_rules)
            net.options = [f"--net={bridge}", f"--netfilter={v4}", f"--netfilter6={v6}"]
            if plan.hosts_file is not None:
                net.options.append(f"--hosts-file={net._write('hosts', plan.hosts_file)}")
        except BaseException:
            net.close()
            raise
        return net

    def _write(self, name: str, text: str) -> str:
        path = os.path.join(self.directory, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.files[name] = text
        return path

    def close(self) -> None:
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)
