"""Network decisions inside the sandbox, without :mod:`ipaddress`.

The network guard binds its matcher when it is installed, before the program runs, so the
matcher must not import anything the program could have replaced by then, and every module it
imports costs the sandbox time at each start: :mod:`ipaddress` alone pulls ``functools`` and
``collections`` (~3.5 ms). This module needs only the C functions of ``_socket``: addresses
are parsed with ``inet_pton``/``inet_aton`` into integers, networks are (shift, key) pairs,
and address text is formatted here.

:class:`Matcher` decides exactly as :class:`pysb_core.netrules.NetworkMatcher` (the reference
the OS providers compile from; tests/test_netmatch.py compares the two on random rules and
addresses): default deny, a matching ``deny`` beats any ``allow``, an IPv4-mapped IPv6
address is judged as IPv4 and one embedding IPv4 (translated, NAT64, compatible) is also
judged by the explicit deny rules of that IPv4 host, host-name rules match their pins, and a
name passes only if every address of it does. It reads the rules the parent already parsed
and canonicalised (:func:`pysb_core.netrules.parse_rule`); a rule in another spelling (a
netmask, a legacy IPv4 form) raises ``ValueError``, so the guard fails to install.
"""

from __future__ import annotations

from _socket import AF_INET, AF_INET6, inet_aton, inet_pton

TYPE_CHECKING = False  # no typing import at run time: this module is loaded in the sandbox
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    from pysb_core.policy import NetworkRule

__all__ = ["IP", "Matcher", "canonical_text", "normalize_host", "numeric_host"]

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


class IP:
    """One parsed address: ``version`` (4 or 6), ``value`` (an int) and an IPv6 ``scope``.

    ``str()`` spells it as :mod:`ipaddress` does on Python 3.11/3.12 (RFC 5952 compression,
    hexadecimal groups even for an IPv4-mapped address), then ``%scope``.
    """

    __slots__ = ("scope", "value", "version")

    def __init__(self, version: int, value: int, scope: str | None = None) -> None:
        self.version = version
        self.value = value
        self.scope = scope

    def __str__(self) -> str:
        text = format_ip(self.version, self.value)
        return text if self.scope is None else f"{text}%{self.scope}"

    def __repr__(self) -> str:
        return f"IP({self})"


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
        return IP(4, int.from_bytes(inet_pton(AF_INET, text), "big"))
    except (OSError, ValueError):
        pass
    address, sep, scope = text.partition("%")
    if sep and (not scope or "%" in scope):
        return None
    try:
        value = int.from_bytes(inet_pton(AF_INET6, address), "big")
    except (OSError, ValueError):
        return None
    return IP(6, value, scope if sep else None)


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
            return IP(4, int.from_bytes(inet_aton(text), "big"))
        except OSError:
            return None
    return ip


def _canonical(address: str | IP) -> IP:
    """Parse ``address``; an IPv4-mapped IPv6 address becomes the IPv4 one."""
    ip = address if isinstance(address, IP) else numeric_host(address)
    if ip is None:
        raise ValueError(f"'{address}' is not an IP address")
    if ip.version == 6 and ip.value >> 32 == _MAPPED_HIGH:
        return IP(4, ip.value & 0xFFFFFFFF)
    return ip


def canonical_text(address: str | IP) -> str:
    """``str(netrules.canonical_ip(address))``: raises ``ValueError`` for a non-address."""
    return str(_canonical(address))


def _embedded_v4(ip: IP) -> IP | None:
    """The IPv4 address hidden in a translated, NAT64 or compatible IPv6 address."""
    if ip.version != 6:
        return None
    high, low = ip.value >> 32, ip.value & 0xFFFFFFFF
    if high in (_TRANSLATED_HIGH, _NAT64_HIGH) or (high == _COMPATIBLE_HIGH and low > 1):
        return IP(4, low)
    return None


