"""Network decisions inside the sandbox, without :mod:`ipaddress`.

The network guard binds its matcher when it is installed, before the program runs, so the
matcher must not import anything the program could have replaced by then, and every module it
imports costs the sandbox time at each start: :mod:`ipaddress` alone pulls ``functools`` and
``collections`` (~3.5 ms). This module needs only the C functions of ``_socket``: addresses
are parsed with ``inet_pton``/``inet_aton`` into integers, networks are (shift, key) pairs,
and address text is formatted here.

:class:`Matcher` decides exactly as :class:`pysb_core.policy.netrules.NetworkMatcher` (the reference
the OS providers compile from; tests/test_netmatch.py compares the two on random rules and
addresses): default deny, a matching ``deny`` beats any ``allow``, an IPv4-mapped IPv6
address is judged as IPv4 and one embedding IPv4 (translated, NAT64, compatible) is also
judged by the explicit deny rules of that IPv4 host, host-name rules match their pins, and a
name passes only if every address of it does. It reads the rules the parent already parsed
and canonicalised (:func:`pysb_core.policy.netrules.parse_rule`); a rule in another spelling (a
netmask, a legacy IPv4 form) raises ``ValueError``, so the guard fails to install.

Why one module: the network guard copies these functions into its sealed namespace as one set
(:mod:`pysb_guards.network.engine`), and they may import nothing but ``_socket``; every extra
module would be one more import at each sandbox start and one more thing a program could
replace. Address parsing, network algebra and the decision are therefore one sealed group
(``_seal.seal_group``), and splitting the module would split the group.
"""

from __future__ import annotations

from _socket import AF_INET, AF_INET6, inet_aton, inet_pton

TYPE_CHECKING = False  # no typing import at run time: this module is loaded in the sandbox
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    from pysb_core.policy import NetworkRule

__all__ = [
    "IP",
    "Matcher",
    "abstract_decision",
    "bind_scope",
    "canonical_text",
    "covers_every_address",
    "normalize_host",
    "numeric_host",
]

#: The characters of the legacy IPv4 forms ``inet_aton`` reads (``127.1``, ``0x7f000001``).
_LEGACY_V4_CHARS = "0123456789abcdefABCDEFxX."
_CACHE_LIMIT = 8192
_MAPPED_HIGH = 0xFFFF  # ::ffff:0:0/96, the kernel's IPv4-mapped form: address >> 32
# The IPv6 forms that carry an IPv4 address in their low 32 bits without being the mapped
# form, as address >> 32: IPv4-translated ::ffff:0:0:0/96, NAT64 64:ff9b::/96, compatible ::/96.
_TRANSLATED_HIGH = 0xFFFF << 16
_NAT64_HIGH = 0x64FF9B << 64
_COMPATIBLE_HIGH = 0


def normalize_host(name: str | bytes) -> str:
    """The spelling used as a key of :attr:`Policy.pins`: lower case, no final dot."""
    if isinstance(name, bytes | bytearray):
        name = bytes(name).decode("ascii")
    return name.strip().lower().rstrip(".")


#: An address is a plain tuple ``(version, value, scope)``: 4 or 6, the address as an int, and
#: an IPv6 scope (or None). No class of our own: the sandbox's guard runs these functions
#: with private globals, and a class (its methods, its ``__str__``) is something the program
#: could reach through the class graph and change.
if TYPE_CHECKING:
    IP = tuple[int, int, str | None]
else:
    IP = tuple


def ip_text(ip: tuple[int, int, str | None]) -> str:
    """The text of an address as :mod:`ipaddress` spells it on Python 3.11/3.12 (RFC 5952
    compression, hexadecimal groups even for an IPv4-mapped address), then ``%scope``."""
    text = format_ip(ip[0], ip[1])
    return text if ip[2] is None else text + "%" + ip[2]


def format_ip(version: int, value: int) -> str:
    """The text of an address: dotted quad, or compressed IPv6 (the first longest run of two
    or more zero groups becomes ``::``)."""
    if version == 4:
        return f"{value >> 24}.{(value >> 16) & 255}.{(value >> 8) & 255}.{value & 255}"
    groups = [(value >> shift) & 0xFFFF for shift in range(112, -1, -16)]
    best_start, best_len, start, length = -1, 0, -1, 0
    for i, group in enumerate(groups):
        if group == 0:
            if length == 0:
                start = i
            length += 1
            if length > best_len:
                best_start, best_len = start, length
        else:
            length = 0
    words = [f"{g:x}" for g in groups]
    if best_len < 2:
        return ":".join(words)
    return ":".join(words[:best_start]) + "::" + ":".join(words[best_start + best_len :])


