"""The default resolver behind DNS pinning (SPEC §6): ``/etc/hosts`` first, then dnspython.

Registered as a ``pysb.plugins``-style plugin with ``trylast`` so that any installed resolver
plugin (a corporate resolver, a test double) answers first. It runs in the parent, before
launch, and only when a profile names a host: dnspython is imported lazily, here, so that
runs whose rules are all addresses never pay for it.

``PYSB_HOSTS_FILE`` names an alternative hosts file (tests use it to map names to loopback
addresses without touching the system file); ``PYSB_RESOLV_CONF`` an alternative
``resolv.conf`` for the DNS step (tests point it at loopback so no query leaves the machine).
"""

from __future__ import annotations

import os
import time

from pysb_core._startup.markers import hookimpl

TYPE_CHECKING = False  # imported by every run (built-in plugin): keep it light
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

DEFAULT_HOSTS_FILE = "/etc/hosts"
#: Per-name budget for the DNS queries (A and AAAA together), in seconds. Names are asked as
#: absolute names (no search domains): write the full name in the rule.
DNS_LIFETIME = 5.0
#: Names every system resolves locally, used when the hosts file does not list them.
_LOOPBACK_NAMES = {
    "localhost": ("127.0.0.1", "::1"),
    "ip6-localhost": ("::1",),
    "ip6-loopback": ("::1",),
}


def hosts_file_path() -> str:
    return os.environ.get("PYSB_HOSTS_FILE") or DEFAULT_HOSTS_FILE


def read_hosts_file(path: str | None = None) -> dict[str, list[str]]:
    """Parse a hosts file into ``name -> addresses`` (file order, lower-case names).

    A missing or unreadable file reads as empty: resolution then falls through to DNS.
    Lines whose first field is not an IP address are skipped, as the C library does.
    """
    import ipaddress

    table: dict[str, list[str]] = {}
    try:
        with open(path or hosts_file_path(), encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return table
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        try:
            address = str(ipaddress.ip_address(fields[0].split("%", 1)[0]))
        except ValueError:
            continue
        for name in fields[1:]:
            addresses = table.setdefault(name.lower().rstrip("."), [])
            if address not in addresses:
                addresses.append(address)
    return table


def _dns_lookup(name: str, resolver: Any) -> list[str]:
    """A then AAAA through dnspython; any failure (NXDOMAIN, timeout, no answer) -> []."""
    import ipaddress

    import dns.exception
    import dns.resolver

    out: list[str] = []
    # The budget: DNS_LIFETIME, or less when resolv.conf asks for short timeouts (two rounds
    # of every nameserver at its per-server timeout).
    servers = len(getattr(resolver, "nameservers", ()) or ()) or 1
    per_server = float(getattr(resolver, "timeout", DNS_LIFETIME) or DNS_LIFETIME)
    deadline = time.monotonic() + min(DNS_LIFETIME, 2 * servers * per_server)
    for rdtype in ("A", "AAAA"):
        lifetime = max(0.5, deadline - time.monotonic())
        try:
            answer = resolver.resolve(name, rdtype, lifetime=lifetime, search=False)
        except (dns.exception.DNSException, OSError, ValueError):
            continue
        # Sorted: an answer's order is the server's round robin; pins should not depend on it.
        for ip in sorted({ipaddress.ip_address(record.address) for record in answer}):
            out.append(str(ip))
    return out


def resolve(
    hostnames: Iterable[str],
    *,
    hosts_file: str | None = None,
    resolver: Any = None,
) -> dict[str, list[str]]:
    """Resolve each name: the hosts file first, then DNS (only for names the file lacks).

    ``resolver`` is a ``dns.resolver.Resolver`` (default: the system configuration); tests
    pass one pointed at a nameserver on 127.0.0.1. Names that do not resolve map to ``[]``.
    """
    names = list(dict.fromkeys(n.lower().rstrip(".") for n in hostnames))
    table = read_hosts_file(hosts_file)
    result: dict[str, list[str]] = {}
    missing: list[str] = []
    for name in names:
        if name in table:
            result[name] = list(table[name])
        elif name in _LOOPBACK_NAMES:
            result[name] = list(_LOOPBACK_NAMES[name])
        else:
            missing.append(name)
    if missing:
        if resolver is None:
            import dns.resolver

            try:
                resolver = dns.resolver.Resolver(
                    filename=os.environ.get("PYSB_RESOLV_CONF") or "/etc/resolv.conf"
                )
            except Exception:  # no usable resolv.conf: nothing more can be resolved
                resolver = None
        if resolver is None:
            result.update((n, []) for n in missing)
        elif len(missing) == 1:
            result[missing[0]] = _dns_lookup(missing[0], resolver)
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(8, len(missing))) as pool:
                found = pool.map(lambda n: _dns_lookup(n, resolver), missing)
                result.update(zip(missing, found, strict=True))
    return result


@hookimpl(trylast=True)
def pysb_dns_resolve(hostnames: Sequence[str]) -> Mapping[str, Sequence[str]] | None:
    """Built-in answer to the firstresult DNS hook (SPEC §6)."""
    if not hostnames:
        return {}
    return resolve(hostnames)