def _network(text: str) -> tuple[int, int, int]:
    """``(version, shift, key)`` of a canonical network: an address is in it when
    ``address >> shift == key``. Host bits are ignored (``strict=False``); an IPv4-mapped
    IPv6 network is the IPv4 network it means."""
    address, sep, prefix_text = text.partition("/")
    ip = _strict_ip(address)
    if ip is None or ip.scope is not None:
        raise ValueError(f"'{text}' is not a network in canonical form")
    bits = 32 if ip.version == 4 else 128
    if not sep:
        prefix = bits
    elif prefix_text.isascii() and prefix_text.isdigit() and int(prefix_text) <= bits:
        prefix = int(prefix_text)
    else:
        raise ValueError(f"'{text}' is not a network in canonical form (prefix length)")
    if ip.version == 6 and prefix >= 96 and ip.value >> 32 == _MAPPED_HIGH:
        return (4, 128 - prefix, (ip.value & 0xFFFFFFFF) >> (128 - prefix))
    return (ip.version, bits - prefix, ip.value >> (bits - prefix))


def _is_wide(network: str) -> bool:
    """A network that covers more than one address (so names outside the pins may resolve)."""
    if network == "*":
        return True
    if "/" in network:
        return _network(network)[1] > 0
    return False


class _Compiled:
    """One rule, ready to match: ports as (low, high), networks as (shift, key) by version."""

    __slots__ = ("nets4", "nets6", "ports", "rule")

    def __init__(self, rule: NetworkRule, nets: Iterable[tuple[int, int, int]]) -> None:
        self.rule = rule
        nets = tuple(nets)
        self.nets4 = tuple((shift, key) for version, shift, key in nets if version == 4)
        self.nets6 = tuple((shift, key) for version, shift, key in nets if version == 6)
        self.ports = tuple((p.low, p.high) for p in rule.ports)

    def matches(self, ip: IP, port: int) -> bool:
        for low, high in self.ports:
            if low <= port <= high:
                break
        else:
            return False
        value = ip.value
        for shift, key in self.nets4 if ip.version == 4 else self.nets6:
            if value >> shift == key:
                return True
        return False