def _strict_ip(text: str) -> IP | None:
    """What ``ipaddress.ip_address`` accepts: standard IPv4 text, IPv6 text with a scope."""
    try:
        return (4, int.from_bytes(inet_pton(AF_INET, text), "big"), None)
    except (OSError, ValueError):
        pass
    address, sep, scope = text.partition("%")
    if sep and (not scope or "%" in scope):
        return None
    try:
        value = int.from_bytes(inet_pton(AF_INET6, address), "big")
    except (OSError, ValueError):
        return None
    return (6, value, scope if sep else None)


def _legacy_v4(text: str) -> bool:
    """``re.match(r"^[0-9a-fA-FxX.]+$", text)`` without ``re``: one or more of those
    characters, then at most one final newline (what ``$`` accepts)."""
    body = text[:-1] if text.endswith("\n") else text
    return bool(body) and not body.strip(_LEGACY_V4_CHARS)


def numeric_host(host: str) -> IP | None:
    """The address a numeric host string denotes, or ``None`` for a name.

    Standard IPv4/IPv6 text (``[...]`` brackets and an IPv6 scope allowed) and the legacy
    IPv4 forms ``inet_aton`` reads (``127.1``, ``0x7f000001``, ``2130706433``), so that such
    spellings are judged by the address they mean instead of slipping past a rule as a name.
    """
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    ip = _strict_ip(text)
    if ip is None and _legacy_v4(text):
        try:
            return (4, int.from_bytes(inet_aton(text), "big"), None)
        except OSError:
            return None
    return ip


def _canonical(address: str | IP) -> IP:
    """Parse ``address``; an IPv4-mapped IPv6 address becomes the IPv4 one."""
    ip = address if type(address) is tuple else numeric_host(address)  # type: ignore[arg-type]
    if ip is None:
        raise ValueError(f"'{address}' is not an IP address")
    if ip[0] == 6 and ip[1] >> 32 == _MAPPED_HIGH:
        return (4, ip[1] & 0xFFFFFFFF, None)
    return ip


def canonical_text(address: str | IP) -> str:
    """``str(netrules.canonical_ip(address))``: raises ``ValueError`` for a non-address."""
    return ip_text(_canonical(address))


def _embedded_v4(ip: IP) -> IP | None:
    """The IPv4 address hidden in a translated, NAT64 or compatible IPv6 address."""
    if ip[0] != 6:
        return None
    high, low = ip[1] >> 32, ip[1] & 0xFFFFFFFF
    if high in (_TRANSLATED_HIGH, _NAT64_HIGH) or (high == _COMPATIBLE_HIGH and low > 1):
        return (4, low, None)
    return None


def _network(text: str) -> tuple[int, int, int]:
    """``(version, shift, key)`` of a canonical network: an address is in it when
    ``address >> shift == key``. Host bits are ignored (``strict=False``); an IPv4-mapped
    IPv6 network is the IPv4 network it means."""
    address, sep, prefix_text = text.partition("/")
    ip = _strict_ip(address)
    if ip is None or ip[2] is not None:
        raise ValueError(f"'{text}' is not a network in canonical form")
    version, value = ip[0], ip[1]
    bits = 32 if version == 4 else 128
    if not sep:
        prefix = bits
    elif prefix_text.isascii() and prefix_text.isdigit() and int(prefix_text) <= bits:
        prefix = int(prefix_text)
    else:
        raise ValueError(f"'{text}' is not a network in canonical form (prefix length)")
    if version == 6 and prefix >= 96 and value >> 32 == _MAPPED_HIGH:
        return (4, 128 - prefix, (value & 0xFFFFFFFF) >> (128 - prefix))
    return (version, bits - prefix, value >> (bits - prefix))


