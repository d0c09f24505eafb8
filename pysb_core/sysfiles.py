"""The parts of the host's ``/etc`` a sandboxed interpreter needs, shared by the providers.

Not the whole of ``/etc``: it holds host secrets (``shadow``, ``ssl/private``) and host
configuration the program has no business reading. Providers that build their own view of
the file system (bwrap, firejail) expose exactly these.
"""

from __future__ import annotations

#: What CPython and glibc read during an ordinary start: the dynamic loader's cache, the
#: time zone, name-service switch and user/group names (``getpass``, ``pwd``), protocol
#: and service names (``socket.getservbyname``) and the OpenSSL configuration.
ETC_BASE = (
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/protocols",
    "/etc/services",
    "/etc/ssl/openssl.cnf",
    "/etc/ssl/certs",
)

#: The plan's generated hosts file when there is one (DNS pins), else the host's.
ETC_HOSTS = "/etc/hosts"

#: Only when a network rule allows some traffic: the resolver's configuration.
ETC_RESOLV = "/etc/resolv.conf"
ETC_NETWORK = (ETC_RESOLV, "/etc/host.conf", "/etc/gai.conf")

#: Host secrets masked whenever an exposure makes them visible (an implicit exposure of
#: the CA certificates may name the whole of /etc/ssl, private keys included).
ALWAYS_HIDDEN = ("/etc/ssl/private",)
