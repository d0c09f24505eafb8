"""Compile a launch plan into the data :func:`pysb_landlock.child.restrict` takes.

Runs in the parent (pure: no system call but ``os.path`` checks), so that ``pysb check``
can show exactly what the kernel will be told, and so that the sandboxed interpreter only
has to open paths and add rules.

Landlock is allow-only and path-hierarchy based: it cannot hide a path, rename one, make
a file inside a writable tree read-only, or filter by host. Whatever of the plan it cannot
express is listed in :attr:`Compiled.gaps` (the Python layer, when active, covers it).
"""

from __future__ import annotations

import os

from pysb_core.providerkit import abstract_unix_decision, is_within, seccomp_covers

TYPE_CHECKING = False  # typing costs ~1.5 ms at every start
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from pysb_core.providerkit import LaunchPlan, NetworkRule

#: What every process needs to start and link: the loader's libraries and cache, the
#: time zone, its own /proc entry (only its own: /proc/self resolves to the sandboxed
#: process at restrict time, so other processes' environ and maps stay closed).
SYSTEM_READ = (
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libx32",
    "/usr/local/lib",
    "/etc/ld.so.cache",
    "/etc/ld.so.preload",
    "/etc/localtime",
    "/dev/urandom",
    "/dev/random",
    "/proc/self",
)
#: Devices used read-write by ordinary programs (ioctls allowed: termios on /dev/tty).
SYSTEM_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx")
#: Name-service files native code reads to resolve or connect; only when some network
#: rule allows traffic.
NETWORK_READ = (
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
)

#: Networks that mean "every host" for a port-only filter.
ANY_HOST = frozenset({"*", "0.0.0.0/0", "::/0"})

Ranges = list[tuple[int, int]]
FULL: Ranges = [(0, 65535)]


