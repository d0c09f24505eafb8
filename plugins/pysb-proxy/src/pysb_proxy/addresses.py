"""Where a request may go: resolution at the moment of the connection, and SSRF refusal.

Why resolve on every connection: the programs pysb-proxy is for talk to CDNs and cloud
APIs whose addresses change during a run; the kernel filter's pinned addresses cannot
follow them, the proxy can. Why refuse special addresses: a name the sandbox is allowed
to reach may resolve to the host's loopback, a private network or the cloud metadata
service (``169.254.169.254``) -- through DNS the sandbox's author may control. Only a rule
that names such an address itself (or ``localhost``) reaches it.

The proxy connects to the very addresses checked here (never to the name again), so a
name that changes between the check and the connection changes nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

#: Host resolution: ``(host, port) -> addresses``; the default is the host's resolver.
Resolver = Callable[[str, int], list[str]]

MAX_ADDRESSES = 32


class AddressRefused(Exception):
    """The destination may not be reached; the message says why."""


def resolve_host(host: str, port: int) -> list[str]:
    """The addresses of ``host`` now (an address is its own answer), at most 32."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return [host]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise AddressRefused(f"{host} does not resolve on the host ({exc})") from None
    out: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in out:
            out.append(address)
    return out[:MAX_ADDRESSES]


def special_kind(address: str) -> str | None:
    """What makes ``address`` one a name may not reach, or None for a public address."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local (cloud metadata)"
    if ip.is_multicast:
        return "multicast"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_private:
        return "private"
    if ip.is_reserved or not ip.is_global:
        return "reserved"
    return None


def checked_addresses(
    host: str, port: int, *, named: bool, resolve: Resolver = resolve_host
) -> list[str]:
    """The addresses to connect to for ``host``: every one must be allowed.

    ``named``: the rule that allowed the request names this host as an address or as
    ``localhost``, which may then be special. One special address among public ones
    refuses the whole name (a resolver that mixes them is steering the connection).
    """
    addresses = resolve(host, port)
    if not addresses:
        raise AddressRefused(f"{host} has no address on the host")
    for address in addresses:
        kind = special_kind(address)
        if kind is not None and not named:
            raise AddressRefused(
                f"{host} resolves to {address}, a {kind} address, which only a rule "
                "naming that address reaches"
            )
        if named and kind is not None and host == "localhost" and kind != "loopback":
            raise AddressRefused(f"localhost resolves to {address}, not a loopback address")
    return addresses
