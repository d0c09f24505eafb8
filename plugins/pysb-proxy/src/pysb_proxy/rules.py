"""The ``egress:`` rule grammar and the decision over one request (SPEC §4, egress).

A rule is ``ACTION URL-PATTERN [METHODS]``: ``allow`` or ``deny``;
``scheme://host[:port][/path-glob]`` with ``http`` or ``https``, a host name (``*.`` for
any subdomain), an IPv4 address or a bracketed IPv6 one; an optional comma list of HTTP
methods. ``deny`` beats ``allow`` whatever the order; nothing is allowed by default.

Why a path is judged decoded and in normal form: the server the request goes to resolves
``%61dmin`` to ``admin`` and ``/v1/../admin`` to ``/admin``; a rule written for
``/v1/*`` must not allow what the server will read as ``/admin``. A path whose decoded
form has a ``.``, ``..`` or empty segment, a backslash, an encoded slash or a NUL is refused
outright (no client sends one for a real API call).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import unquote

SCHEMES = {"http": 80, "https": 443}
#: A method is an HTTP token; rules name them in upper case.
_METHOD = re.compile(r"^[A-Z][A-Z-]{0,31}$")
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
#: Printable ASCII without space: what a URL pattern may hold.
_URL_CHARS = re.compile(r"^[\x21-\x7e]+$")
MAX_RULE_LENGTH = 2048


class RuleError(ValueError):
    """A rule that does not parse; the message says what is wrong, without FILE:LINE."""


@dataclass(frozen=True)
class EgressRule:
    """One ``egress:`` line, parsed. ``source`` is ``FILE:LINE``; ``text`` the line."""

    action: str
    scheme: str
    host: str
    port: int
    path: str | None
    methods: frozenset[str] | None
    source: str
    text: str

    @property
    def inspects_requests(self) -> bool:
        """Whether judging this rule needs the request itself (path or method), not only
        the host: for HTTPS that means the proxy must decrypt."""
        return self.path is not None or self.methods is not None

    @property
    def names_address(self) -> bool:
        """The rule's host is an address (or ``localhost``): it may reach a loopback,
        private or link-local address, which a name alone never may (SSRF)."""
        return self.host == "localhost" or is_ip(self.host)

    def matches_host(self, scheme: str, host: str, port: int) -> bool:
        if scheme != self.scheme or port != self.port:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:]) and len(host) > len(self.host) - 1
        return host == self.host

    def matches(self, request: Request) -> bool:
        if not self.matches_host(request.scheme, request.host, request.port):
            return False
        if self.methods is not None and request.method not in self.methods:
            return False
        return self.path is None or fnmatchcase(request.path, self.path)


@dataclass(frozen=True)
class Request:
    """What a rule judges: ``path`` is decoded, without the query string."""

    scheme: str
    host: str
    port: int
    path: str
    method: str

    @property
    def url(self) -> str:
        """The URL as events and refusals show it (no query string: it may hold tokens)."""
        default = SCHEMES[self.scheme] == self.port
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}{'' if default else f':{self.port}'}{self.path}"


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def normalize_host(host: str) -> str:
    """Lower case, no trailing dot, brackets off an IPv6 address, IPv4-mapped as IPv4.

    Raises :class:`RuleError` for anything that is neither an address nor a DNS name.
    """
    if host.startswith("[") and host.endswith("]"):
        inner = host[1:-1]
        try:
            addr = ipaddress.IPv6Address(inner)
        except ValueError:
            raise RuleError(f"{host!r} is not an IPv6 address") from None
        return str(addr.ipv4_mapped or addr)
    host = host.lower().rstrip(".")
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    labels = host.split(".")
    if not host or len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise RuleError(f"{host!r} is not a host name or an address")
    if labels[-1].isdigit():
        raise RuleError(f"{host!r} is not a host name or an address")
    return host


def normal_path(raw: str) -> str:
    """The decoded path a rule judges; :class:`RuleError` when it is not in normal form."""
    path = raw.split("?", 1)[0].split("#", 1)[0] or "/"
    if not path.startswith("/"):
        raise RuleError(f"path {path!r} does not start with '/'")
    lowered = path.lower()
    if "%2f" in lowered or "%5c" in lowered or "%00" in lowered:
        raise RuleError(f"path {path!r} holds an encoded '/', '\\' or NUL")
    decoded = unquote(path, errors="strict")
    if "\\" in decoded or "\x00" in decoded:
        raise RuleError(f"path {path!r} holds a backslash or NUL")
    if any(segment in (".", "..") for segment in decoded.split("/")):
        raise RuleError(f"path {path!r} has a '.' or '..' segment")
    if "//" in decoded:  # servers read /v1//admin as /v1/admin, which a deny names
        raise RuleError(f"path {path!r} has an empty segment")
    return decoded


def parse_rule(text: str, source: str) -> EgressRule:
    """Parse one rule; :class:`RuleError` says what is wrong with it."""
    if not isinstance(text, str):
        raise RuleError(f"a rule is a string like 'allow https://api.example.com', not {text!r}")
    if len(text) > MAX_RULE_LENGTH:
        raise RuleError(f"a rule is at most {MAX_RULE_LENGTH} characters")
    words = text.split()
    if len(words) not in (2, 3):
        raise RuleError(f"{text!r}: expected 'allow|deny URL-PATTERN [METHODS]'")
    action, pattern = words[0], words[1]
    if action not in ("allow", "deny"):
        raise RuleError(f"{text!r}: the action is 'allow' or 'deny', not {action!r}")
    methods = _methods(words[2]) if len(words) == 3 else None
    scheme, sep, rest = pattern.partition("://")
    if not sep or scheme not in SCHEMES:
        raise RuleError(f"{pattern!r}: the pattern starts with http:// or https://")
    if not _URL_CHARS.match(rest):
        raise RuleError(f"{pattern!r}: a URL pattern is printable ASCII without spaces")
    authority, slash, path_glob = rest.partition("/")
    if "@" in authority:
        raise RuleError(f"{pattern!r}: credentials have no place in a pattern (use secrets:)")
    host, port = _authority(authority, scheme, pattern)
    path = None
    if slash and path_glob not in ("", "*"):
        path = "/" + path_glob
        if "?" in path or "#" in path:
            raise RuleError(f"{pattern!r}: a pattern has no query or fragment")
        try:
            path = normal_path(path)
        except (RuleError, UnicodeDecodeError) as exc:
            raise RuleError(f"{pattern!r}: {exc}") from None
    return EgressRule(action, scheme, host, port, path, methods, source, text)


def _methods(word: str) -> frozenset[str]:
    names = word.split(",")
    bad = [m for m in names if not _METHOD.match(m)]
    if bad or not names:
        raise RuleError(
            f"{word!r}: methods are a comma list of HTTP methods in upper case, like GET,POST"
        )
    return frozenset(names)


def _authority(authority: str, scheme: str, pattern: str) -> tuple[str, int]:
    if not authority:
        raise RuleError(f"{pattern!r}: no host")
    host, port_text = authority, ""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise RuleError(f"{pattern!r}: unclosed '['")
        host, port_text = authority[: end + 1], authority[end + 1 :]
        if port_text and not port_text.startswith(":"):
            raise RuleError(f"{pattern!r}: junk after the address")
        port_text = port_text[1:]
    elif ":" in authority:
        host, _, port_text = authority.rpartition(":")
    wildcard = host.startswith("*.")
    try:
        name = normalize_host(host[2:] if wildcard else host)
    except RuleError as exc:
        raise RuleError(f"{pattern!r}: {exc}") from None
    if wildcard and is_ip(name):
        raise RuleError(f"{pattern!r}: '*.' goes before a name, not an address")
    if "*" in name:
        raise RuleError(f"{pattern!r}: a host wildcard is '*.' at the start only")
    port = SCHEMES[scheme]
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise RuleError(f"{pattern!r}: the port is 1-65535")
        port = int(port_text)
    return ("*." + name if wildcard else name), port


@dataclass(frozen=True)
class Decision:
    """The verdict on a request or a tunnel: ``rule`` is the one that decided (if any)."""

    allowed: bool
    rule: EgressRule | None
    reason: str


class EgressRules:
    """Every ``egress:`` rule of a run, with the decisions the proxy asks for."""

    def __init__(self, rules: list[EgressRule]) -> None:
        self.rules = rules

    def decide(self, request: Request) -> Decision:
        """Judge one request (plain HTTP, or HTTPS the proxy decrypted)."""
        for rule in self.rules:
            if rule.action == "deny" and rule.matches(request):
                return Decision(False, rule, f"denied by {rule.source}: {rule.text}")
        for rule in self.rules:
            if rule.action == "allow" and rule.matches(request):
                return Decision(True, rule, f"allowed by {rule.source}: {rule.text}")
        return Decision(False, None, f"no egress rule allows it; {self.suggest(request)}")

    def tunnel(self, host: str, port: int) -> Decision | None:
        """Judge a ``CONNECT host:port`` by host alone, or None when some rule for that
        host judges paths or methods (the proxy must then decrypt to decide)."""
        touching = [r for r in self.rules if r.matches_host("https", host, port)]
        for rule in touching:
            if rule.action == "deny" and not rule.inspects_requests:
                return Decision(False, rule, f"denied by {rule.source}: {rule.text}")
        if any(rule.inspects_requests for rule in touching):
            return None
        for rule in touching:
            if rule.action == "allow":
                return Decision(True, rule, f"allowed by {rule.source}: {rule.text}")
        request = Request("https", host, port, "/", "CONNECT")
        return Decision(False, None, f"no egress rule allows it; {self.suggest(request)}")

    @staticmethod
    def suggest(request: Request) -> str:
        """The line that would allow ``request``, as a refusal names it."""
        directory = request.path.rsplit("/", 1)[0]
        base = Request(request.scheme, request.host, request.port, "", request.method).url
        if request.method == "CONNECT":
            return f"add to the profile: egress: ['allow {base}']"
        return f"add to the profile: egress: ['allow {base}{directory}/* {request.method}']"