def bind_scope(network: str) -> str:
    """The network an ``in`` rule stands for, as rule text.

    An ``in`` rule names the address a server binds (SPEC §4), and a server bound on the
    wildcard address takes connections to every local address: ``0.0.0.0`` stands for
    every IPv4 address, ``::`` for every address (a Linux IPv6 socket bound there takes
    IPv4 connections too unless ``IPV6_V6ONLY`` is set). So the packet filters accept the
    connections that reach such a server, the host's loopback forward included, and the
    guard lets the program bind any one address under such a rule. Every other network,
    a CIDR such as ``0.0.0.0/0`` included, stands for itself.
    """
    if network == "0.0.0.0":
        return "0.0.0.0/0"
    if network == "::":
        return "*"
    return network


def _is_wide(network: str) -> bool:
    """A network that covers more than one address (so names outside the pins may resolve)."""
    if network == "*":
        return True
    if "/" in network:
        return _network(network)[1] > 0
    return False


# ---------------------------------------------------------------------------------------
# The decision engine: functions over plain data
# ---------------------------------------------------------------------------------------
#
# A matcher is a dict (see :func:`compile_matcher`); the decision functions take it first.
# What an address and a network *are* comes from its "algebra": integers here
# (:func:`integer_algebra`), :mod:`ipaddress` objects in the reference
# (:func:`pysb_core.policy.netrules.reference_algebra`). No class, no method lookup: the network
# guard re-creates these functions with private globals (``_seal.seal_group``) and keeps
# the dict in sealed code, where nothing the program can reach decides.


def _int_networks(rule: Any, pins: Mapping[str, Sequence[str]]) -> tuple[Any, ...]:
    """``(nets4, nets6)`` of a rule: (shift, key) pairs; a host name has its pins."""
    network = rule.network
    if network == "*":
        nets = [(4, 32, 0), (6, 128, 0)]
    elif "/" in network or numeric_host(network) is not None:
        nets = [_network(network)]
    else:
        nets = []
        for a in pins.get(normalize_host(network), ()):
            ip = _canonical(a)
            nets.append((ip[0], 0, ip[1]))
    v4 = tuple((shift, key) for version, shift, key in nets if version == 4)
    v6 = tuple((shift, key) for version, shift, key in nets if version == 6)
    return (v4, v6)


def _int_matches(nets: tuple[Any, ...], ip: IP) -> bool:
    value = ip[1]
    return any(value >> shift == key for shift, key in (nets[0] if ip[0] == 4 else nets[1]))


def integer_algebra() -> dict[str, Any]:
    """Addresses as ``(version, value, scope)`` tuples, networks as (shift, key) pairs."""
    return {
        "ip": _canonical,
        "text": canonical_text,
        "literal": numeric_host,
        "literal_text": ip_text,
        "embedded": _embedded_v4,
        "wide": _is_wide,
        "networks": _int_networks,
        "matches": _int_matches,
    }


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's ephemeral port range (``ip_local_port_range``): where a bind to port 0
    lands; Linux's default when it cannot be read."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", "rb") as f:  # no codec import
            low, high = (int(word) for word in f.read().split()[:2])
    except (OSError, ValueError):
        return (32768, 60999)
    return (low, high) if 0 < low <= high <= 65535 else (32768, 60999)


def _with_port_zero(
    ports: tuple[tuple[int, int], ...], deny: bool, ephemeral: tuple[int, int] | None
) -> tuple[tuple[int, int], ...]:
    """A bind to port 0 takes a port of the ephemeral range: an ``in`` allow covering the
    whole range allows it (what learning writes for it). A deny names port 0 itself (or
    ``*``) to refuse it, as before."""
    if deny or ephemeral is None or any(low <= 0 <= high for low, high in ports):
        return ports
    e_low, e_high = ephemeral
    if any(low <= e_low and e_high <= high for low, high in ports):
        return ((0, 0), *ports)
    return ports


def covers_every_address(rule: NetworkRule) -> bool:
    """Whether ``rule`` names every address, port and protocol (``any * *``).

    An abstract Unix socket (``"\\0name"``, or the name the kernel picks for ``bind("")``)
    has no path, host or port a rule could name, so no narrower rule can stand for it:
    only a rule over everything does (docs/network.md).
    """
    return (
        rule.network == "*"
        and "tcp" in rule.protocols
        and "udp" in rule.protocols
        and any(p.low == 0 and p.high == 65535 for p in rule.ports)
    )