def merge(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sorted, non-overlapping, non-adjacent ranges."""
    out: Ranges = []
    for low, high in sorted(ranges):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def subtract(ranges: Ranges, removed: Ranges) -> Ranges:
    """``ranges`` minus ``removed`` (both merged)."""
    out: Ranges = []
    for low, high in ranges:
        pieces = [(low, high)]
        for rlow, rhigh in removed:
            nxt = []
            for plow, phigh in pieces:
                if rhigh < plow or rlow > phigh:
                    nxt.append((plow, phigh))
                    continue
                if plow < rlow:
                    nxt.append((plow, rlow - 1))
                if rhigh < phigh:
                    nxt.append((rhigh + 1, phigh))
            pieces = nxt
        out.extend(pieces)
    return merge(out)


def format_ranges(ranges: Ranges | None) -> str:
    if ranges is None:
        return "any port (not restricted)"
    if not ranges:
        return "none"
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


#: Subdirectories of an implicit exposure under /etc that are never granted (private TLS
#: keys under ``/etc/ssl``): Landlock cannot carve a hole, so the parent's other entries are granted
#: one by one instead.
PRIVATE_NAMES = frozenset({"private"})
SPLIT_ROOTS = ("/etc",)


def _without_private(path: str) -> list[str]:
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return [path]  # a file, or unreadable: granted (or skipped by the child) as is
    if not PRIVATE_NAMES.intersection(names):
        return [path]
    return [os.path.join(path, n) for n in names if n not in PRIVATE_NAMES]


class Compiled:
    """The ruleset for one run, plus what Landlock cannot express.

    A plain class (not a dataclass): ``dataclasses`` costs ~1 ms of imports at every run.
    """

    def __init__(self, abi: int, *, scope: bool = False) -> None:
        self.abi = abi
        self.read: list[str] = []
        self.write: list[str] = []
        #: The profile's exposures (canonical paths): opened without following symlinks.
        self.exact: list[str] = []
        self.devices: list[str] = []
        self.connect: Ranges | None = None
        self.bind: Ranges | None = None
        self.scope = scope
        #: Whether the scope covers abstract Unix sockets too: not when the profile allows
        #: them out (a rule over every address: ``abstract_unix_decision``), whose
        #: connections to the host's abstract sockets the scope would refuse.
        self.abstract_scope = True
        #: Capabilities the sandbox keeps (everything else is dropped: see caps.py).
        self.keep_caps: list[int] = [1, 2]
        #: Whether some rule allows UDP (the seccomp filter then lets UDP sockets be created).
        self.udp = False
        #: Whether AF_UNIX sockets may be created (provider option ``unix-sockets``).
        self.unix = False
        #: Whether SysV IPC is allowed (provider option ``sysv-ipc``): the host's objects.
        self.sysv_ipc = False
        #: Whether this machine has a seccomp table (x86_64, aarch64).
        self.seccomp = True
        #: Rules the OS layer does not enforce; ``pysb check`` already sees them through
        #: the provider's capabilities (hosts, UDP, ignore, renames).
        self.gaps: list[str] = []
        #: Weaker-than-written grants no capability flag reveals (a read-only exposure or
        #: a profile file inside a read-write one): shown by ``describe``, noted at launch.
        self.warnings: list[str] = []

    def args(self) -> dict[str, Any]:
        """Keyword arguments of ``restrict()``, JSON-safe (they cross to the child as JSON)."""
        return {
            "abi": self.abi,
            "read": self.read,
            "write": self.write,
            "devices": self.devices,
            "connect": None if self.connect is None else [list(r) for r in self.connect],
            "bind": None if self.bind is None else [list(r) for r in self.bind],
            "scope": self.scope,
            "abstract_scope": self.abstract_scope,
            "keep_caps": self.keep_caps,
            "udp": self.udp,
            "unix": self.unix,
            "sysv_ipc": self.sysv_ipc,
            "exact": self.exact,
        }

    def describe(self) -> list[str]:
        lines = [f"landlock ABI {self.abi}"]
        lines += [f"  read+execute: {p}" for p in self.read]
        lines += [f"  read-write:   {p}" for p in self.write]
        lines += [f"  device rw:    {p}" for p in self.devices]
        if self.abi >= 4:
            lines.append(f"  tcp connect ports (any host): {format_ranges(self.connect)}")
            lines.append(f"  tcp bind ports (any address): {format_ranges(self.bind)}")
        else:
            lines.append("  tcp: not restricted (needs ABI 4, Linux 6.7)")
        if not self.seccomp:
            lines.append("  udp, raw and other sockets: not restricted (no seccomp table here)")
        elif self.udp:
            lines.append("  udp: every host and port (a rule allows some udp; seccomp allows all)")
        else:
            lines.append("  udp, sctp, mptcp, icmp sockets: refused (seccomp)")
        if self.seccomp:
            lines.append(
                "  io_uring, ptrace, TCP Fast Open, vsock/packet/other socket families, "
                "setting extended attributes, TIOCSTI/TIOCLINUX: refused (seccomp)"
            )
            lines.append(
                "  sysv ipc: allowed (sysv-ipc: true): the host's segments, queues and "
                "semaphores reachable"
                if self.sysv_ipc
                else "  sysv ipc: refused (seccomp; no IPC namespace under landlock)"
            )
            lines.append(
                "  new unix sockets: allowed (unix-sockets: true): named host sockets reachable"
                if self.unix
                else "  new unix sockets: refused (seccomp; socketpair still works)"
            )
        if self.scope and not self.abstract_scope:
            lines.append(
                "  scoped: signals stay inside the sandbox; abstract unix sockets not scoped "
                "(a network rule allows every address out)"
            )
        elif self.scope:
            lines.append("  scoped: signals and abstract unix sockets stay inside the sandbox")
        else:
            lines.append(
                "  signals and abstract unix sockets: not scoped (needs ABI 6, Linux 6.12)"
            )
        caps = {1: "dac_override", 2: "dac_read_search", 10: "net_bind_service"}
        kept = ", ".join(caps.get(n, str(n)) for n in self.keep_caps)
        lines.append(f"  capabilities kept (all others dropped): {kept}")
        if os.geteuid() == 0 and "/" not in self.write:  # pysb_landlock.rofs
            lines.append(
                "  as root: every mount outside the read-write paths read-only "
                "(chmod, chown, utime refused there: EROFS)"
            )
        else:
            lines.append(
                "  not restricted by landlock: chmod, utime, stat of your own files "
                "(chown needs a dropped cap)"
            )
        lines += [f"  not expressible: {g}" for g in self.gaps]
        lines += [f"  warning: {w}" for w in self.warnings]
        return lines


#: What the wildcard a server binds stands for in an ``in`` rule: every local address
#: (SPEC §4), as the guard's matcher and the packet filters decide
#: (``pysb_core.policy.netmatch.bind_scope``; tests/test_compiler.py holds the two equal).
WILDCARD_BIND = {"0.0.0.0": "0.0.0.0/0", "::": "*"}


def _scope(rule: NetworkRule, direction: str) -> str:
    """The network ``rule`` stands for in ``direction`` (``in``: bind, ``out``: connect):
    for a bind, the wildcard address is every local address, so landlock's port-only rule
    says what such a rule says."""
    if direction == "in":
        return WILDCARD_BIND.get(rule.network, rule.network)
    return rule.network


def _tcp_ports(rules: Iterable[NetworkRule], direction: str) -> Ranges | None:
    """Ports the OS layer lets through for one operation (``in``: bind, ``out``: connect),
    whatever the host; ``None`` when every port is allowed (the operation is then left
    unhandled)."""
    allowed: list[tuple[int, int]] = []
    denied: list[tuple[int, int]] = []
    for r in rules:
        if "tcp" not in r.protocols or r.direction not in (direction, "any"):
            continue
        spans = [(p.low, p.high) for p in r.ports]
        if r.action == "allow":
            allowed += spans
        elif _scope(r, direction) in ANY_HOST:
            # A deny for every host is a port rule: it can be subtracted (for 0.0.0.0/0 or
            # ::/0 alone this also denies the other family: stricter, never wider).
            denied += spans
    ports = subtract(merge(allowed), merge(denied))
    return None if ports == FULL else ports


def _with_port_zero(ports: Ranges | None, rules: Iterable[NetworkRule]) -> Ranges | None:
    """Landlock checks a bind to port 0 as port 0, though the kernel then picks a port of the
    ephemeral range: allowed when an ``in`` rule allows that whole range (what learning
    writes for it), unless a deny for every host names port 0 -- as the guard decides
    (:func:`pysb_core.policy.netmatch.compile_matcher`)."""
    if ports is None or any(low <= 0 for low, _ in ports):
        return ports
    from pysb_core.providerkit import ephemeral_ports

    e_low, e_high = ephemeral_ports()
    serves = any(
        r.action == "allow"
        and "tcp" in r.protocols
        and r.direction in ("in", "any")
        and any(p.low <= e_low and e_high <= p.high for p in r.ports)
        for r in rules
    )
    refused = any(
        r.action == "deny"
        and "tcp" in r.protocols
        and r.direction in ("in", "any")
        and _scope(r, "in") in ANY_HOST
        and any(p.low <= 0 <= p.high for p in r.ports)
        for r in rules
    )
    return [(0, 0), *ports] if serves and not refused else ports


def _network_gaps(rules: Iterable[NetworkRule]) -> list[str]:
    gaps = []
    for r in rules:
        where = f"{r} ({r.source})"
        if "udp" in r.protocols:
            gaps.append(f"{where}: landlock cannot filter udp (python layer only)")
        if "tcp" not in r.protocols:
            continue
        directions = ("in", "out") if r.direction == "any" else (r.direction,)
        scopes = {_scope(r, d) for d in directions}
        if r.action == "deny" and not scopes <= ANY_HOST:
            gaps.append(
                f"{where}: landlock cannot deny by host; it only narrows ports (python layer only)"
            )
        elif r.action == "allow" and scopes != {"*"}:
            gaps.append(
                f"{where}: landlock allows port(s) {','.join(map(str, r.ports))} "
                f"for every host, not only {r.network} (the python layer narrows it)"
            )
    return gaps


def compile_plan(plan: LaunchPlan, abi: int, *, framework_dirs: Iterable[str] = ()) -> Compiled:
    """The ruleset for ``plan`` on a kernel with Landlock ABI ``abi``."""
    c = Compiled(abi=abi, scope=abi >= 6)
    c.abstract_scope = not abstract_unix_decision(plan.policy.network, "out")[0]

    def add(lst: list[str], path: str) -> None:
        if path not in lst:
            lst.append(path)

    for e in plan.exposures:
        if e.implicit and not e.writable and any(is_within(e.path, r) for r in SPLIT_ROOTS):
            for path in _without_private(e.path):
                add(c.read, path)
            continue
        add(c.write if e.writable else c.read, e.path)
        if not e.implicit:
            add(c.exact, e.path)
        if e.renamed:
            c.gaps.append(
                f"{e.path}:{e.target} ({e.source}): landlock cannot rename; the OS rule covers "
                f"{e.path} and the name {e.target} is a python-layer path translation"
            )
    for d in framework_dirs:
        if not any(is_within(d, r) for r in c.read + c.write):
            add(c.read, d)
    for p in SYSTEM_READ:
        add(c.read, p)
    if plan.policy.allows_network():
        for p in NETWORK_READ:
            add(c.read, p)
    for p in SYSTEM_DEVICES:
        add(c.devices, p)

    for e in plan.exposures:
        if e.writable:
            continue
        for w in plan.exposures:
            if w.writable and w.path != e.path and is_within(e.path, w.path):
                c.warnings.append(
                    f"read-only {e.path} ({e.source}) lies inside read-write {w.path}: "
                    "landlock grants the union, so it is writable at the OS layer"
                )
    for p in plan.protected:
        for w in plan.exposures:
            if w.writable and is_within(p, w.path):
                c.warnings.append(
                    f"profile file {p} lies inside read-write {w.path}: landlock cannot keep it "
                    "read-only (python layer only)"
                )
                break
    if plan.hidden or plan.policy.ignore:
        globs = ", ".join(i.pattern for i in plan.policy.ignore) or ", ".join(plan.hidden)
        c.gaps.append(f"ignore {globs}: landlock cannot hide paths (python layer only)")

    rules = plan.policy.network
    if abi >= 4:
        c.connect = _tcp_ports(rules, "out")
        c.bind = _with_port_zero(_tcp_ports(rules, "in"), rules)
    c.gaps += _network_gaps(rules)
    c.udp = any(r.action == "allow" and "udp" in r.protocols for r in rules)
    c.seccomp = seccomp_covers()
    if c.bind is None or any(high >= 1 and low < 1024 for low, high in c.bind):
        c.keep_caps.append(10)  # CAP_NET_BIND_SERVICE: a bind rule allows a port < 1024
    return c