class Matcher:
    """Decides connections and binds against the rules and pinned host names.

    ``check`` judges one address, ``check_host`` a name (every pinned address must pass);
    decisions are ``(allowed, deciding rule or None for the default deny)`` and are cached
    per ``(proto, address, port, direction)``.

    The decision logic lives here once. What an address and a network *are* is in the
    methods of the "address algebra" section: integers here (the sandbox's matcher), and
    :mod:`ipaddress` objects in :class:`pysb_core.netrules.NetworkMatcher`, the reference
    the OS providers compile from, which overrides only those methods.
    """

    #: How one rule is compiled for :meth:`_decide` (a subclass brings its own networks).
    _compiled: Any = _Compiled

    def __init__(
        self, rules: Iterable[NetworkRule], pins: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        self.rules = tuple(rules)
        self.pins: dict[str, tuple[str, ...]] = {
            normalize_host(k): tuple(self._text(a) for a in v) for k, v in (pins or {}).items()
        }
        self._index: dict[tuple[str, str], tuple[list, list]] = {
            (p, d): ([], []) for p in ("tcp", "udp") for d in ("in", "out")
        }
        for rule in self.rules:
            compiled = self._compiled(rule, self._rule_networks(rule))
            directions = ("in", "out") if rule.direction == "any" else (rule.direction,)
            for proto in rule.protocols:
                for d in directions:
                    denies, allows = self._index[(proto, d)]
                    (denies if rule.action == "deny" else allows).append(compiled)
        self.resolves_any_name = any(
            r.action == "allow" and r.direction in ("out", "any") and self._wide(r.network)
            for r in self.rules
        )
        self._reverse: dict[str, str] = {}
        for name, addrs in self.pins.items():
            for a in addrs:
                self._reverse.setdefault(a, name)
        self._cache: dict[tuple[str, object, int, str], tuple[bool, NetworkRule | None]] = {}

    # -- address algebra (overridden by the ipaddress-based reference) ------------------

    @staticmethod
    def _ip(address: Any) -> Any:
        """The canonical address object of ``address`` (ValueError when it is none)."""
        return _canonical(address)

    @staticmethod
    def _text(address: Any) -> str:
        """The canonical text of an address."""
        return canonical_text(address)

    @staticmethod
    def _literal(host: str) -> Any:
        """The address ``host`` spells, or None for a name."""
        return numeric_host(host)

    @staticmethod
    def _embedded(ip: Any) -> Any:
        """The IPv4 address an IPv6 address carries (NAT64 and friends), or None."""
        return _embedded_v4(ip)

    @staticmethod
    def _wide(network: str) -> bool:
        """Whether a rule's network covers more than one address."""
        return _is_wide(network)

    def _rule_networks(self, rule: NetworkRule) -> list[tuple[int, int, int]]:
        network = rule.network
        if network == "*":
            return [(4, 32, 0), (6, 128, 0)]
        if "/" in network or numeric_host(network) is not None:
            return [_network(network)]
        # A host name: the pinned addresses, nothing when it did not resolve.
        nets = []
        for a in self.pins.get(normalize_host(network), ()):
            ip = _canonical(a)
            nets.append((ip.version, 0, ip.value))
        return nets

    # -- one address -------------------------------------------------------------------

    def check(
        self, proto: str, address: Any, port: int, direction: str
    ) -> tuple[bool, NetworkRule | None]:
        """Decide one address: ``(allowed, deciding rule or None for the default deny)``."""
        key = (proto, address, port, direction)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        ip = self._ip(address)
        decision = self._decide(proto, ip, port, direction)
        v4 = self._embedded(ip)
        if v4 is not None and decision[0]:
            # NAT64 and friends reach an IPv4 host: an explicit deny of that host still holds.
            inner = self._decide(proto, v4, port, direction)
            if not inner[0] and inner[1] is not None:
                decision = inner
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = decision
        return decision

    def _decide(
        self, proto: str, ip: Any, port: int, direction: str
    ) -> tuple[bool, NetworkRule | None]:
        entry = self._index.get((proto, direction))
        if entry is None:
            return (False, None)
        denies, allows = entry
        for c in denies:
            if c.matches(ip, port):
                return (False, c.rule)
        for c in allows:
            if c.matches(ip, port):
                return (True, c.rule)
        return (False, None)

    # -- names --------------------------------------------------------------------------

    def pinned(self, name: str | bytes) -> tuple[str, ...] | None:
        """The pinned addresses of ``name``, or ``None`` when no rule pinned it."""
        return self.pins.get(normalize_host(name))

    def name_of(self, address: str) -> str | None:
        """The pinned name an address belongs to (for messages and learning)."""
        try:
            return self._reverse.get(self._text(address))
        except ValueError:
            return None

    def check_host(
        self,
        proto: str,
        host: str,
        port: int,
        direction: str,
        addresses: Sequence[str] | None = None,
    ) -> tuple[bool, NetworkRule | None]:
        """Decide a connection to a name: allowed only if every address of it is allowed.

        ``addresses`` defaults to the pins of ``host``; a literal ``host`` is judged alone; an
        unpinned name with no addresses is refused by the default rule.
        """
        if addresses is None:
            literal = self._literal(host)
            addresses = (str(literal),) if literal is not None else self.pinned(host) or ()
        if not addresses:
            return (False, None)
        first = None
        for a in addresses:
            decision = self.check(proto, a, port, direction)
            if not decision[0]:
                return decision
            if first is None:
                first = decision
        return first  # type: ignore[return-value]

    # -- messages -----------------------------------------------------------------------

    def suggest(self, proto: str, host_or_ip: str, port: int, direction: str) -> str:
        """The rule line that would allow this access (names kept, addresses canonical)."""
        literal = self._literal(host_or_ip)
        target = self._text(literal) if literal is not None else normalize_host(host_or_ip)
        return f"allow {proto} {target} {port} {direction}"