def abstract_decision(
    rules: Iterable[NetworkRule], direction: str, label: Any = None
) -> tuple[Any, ...]:
    """The decision on an abstract Unix socket in ``direction`` (``in``: ``bind``, ``out``:
    ``connect``/``sendto``), by the rules over everything (:func:`covers_every_address`)
    alone, as :func:`decide` judges an address: a matching deny, else a matching allow,
    else the default deny ``(False, None)``; the deciding rule is ``label(rule)`` (or the
    rule). A rule naming some addresses or ports (``deny tcp * 25 out``) is not about them.
    """
    allowed = None
    for rule in rules:
        if rule.direction not in (direction, "any") or not covers_every_address(rule):
            continue
        if rule.action == "deny":
            return (False, rule if label is None else label(rule))
        if allowed is None:
            allowed = (True, rule if label is None else label(rule))
    return allowed if allowed is not None else (False, None)


def compile_matcher(
    rules: Iterable[NetworkRule],
    pins: Mapping[str, Sequence[str]] | None = None,
    algebra: Mapping[str, Any] | None = None,
    label: Any = None,
    ephemeral: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The matcher of ``rules`` and ``pins``: a dict the decision functions read.

    Each compiled rule is ``(label, networks, ports)``; ``label(rule)`` is what a decision
    names as its deciding rule (the rule itself by default; the guard in the sandbox wants
    its text, rendered now, before the program runs). ``ephemeral`` (the kernel's
    ephemeral port range, :func:`ephemeral_ports`) makes ``in`` rules over that whole range
    cover a bind to port 0, as learning writes them (docs/learning.md). An ``in`` rule on a
    wildcard address covers every local address (:func:`bind_scope`).
    """
    a = dict(algebra) if algebra is not None else integer_algebra()
    rules = tuple(rules)
    text = a["text"]
    pinned = {normalize_host(k): tuple(text(x) for x in v) for k, v in (pins or {}).items()}
    index: dict[tuple[str, str], tuple[list[Any], list[Any]]] = {
        (p, d): ([], []) for p in ("tcp", "udp") for d in ("in", "out")
    }
    networks = a["networks"]
    for rule in rules:
        compiled = (
            rule if label is None else label(rule),
            networks(rule, pinned),
            tuple((p.low, p.high) for p in rule.ports),
        )
        directions = ("in", "out") if rule.direction == "any" else (rule.direction,)
        deny = rule.action == "deny"
        scope = bind_scope(rule.network)
        inbound = (
            compiled[0],
            compiled[1] if scope == rule.network else networks(rule.replace(network=scope), {}),
            _with_port_zero(compiled[2], deny, ephemeral),
        )
        for proto in rule.protocols:
            for d in directions:
                denies, allows = index[(proto, d)]
                (denies if deny else allows).append(inbound if d == "in" else compiled)
    wide = a["wide"]
    reverse: dict[str, str] = {}
    for name, addrs in pinned.items():
        for x in addrs:
            reverse.setdefault(x, name)
    return {
        "rules": rules,
        "pins": pinned,
        "index": {k: (tuple(v[0]), tuple(v[1])) for k, v in index.items()},
        "abstract": {d: abstract_decision(rules, d, label) for d in ("in", "out")},
        "resolves_any_name": any(
            r.action == "allow" and r.direction in ("out", "any") and wide(r.network) for r in rules
        ),
        "reverse": reverse,
        "cache": {},
        "algebra": a,
    }


def decide(m: dict[str, Any], proto: str, ip: Any, port: int, direction: str) -> tuple[Any, ...]:
    """The rules alone on one parsed address: a matching deny, else a matching allow, else
    the default deny ``(False, None)``."""
    entry = m["index"].get((proto, direction))
    if entry is None:
        return (False, None)
    matches = m["algebra"]["matches"]
    denied = _first_match(entry[0], ip, port, matches)
    if denied is not None:
        return (False, denied[0])
    allowed = _first_match(entry[1], ip, port, matches)
    if allowed is not None:
        return (True, allowed[0])
    return (False, None)


def _first_match(
    compiled: tuple[Any, ...], ip: Any, port: int, matches: Any
) -> tuple[Any, ...] | None:
    """``(label,)`` of the first compiled rule covering ``port`` and ``ip``, else None."""
    for label, nets, ports in compiled:
        for low, high in ports:
            if low <= port <= high:
                if matches(nets, ip):
                    return (label,)
                break
    return None


def check(
    m: dict[str, Any], proto: str, address: Any, port: int, direction: str
) -> tuple[Any, ...]:
    """Decide one address: ``(allowed, deciding rule or None for the default deny)``,
    cached per ``(proto, address, port, direction)``."""
    key = (proto, address, port, direction)
    cache = m["cache"]
    hit: tuple[Any, ...] | None = cache.get(key)
    if hit is not None:
        return hit
    a = m["algebra"]
    ip = a["ip"](address)
    decision = decide(m, proto, ip, port, direction)
    v4 = a["embedded"](ip)
    if v4 is not None and decision[0]:
        # NAT64 and friends reach an IPv4 host: an explicit deny of that host still holds.
        inner = decide(m, proto, v4, port, direction)
        if not inner[0] and inner[1] is not None:
            decision = inner
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = decision
    return decision


def pinned(m: dict[str, Any], name: str) -> tuple[str, ...] | None:
    """The pinned addresses of ``name``, or ``None`` when no rule pinned it."""
    found: tuple[str, ...] | None = m["pins"].get(normalize_host(name))
    return found


def name_of(m: dict[str, Any], address: str) -> str | None:
    """The pinned name an address belongs to (for messages and learning)."""
    try:
        name: str | None = m["reverse"].get(m["algebra"]["text"](address))
        return name
    except ValueError:
        return None


def check_host(
    m: dict[str, Any],
    proto: str,
    host: str,
    port: int,
    direction: str,
    addresses: Sequence[str] | None = None,
) -> tuple[Any, ...]:
    """Decide a connection to a name: allowed only if every address of it is allowed.

    ``addresses`` defaults to the pins of ``host``; a literal ``host`` is judged alone; an
    unpinned name with no addresses is refused by the default rule.
    """
    if addresses is None:
        a = m["algebra"]
        literal = a["literal"](host)
        addresses = (a["literal_text"](literal),) if literal is not None else pinned(m, host) or ()
    if not addresses:
        return (False, None)
    first = None
    for address in addresses:
        decision = check(m, proto, address, port, direction)
        if not decision[0]:
            return decision
        if first is None:
            first = decision
    return first  # type: ignore[return-value]


def suggest(m: dict[str, Any], proto: str, host_or_ip: str, port: int, direction: str) -> str:
    """The rule line that would allow this access (names kept, addresses canonical)."""
    a = m["algebra"]
    literal = a["literal"](host_or_ip)
    target = a["text"](literal) if literal is not None else normalize_host(host_or_ip)
    return f"allow {proto} {target} {port} {direction}"


class Matcher:
    """The engine above as an object: ``check`` judges one address, ``check_host`` a name
    (every pinned address must pass); decisions are ``(allowed, deciding rule or None for
    the default deny)``. Used by tests and by the reference
    (:class:`pysb_core.policy.netrules.NetworkMatcher` brings its own algebra); the guard in the
    sandbox calls the functions on the dict directly.
    """

    #: The algebra's maker (the reference overrides it).
    _algebra = staticmethod(integer_algebra)

    def __init__(
        self, rules: Iterable[NetworkRule], pins: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        self._m = compile_matcher(rules, pins, self._algebra(), None, ephemeral_ports())

    @property
    def rules(self) -> tuple[NetworkRule, ...]:
        rules: tuple[NetworkRule, ...] = self._m["rules"]
        return rules

    @property
    def pins(self) -> dict[str, tuple[str, ...]]:
        pins: dict[str, tuple[str, ...]] = self._m["pins"]
        return pins

    @property
    def resolves_any_name(self) -> bool:
        return bool(self._m["resolves_any_name"])

    def check(self, proto: str, address: Any, port: int, direction: str) -> tuple[Any, ...]:
        return check(self._m, proto, address, port, direction)

    def check_host(
        self,
        proto: str,
        host: str,
        port: int,
        direction: str,
        addresses: Sequence[str] | None = None,
    ) -> tuple[Any, ...]:
        return check_host(self._m, proto, host, port, direction, addresses)

    def pinned(self, name: str) -> tuple[str, ...] | None:
        return pinned(self._m, name)

    def name_of(self, address: str) -> str | None:
        return name_of(self._m, address)

    def suggest(self, proto: str, host_or_ip: str, port: int, direction: str) -> str:
        return suggest(self._m, proto, host_or_ip, port, direction)
