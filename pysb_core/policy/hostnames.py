"""Which text of a ``network:`` rule is a host name and which an address.

The one part of the rule grammar that the frozen policy itself needs
(:attr:`pysb_core.policy.NetworkRule.is_host`): here, below both the policy and the
grammar (:mod:`pysb_core.policy.netrules`, which re-exports these names), so that neither imports
the other. Like the grammar, it is the parent's: the sandboxed interpreter decides with
:mod:`pysb_core.policy.netmatch` and never imports this module.
"""

from __future__ import annotations

import ipaddress
from _socket import inet_aton  # the C function (socket.inet_aton is this very function)

from pysb_core.policy.netmatch import _legacy_v4, normalize_host

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

__all__ = ["IPAddress", "check_hostname", "is_hostname", "numeric_host"]

_LABEL: list[re.Pattern[str]] = []  # compiled on first use (the parent's profile loader)


def numeric_host(host: str) -> IPAddress | None:
    """The address a numeric host string denotes, or ``None`` for a name.

    Accepts what the C library treats as numeric without a query: standard IPv4/IPv6 text
    (with an IPv6 scope) and the legacy IPv4 forms ``inet_aton`` reads (``127.1``,
    ``0x7f000001``, ``2130706433``), so that such spellings are judged by the address they
    mean instead of slipping past a rule as "a name".
    """
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if _legacy_v4(text):
        try:
            return ipaddress.IPv4Address(inet_aton(text))
        except OSError:
            return None
    return None


def is_hostname(s: str) -> bool:
    """True when ``s`` is a host name (not ``*``, not an IP or CIDR, not numeric)."""
    try:
        check_hostname(s)
    except ValueError:
        return False
    return True


def check_hostname(s: str) -> str:
    """Return the normalised host name or raise ``ValueError`` saying what is wrong."""
    if s == "*" or "/" in s or ":" in s or numeric_host(s) is not None:
        raise ValueError(f"'{s}' is an address, not a host name")
    if "*" in s:
        raise ValueError(
            f"wildcard host names ('{s}') are not supported: host names are resolved and "
            "pinned before launch, so list each name"
        )
    if not s.isascii():
        raise ValueError(f"host name '{s}' is not ASCII: write its IDNA form (xn--...)")
    name = normalize_host(s)
    if not name or len(name) > 253:
        raise ValueError(f"'{s}' is not a valid host name")
    labels = name.split(".")
    if not _LABEL:
        import re

        _LABEL.append(re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$"))
    for label in labels:
        if not _LABEL[0].match(label):
            raise ValueError(f"'{s}' is not a valid host name (bad label '{label}')")
    if labels[-1].isdigit():
        raise ValueError(f"'{s}' is neither a valid IP address nor a valid host name")
    return name
