"""The network guard: sockets and resolver functions follow the profile's ``network`` rules.

Inside the sandboxed interpreter it patches

- ``socket.socket`` ``connect``, ``connect_ex``, ``bind``, ``listen``, ``sendto``, ``sendmsg``,
  and replaces ``_socket.socket`` (and ``_socket.socketpair``) with a guarded subclass that keeps
  the class's name, so that the C-level spelling is not a way around;
- ``getaddrinfo``, ``gethostbyname``, ``gethostbyname_ex``, ``gethostbyaddr``, ``getnameinfo`` (on
  ``_socket`` and ``socket``): pinned names answer with exactly their pinned addresses and no
  query; a name no rule covers is refused before any query unless a rule allows a wider
  network (SPEC §6, §7).

Decisions come from :class:`pysb_core.netmatch.Matcher`, which answers exactly as
:class:`pysb_core.netrules.NetworkMatcher`, the code the OS providers compile from (a
differential test holds them together), so both layers agree; unlike it, it needs no
:mod:`ipaddress` in the sandbox. ``AF_UNIX`` paths need a read-write exposure; abstract
Unix sockets and families the rules cannot express (raw, netlink, packet...) are refused.

A PEP 578 audit hook is the backstop: CPython raises ``socket.connect``, ``socket.bind``,
``socket.sendto``, ``socket.sendmsg`` and resolver events from C, however the C function was
reached (the raw class through the MRO, an original kept before the guard was installed), and
the hook judges them with the same rules.

In a learning run nothing is refused: each connection and bind is recorded, by host name when
the program used one (names are remembered from resolver answers), and the parent renders
them as ``network:`` rules (:mod:`pysb_guards.network_hooks`).

The guard keeps its state in closures, not in module globals. It is friction, not a boundary:
native code, inherited descriptors and a raw ``listen()`` (no audit event) get around it; the
OS layer is what stops them (docs/network.md lists the residual weaknesses).
"""

from __future__ import annotations

import os
from _operator import index as _op_index  # the C function: `operator` imports collections

from pysb_core import hookimpl
from pysb_core.errors import NetworkDeniedError

TYPE_CHECKING = False  # no typing import at run time: this module is loaded in the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from pysb_core.events import Recorder
    from pysb_core.policy import Policy

GUARD = "network"


# ---------------------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------------------


@hookimpl
def pysb_child_install(policy: Policy, recorder: Recorder) -> None:
    """Patch sockets and resolvers of this interpreter according to ``policy``."""
    install(policy, recorder)


def pin_resolver(pins: dict[str, list[str]]) -> None:
    """Child set-up: pinned names answer with their pins, nothing is judged or refused."""
    from pysb_core.events import Recorder
    from pysb_core.policy import Policy

    policy = Policy(pins={k: tuple(v) for k, v in pins.items()}, python_guards=False)
    install(policy, Recorder(None, learning=False), enforce=False)


# ---------------------------------------------------------------------------------------
# The patches
# ---------------------------------------------------------------------------------------


def install(policy: Policy, recorder: Recorder, *, enforce: bool | None = None) -> None:
    """Install the guard. ``enforce=False`` only pins the resolver (no socket checks): what the
    interpreter still needs when the user turned the Python guards off (SPEC §6).

    The rules are compiled and the audit backstop registered now; the sockets are patched
    when the interpreter loads ``_socket`` (and ``socket``): the import guard runs the
    patches as the loader finishes, before any code holds the module, and at once for a
    module already loaded. A program that never touches the network never pays for
    ``socket`` (enum, selectors...). Without the import guard both are imported and
    patched now.
    """
    if enforce is None:
        enforce = policy.python_guards
    patch_c, patch_py, started = _patchers(policy, recorder, enforce)
    if enforce:
        from pysb_guards import imports

        try:
            imports.on_import("_socket", patch_c)
        except RuntimeError:
            if started:  # the patch itself failed: fail closed
                raise
        else:
            imports.on_import("socket", patch_py)
            return
    import _socket
    import socket

    patch_c(_socket)
    patch_py(socket)


def _patchers(
    policy: Policy, recorder: Recorder, enforce: bool
) -> tuple[Callable[[Any], None], Callable[[Any], None], list[Any]]:
    """The patches of ``_socket`` and ``socket``, sharing one matcher and one cache.

    Everything they use is bound here, at install, before the program runs: the patches
    may run later (inside the program's ``import socket``), when ``sys.modules`` and
    module globals are the program's to change.
    """
    from pysb_core.netmatch import Matcher, canonical_text, normalize_host, numeric_host
    from pysb_guards import _seal

    ctx: dict[str, Any] = {
        "matcher": Matcher(policy.network, policy.pins),
        "recorder": _seal.private_recorder(recorder),
        "enforce": enforce,
        "learning": bool(recorder.learning),
        "writable": tuple(
            {
                os.path.normpath(p)
                for e in policy.exposures
                if e.writable
                for p in (e.path, e.target)
            }
        ),
        "seen_names": {},  # address -> name the program resolved it from
        # (family, type, proto, address as given, direction) -> the checked address handed to
        # C, for allowed literal addresses: the common case costs one dict lookup.
        "fast": {},
        "canonical_text": canonical_text,
        "normalize_host": normalize_host,
        "numeric_host": numeric_host,
    }
    built: dict[Any, tuple[Any, ...]] = {}  # C socket class -> its faces
    # audit event -> its judge for each C socket class (one per class, in order of patching)
    backstops: dict[str, list[Callable[[tuple], Any]]] = {e: [] for e in _BACKSTOP_EVENTS}
    started: list[Any] = []

    def patch_c(module: Any) -> None:
        """Patch one instance of the ``_socket`` C module (Python >= 3.12 may create a
        second one, with classes of its own: it gets faces of its own)."""
        started.append(module)
        raw = _c_socket_class(module.socket)
        faces = built.get(raw)
        if faces is None:
            faces = built[raw] = _faces(module, raw, ctx)
            if faces[4] is not None:
                for event, judge in faces[4].items():
                    backstops[event].append(judge)
        resolvers, _methods, guarded, socketpair, _backstop = faces
        for name, fn in resolvers.items():
            setattr(module, name, fn)
        if guarded is not None:
            setattr(module, "socket", guarded)
            setattr(module, "SocketType", guarded)
            setattr(module, "socketpair", socketpair)

    def patch_py(module: Any) -> None:
        """Patch the ``socket`` module (a module of that name that is not the standard
        library's -- no ``_socket`` inside -- is left alone)."""
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is not dict:
            return
        c_module, cls = namespace.get("_socket"), namespace.get("socket")
        if not isinstance(cls, type) or getattr(c_module, "__name__", None) != "_socket":
            return
        raw = _c_socket_class(cls)
        if raw not in built:
            patch_c(c_module)
        faces = built.get(raw)
        if faces is None:
            return
        resolvers, methods, guarded, _socketpair, _backstop = faces
        for name, fn in resolvers.items():
            if name != "getaddrinfo":  # socket.getaddrinfo calls _socket.getaddrinfo
                setattr(module, name, fn)
        if guarded is not None:
            for name, fn in methods.items():
                setattr(cls, name, fn)
            setattr(module, "SocketType", guarded)  # a copy of the raw class ("import *")

    if enforce and not ctx["learning"]:
        # The backstop (CPython's own audit events) is registered now, in the guards' one
        # audit hook: handlers can only be added before the program runs. Until a socket
        # module is loaded no such event can be raised.
        from pysb_core.errors import NetworkDeniedError

        add_handler, _close = _seal.audit_registry()

        fast_get = ctx["fast"].get

        def make_socket_handler(event: str) -> Callable[[tuple], Any]:
            judges = backstops[event]  # (family_of, type_of, proto_of, slow judge) per class
            direction = _SOCKET_EVENTS[event]

            def handler(args: tuple) -> Any:
                address = args[1]
                for family_of, type_of, proto_of, judge in judges:
                    sock = args[0]
                    try:
                        checked = fast_get(
                            (family_of(sock), type_of(sock), proto_of(sock), address, direction)
                        )
                    except TypeError:  # another C socket class, or an unhashable address
                        checked = None
                    if checked is address and checked is not None:
                        # The very tuple a face checked and handed to C (exact str and ints),
                        # not merely one equal to it: an address whose parts lie about
                        # equality (a str or int subclass) finds no shortcut here.
                        return None
                    verdict = judge(args)
                    if verdict is not _FOREIGN:
                        return verdict
                # A socket of a class no face was made for: none should exist.
                return NetworkDeniedError(
                    f"network {event} refused: a socket the network guard did not patch",
                    target=event,
                )

            return handler

        def make_handler(event: str) -> Callable[[tuple], Any]:
            judges = backstops[event]

            def handler(args: tuple) -> Any:
                for judge in judges:
                    verdict = judge(args)
                    if verdict is not _FOREIGN:
                        return verdict
                return None

            return handler

        for event in _BACKSTOP_EVENTS:
            maker = make_socket_handler if event in _SOCKET_EVENTS else make_handler
            add_handler(event, maker(event))
    return patch_c, patch_py, started


#: Audit events judged by the backstop; these four carry the socket object (and the
#: direction their address is judged in).
_SOCKET_EVENTS = {
    "socket.connect": "out",
    "socket.bind": "in",
    "socket.sendto": "out",
    "socket.sendmsg": "out",
}
_BACKSTOP_EVENTS = (
    *_SOCKET_EVENTS,
    "socket.getaddrinfo",
    "socket.gethostbyname",
    "socket.gethostbyaddr",
)
#: A backstop's answer for a socket of another C class than its own.
_FOREIGN = object()


def _faces(_socket: Any, raw: Any, ctx: dict[str, Any]) -> tuple[Any, ...]:
    """The guarded functions for one ``_socket`` module and its C socket class:
    ``(resolvers, methods, guarded class, socketpair, backstop)``: the last three are None
    when only pinning, the backstop (audit event -> judge) is None in a learning run
    (nothing is refused)."""
    matcher = ctx["matcher"]
    recorder = ctx["recorder"]
    enforce = ctx["enforce"]
    learning = ctx["learning"]
    writable = ctx["writable"]
    seen_names: dict[str, str] = ctx["seen_names"]
    fast: dict[tuple[Any, ...], tuple[Any, ...]] = ctx["fast"]
    fast_get = fast.get
    canonical_text = ctx["canonical_text"]
    normalize_host = ctx["normalize_host"]
    numeric_host = ctx["numeric_host"]

    def _canon(address: str) -> str:
        try:
            return canonical_text(address.split("%", 1)[0])
        except ValueError:
            return address

    raw_connect = raw.connect
    raw_connect_ex = raw.connect_ex
    raw_bind = raw.bind
    raw_listen = raw.listen
    raw_sendto = raw.sendto
    raw_sendmsg = raw.sendmsg
    raw_getsockname = raw.getsockname
    # The C members, not socket.socket's properties (which build enum objects on each read).
    family_of = raw.__dict__["family"].__get__
    type_of = raw.__dict__["type"].__get__
    proto_of = raw.__dict__["proto"].__get__
    raw_getaddrinfo = _socket.getaddrinfo
    raw_gethostbyname = _socket.gethostbyname
    raw_gethostbyname_ex = _socket.gethostbyname_ex
    raw_gethostbyaddr = _socket.gethostbyaddr
    raw_getnameinfo = _socket.getnameinfo
    raw_socketpair = _socket.socketpair
    gaierror = _socket.gaierror
    AF_INET, AF_INET6, AF_UNIX = _socket.AF_INET, _socket.AF_INET6, _socket.AF_UNIX
    SOCK_STREAM, SOCK_DGRAM = _socket.SOCK_STREAM, _socket.SOCK_DGRAM
    TCP_PROTOS = {0, _socket.IPPROTO_TCP, getattr(_socket, "IPPROTO_MPTCP", 262)}
    UDP_PROTOS = {0, _socket.IPPROTO_UDP}

    # -- refusal and learning --------------------------------------------------------

    def refuse(message: str, target: str, suggestion: str = "") -> NetworkDeniedError:
        recorder.deny(GUARD, target, message, suggestion)
        return NetworkDeniedError(message, target=target, suggested_rule=suggestion)

    def refusal_text(what: str, rule: Any, suggestion: str) -> str:
        if rule is not None:
            return (
                f"{what} refused by network rule '{rule}' ({rule.source}); a deny rule beats "
                f"every allow: remove or narrow it to allow this"
            )
        return (
            f"{what} refused: no network rule allows it; to allow it, add to the profile's "
            f"network: section:  - {suggestion}"
        )

    def learn_inet(proto: str, host: str, port: int, direction: str, call: str) -> None:
        rule = f"allow {proto} {host} {port} {direction}"
        recorder.learn(
            GUARD,
            f"{proto} {_hostport(host, port)} {direction}",
            call,
            rule,
            kind="inet",
            proto=proto,
            host=host,
            port=port,
            direction=direction,
        )

    # -- resolution ------------------------------------------------------------------

    def name_addresses(
        name: str, family: int, port: Any = None, proto: str = "tcp", direction: str = "out"
    ) -> list[str]:
        """Addresses of a name for a socket of ``family``: pins, else a real query when
        allowed, else a refusal before any query."""
        key = normalize_host(name)
        pinned = matcher.pinned(key)
        if pinned is not None:
            return [a for a in pinned if _family_ok(a, family, AF_INET, AF_INET6)]
        if not (learning or matcher.resolves_any_name or not enforce):
            raise refuse_name(key, port, proto, direction)
        found: list[str] = []
        for res in raw_getaddrinfo(name, None, family, SOCK_STREAM):
            address = str(res[4][0])
            if address not in found:
                found.append(address)
            seen_names[_canon(address)] = key
        return found

    def refuse_name(
        key: str, port: Any, proto: str = "tcp", direction: str = "out"
    ) -> NetworkDeniedError:
        shown = port if isinstance(port, int) and not isinstance(port, bool) else "PORT"
        suggestion = f"allow {proto} {key} {shown} {direction}"
        message = (
            f"name resolution of '{key}' refused before any query: no network rule names it; "
            f"to allow it, add to the profile's network: section:  - {suggestion}"
        )
        return refuse(message, key, suggestion)

    def numeric_port(port: Any, protos: Sequence[str]) -> int | None:
        if port is None:
            return None
        if isinstance(port, int) and not isinstance(port, bool):
            return port
        text = port.decode("ascii", "replace") if isinstance(port, bytes | bytearray) else port
        if isinstance(text, str):
            if text.isdigit():
                return int(text)
            for proto in protos:
                try:
                    return _socket.getservbyname(text, proto)
                except OSError:
                    continue
        return None

    def requested_protos(type_: int, proto: int) -> list[str]:
        if type_ == SOCK_STREAM or (type_ == 0 and proto == _socket.IPPROTO_TCP):
            return ["tcp"]
        if type_ == SOCK_DGRAM or (type_ == 0 and proto == _socket.IPPROTO_UDP):
            return ["udp"]
        return ["tcp", "udp"]

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if host is None:
            return raw_getaddrinfo(host, port, family, type, proto, flags)
        text = _host_text(host)
        if text is None or numeric_host(text) is not None or flags & _socket.AI_NUMERICHOST:
            # Numeric: the C library answers without a query; make sure of it.
            return raw_getaddrinfo(host, port, family, type, proto, flags | _socket.AI_NUMERICHOST)
        key = normalize_host(text)
        pinned = matcher.pinned(key)
        if pinned is None:
            if not (learning or matcher.resolves_any_name or not enforce):
                protos = requested_protos(type, proto)
                direction = "in" if flags & _socket.AI_PASSIVE else "out"
                raise refuse_name(key, numeric_port(port, protos), protos[0], direction)
            answers = raw_getaddrinfo(host, port, family, type, proto, flags)
            for res in answers:
                seen_names.setdefault(_canon(res[4][0]), key)
            if enforce and not learning:
                judge_name(key, [r[4][0] for r in answers], port, type, proto, flags)
            return answers
        if enforce and not learning:
            judge_name(key, list(pinned), port, type, proto, flags)
        return pinned_answers(key, pinned, port, family, type, proto, flags)

    def judge_name(key, addresses, port, type_, proto, flags) -> None:
        """A name is usable only if every address of it is allowed for some protocol asked."""
        protos = requested_protos(type_, proto)
        number = numeric_port(port, protos)
        if number is None or not addresses:
            return
        direction = "in" if flags & _socket.AI_PASSIVE else "out"
        decision: tuple[bool, Any] = (False, None)
        for p in protos:
            decision = matcher.check_host(p, key, number, direction, [_canon(a) for a in addresses])
            if decision[0]:
                return
        suggestion = matcher.suggest(protos[0], key, number, direction)
        what = (
            f"network connection to {_hostport(key, number)} ({protos[0]} {direction}) "
            f"[{', '.join(addresses)}]"
        )
        raise refuse(refusal_text(what, decision[1], suggestion), key, suggestion)

    def pinned_answers(key, pinned, port, family, type_, proto, flags):
        number = numeric_port(port, requested_protos(type_, proto)) or 0
        if port is not None and numeric_port(port, ["tcp", "udp"]) is None:
            raise gaierror(_socket.EAI_SERVICE, "Servname not supported for ai_socktype")
        kinds = (
            [(SOCK_STREAM, _socket.IPPROTO_TCP), (SOCK_DGRAM, _socket.IPPROTO_UDP)]
            if type_ == 0
            else [(type_, proto or _default_proto(type_, _socket))]
        )
        out = []
        for address in pinned:
            fam = AF_INET6 if ":" in address else AF_INET
            if family not in (0, fam):
                continue
            sockaddr = (address, number, 0, 0) if fam == AF_INET6 else (address, number)
            for kind, kproto in kinds:
                if proto and kproto != proto:
                    continue
                canon = key if (flags & _socket.AI_CANONNAME and not out) else ""
                out.append((fam, kind, kproto, canon, sockaddr))
        if not out:
            raise gaierror(_socket.EAI_NONAME, "Name or service not known")
        return out

    def gethostbyname(hostname):
        text = _host_text(hostname)
        if text is None or numeric_host(text) is not None:
            return raw_gethostbyname(hostname)
        key = normalize_host(text)
        pinned = matcher.pinned(key)
        if pinned is None:
            if not (learning or matcher.resolves_any_name or not enforce):
                raise refuse_name(key, None)
            answer = raw_gethostbyname(hostname)
            seen_names.setdefault(answer, key)
            return answer
        v4 = [a for a in pinned if ":" not in a]
        if not v4:
            raise gaierror(_socket.EAI_AGAIN, "Temporary failure in name resolution")
        return v4[0]

    def gethostbyname_ex(hostname):
        text = _host_text(hostname)
        if text is None or numeric_host(text) is not None:
            return raw_gethostbyname_ex(hostname)
        key = normalize_host(text)
        pinned = matcher.pinned(key)
        if pinned is None:
            if not (learning or matcher.resolves_any_name or not enforce):
                raise refuse_name(key, None)
            answer = raw_gethostbyname_ex(hostname)
            for a in answer[2]:
                seen_names.setdefault(a, key)
            return answer
        v4 = [a for a in pinned if ":" not in a]
        if not v4:
            raise gaierror(_socket.EAI_AGAIN, "Temporary failure in name resolution")
        return (key, [], v4)

    def gethostbyaddr(ip_address):
        text = _host_text(ip_address)
        literal = numeric_host(text) if text is not None else None
        if literal is not None:
            name = matcher.name_of(str(literal))
            if name is not None:
                return (name, [], [str(literal)])
        elif text is not None:
            pinned = matcher.pinned(text)
            if pinned is not None:
                return (normalize_host(text), [], list(pinned))
        if learning or matcher.resolves_any_name or not enforce:
            return raw_gethostbyaddr(ip_address)
        key = text if text is not None else repr(ip_address)
        message = (
            f"reverse name resolution of '{key}' refused before any query: only a rule that "
            "allows a wider network (a CIDR or *) lets names outside the pins resolve"
        )
        raise refuse(message, key)

    def getnameinfo(sockaddr, flags):
        if flags & _socket.NI_NUMERICHOST or learning or matcher.resolves_any_name or not enforce:
            return raw_getnameinfo(sockaddr, flags)
        host, service = raw_getnameinfo(sockaddr, flags | _socket.NI_NUMERICHOST)
        name = matcher.name_of(host)
        if name is not None:
            return (name, service)
        if flags & _socket.NI_NAMEREQD:
            message = (
                f"reverse name resolution of '{host}' refused before any query: only a rule that "
                "allows a wider network (a CIDR or *) lets names outside the pins resolve"
            )
            raise refuse(message, host)
        return (host, service)

    # -- socket calls -------------------------------------------------------------------

    def inet_target(sock, address, direction: str, call: str):
        """Judge an AF_INET/AF_INET6 address; return the address to hand to the C call."""
        family = family_of(sock)
        if not isinstance(address, tuple):
            kind = "AF_INET" if family == AF_INET else "AF_INET6"
            raise TypeError(f"{kind} address must be a tuple, not {type(address).__name__}")
        if family == AF_INET and len(address) != 2:
            raise TypeError("AF_INET address must be a pair (host, port)")
        if family == AF_INET6 and not 2 <= len(address) <= 4:
            raise TypeError("AF_INET6 address must be a tuple (host, port[, flowinfo[, scopeid]])")
        host, port, *rest = address
        port = _index(port)
        if not 0 <= port <= 65535:
            raise OverflowError(f"{call}(): port must be 0-65535.")
        rest = [_index(x) for x in rest]
        proto = sock_proto(sock, call)
        if proto is None:
            return address
        text = _host_text(host)
        if text is None:
            raise TypeError(f"str, bytes or bytearray expected, not {type(host).__name__}")
        name = None
        if text == "":
            addresses = ["0.0.0.0" if family == AF_INET else "::"]
        elif text == "<broadcast>" and family == AF_INET:
            addresses = ["255.255.255.255"]
        else:
            literal = numeric_host(text)
            if literal is not None:
                if literal.version != (4 if family == AF_INET else 6):
                    raise gaierror(
                        _socket.EAI_ADDRFAMILY, "Address family for hostname not supported"
                    )
                addresses = [str(literal)]
            else:
                # A name is judged as a whole (every address, any family); the C call gets the
                # first address of the socket's family.
                name = normalize_host(text)
                every = name_addresses(text, 0, port, proto, direction)
                addresses = [a for a in every if _family_ok(a, family, AF_INET, AF_INET6)]
                if not addresses:
                    raise gaierror(_socket.EAI_NONAME, "Name or service not known")
        if enforce and not learning:
            if name is None:
                allowed, rule = matcher.check(proto, addresses[0], port, direction)
            else:
                allowed, rule = matcher.check_host(
                    proto, name, port, direction, [_canon(a) for a in every]
                )
            if allowed:
                if len(fast) >= 4096:
                    fast.clear()
                result = (addresses[0], port, *rest)
                sock_kind = (family, type_of(sock), proto_of(sock))
                fast[(*sock_kind, result, direction)] = result  # what the audit backstop sees
                if name is None and _plain(address):
                    fast[(*sock_kind, address, direction)] = result
            if not allowed:
                shown = name or _canon(addresses[0])
                suggestion = matcher.suggest(proto, shown, port, direction)
                what = f"network {call} to {_hostport(shown, port)} ({proto} {direction})"
                if name is not None:
                    what += f" [{', '.join(every)}]"
                raise refuse(
                    refusal_text(what, rule, suggestion), _hostport(shown, port), suggestion
                )
        elif learning:
            canon = _canon(addresses[0])
            shown = name or seen_names.get(canon) or matcher.name_of(canon) or canon
            learn_inet(proto, shown, port, direction, call)
        return (addresses[0], port, *rest)

    def sock_proto(sock, call: str) -> str | None:
        type_, proto = type_of(sock), proto_of(sock)
        if type_ == SOCK_STREAM and proto in TCP_PROTOS:
            return "tcp"
        if type_ == SOCK_DGRAM and proto in UDP_PROTOS:
            return "udp"
        what = f"{call} on a socket of type {int(type_)} protocol {proto}"
        if learning:
            return None  # no rule can express it: nothing to learn
        raise refuse(
            f"{what} refused: network rules cover only TCP and UDP (raw, ICMP and other "
            "protocols are never allowed)",
            what,
        )

    def unix_target(address, call: str):
        path = os.fspath(address) if isinstance(address, os.PathLike) else address
        if isinstance(path, bytearray):
            path = bytes(path)
        if not isinstance(path, str | bytes):
            raise TypeError(f"a bytes-like object or str is required, not {type(path).__name__}")
        text = os.fsdecode(path)
        if text == "" or text.startswith("\0"):
            what = f"{call} on an abstract Unix socket {text[1:]!r}"
            if learning:
                return path
            raise refuse(f"{what} refused: abstract Unix sockets are never allowed", what)
        full = os.path.abspath(text)
        try:
            parent = os.path.realpath(os.path.dirname(full))
        except OSError:  # a path the files guard hides: judged as written, so refused below
            parent = os.path.dirname(full)
        canonical = os.path.join(parent, os.path.basename(full))
        if any(canonical == w or canonical.startswith(w.rstrip("/") + "/") for w in writable):
            return path
        directory = os.path.dirname(canonical)
        if learning:
            recorder.learn(
                GUARD,
                f"unix {canonical}",
                call,
                f"expose-rw: {directory}",
                kind="unix",
                path=canonical,
            )
            return path
        suggestion = f"expose-rw: {directory}"
        message = (
            f"network {call} to Unix socket {canonical} refused: a Unix socket needs a "
            f"read-write exposure; to allow it, add to the profile's files: section:  {suggestion}"
        )
        raise refuse(message, canonical, suggestion)

    def target(sock, address, direction: str, call: str):
        family = family_of(sock)
        if family in (AF_INET, AF_INET6):
            return inet_target(sock, address, direction, call)
        if family == AF_UNIX:
            return unix_target(address, call)
        if learning:
            return address
        what = f"{call} on an address family {int(family)} socket"
        raise refuse(
            f"{what} refused: network rules cover only IPv4, IPv6 and Unix-path sockets", what
        )

    # The hot methods look the address up first; a refusal is re-raised from the method's own
    # frame with a fresh traceback, so the program's traceback ends at its call, not in ours.

    def connect(self, address):
        try:
            checked = fast_get((family_of(self), type_of(self), proto_of(self), address, "out"))
        except TypeError:  # an unhashable address: the slow path explains what is wrong
            checked = None
        if checked is None:
            try:
                checked = target(self, address, "out", "connect")
            except NetworkDeniedError as e:
                raise e.with_traceback(None) from None
        return raw_connect(self, checked)

    def connect_ex(self, address):
        try:
            checked = fast_get((family_of(self), type_of(self), proto_of(self), address, "out"))
        except TypeError:
            checked = None
        if checked is None:
            try:
                checked = target(self, address, "out", "connect")
            except NetworkDeniedError as e:
                raise e.with_traceback(None) from None
        return raw_connect_ex(self, checked)

    def bind(self, address):
        return raw_bind(self, target(self, address, "in", "bind"))

    def listen(self, *args):
        if family_of(self) in (AF_INET, AF_INET6) and type_of(self) == SOCK_STREAM:
            # listen() on a never-bound socket binds it to the wildcard address and a port the
            # kernel picks: judge that implicit bind. A bound socket was judged at bind().
            here = raw_getsockname(self)
            if here[1] == 0:
                target(self, (here[0], 0), "in", "listen")
        return raw_listen(self, *args)

    def sendto(self, data, *args):
        if len(args) in (1, 2):
            address = args[-1]
            try:
                key = (family_of(self), type_of(self), proto_of(self), address, "out")
                checked = fast_get(key)
            except TypeError:
                checked = None
            if checked is None:
                try:
                    checked = target(self, address, "out", "sendto")
                except NetworkDeniedError as e:
                    raise e.with_traceback(None) from None
            args = (*args[:-1], checked)
        return raw_sendto(self, data, *args)

    def sendmsg(self, buffers, *args):
        if len(args) >= 3 and args[2] is not None:
            args = (*args[:2], target(self, args[2], "out", "sendmsg"), *args[3:])
        return raw_sendmsg(self, buffers, *args)

    methods: dict[str, Callable[..., Any]] = {
        "connect": connect,
        "connect_ex": connect_ex,
        "bind": _trimmed(bind),
        "listen": _trimmed(listen),
        "sendto": sendto,
        "sendmsg": _trimmed(sendmsg),
    }
    for fn_name, fn in methods.items():
        fn.__name__ = fn.__qualname__ = fn_name
        fn.__doc__ = getattr(raw, fn_name).__doc__

    resolvers: dict[str, Callable[..., Any]] = {
        "getaddrinfo": _trimmed(getaddrinfo),
        "gethostbyname": _trimmed(gethostbyname),
        "gethostbyname_ex": _trimmed(gethostbyname_ex),
        "gethostbyaddr": _trimmed(gethostbyaddr),
        "getnameinfo": _trimmed(getnameinfo),
    }
    for fn_name, fn in resolvers.items():
        fn.__name__ = fn.__qualname__ = fn_name
        fn.__doc__ = getattr(_socket, fn_name).__doc__
        fn.__module__ = "_socket"

    if not enforce:
        return resolvers, methods, None, None, None

    class _GuardedType(type):
        """Keeps ``isinstance(s, _socket.socket)`` true for every socket object. Classes
        made from the guarded one (``socket.socket`` when ``socket`` is loaded after the
        patch) keep the ordinary checks."""

        def __instancecheck__(cls, obj: object) -> bool:
            if cls.__mro__[1] is raw:
                return isinstance(obj, raw)
            return type.__instancecheck__(cls, obj)

        def __subclasscheck__(cls, sub: type) -> bool:
            if cls.__mro__[1] is raw:
                return issubclass(sub, raw)
            return type.__subclasscheck__(cls, sub)

    guarded = _GuardedType("socket", (raw,), {"__slots__": (), "__module__": "_socket", **methods})
    guarded.__qualname__ = "socket"
    guarded.__doc__ = raw.__doc__

    def socketpair(*args, **kwargs):
        a, b = raw_socketpair(*args, **kwargs)
        return (
            guarded(a.family, a.type, a.proto, fileno=a.detach()),
            guarded(b.family, b.type, b.proto, fileno=b.detach()),
        )

    socketpair.__name__ = socketpair.__qualname__ = "socketpair"
    socketpair.__doc__ = raw_socketpair.__doc__
    if learning:
        return resolvers, methods, guarded, socketpair, None  # nothing is refused: no backstop

    # -- the backstop: CPython's own audit events -----------------------------------------
    # The C socket functions raise PEP 578 audit events before acting, whichever way they
    # were reached (the raw class through the MRO, an original kept in a closure...). The
    # hook judges those too; what the guarded methods already judged costs one lookup.

    def address_judge(direction: str, call: str) -> tuple[Any, ...]:
        """The backstop of one socket event: this class's getters, for the hook's lookup of
        what a face already checked, and the full judge (the refusal to return, or None;
        ``_FOREIGN`` for a socket of another C class)."""

        def judge(args: tuple) -> Any:
            try:
                return audit_address(args[0], args[1], direction, call)
            except NetworkDeniedError as e:
                return e.with_traceback(None)

        return family_of, type_of, proto_of, judge

    def audit_address(sock, address, direction: str, call: str) -> Any:
        if address is None:
            return None  # sendmsg on a connected socket
        try:
            family = family_of(sock)
        except TypeError:
            return _FOREIGN  # another C socket class: its own backstop judges it
        if family in (AF_INET, AF_INET6) and type(address) is tuple and len(address) >= 2:
            text = _host_text(address[0])
            if text not in ("", "<broadcast>") and (text is None or numeric_host(text) is None):
                # The C call would resolve the name itself: no pin, maybe a query.
                what = f"network {call} to host name {address[0]!r} by a raw socket method"
                raise refuse(
                    f"{what} refused: names are resolved through socket.getaddrinfo, which "
                    "answers pinned names; call the socket's own method",
                    str(address[0]),
                )
        target(sock, address, direction, call)
        return None

    def audit_name(args) -> None:
        host = args[0]
        if host is None or matcher.resolves_any_name:
            return
        text = _host_text(host)
        if text is not None and numeric_host(text) is not None:
            return
        raise refuse_name(normalize_host(text) if text is not None else repr(host), None)

    def audit_reverse(args) -> None:
        if matcher.resolves_any_name:
            return
        message = (
            f"reverse name resolution of {args[0]!r} refused before any query: only a rule "
            "that allows a wider network (a CIDR or *) lets names outside the pins resolve"
        )
        raise refuse(message, str(args[0]))

    def returning(fn: Callable[[tuple], None]) -> Callable[[tuple], Any]:
        def judge(args: tuple) -> Any:
            try:
                return fn(args)
            except NetworkDeniedError as e:
                return e.with_traceback(None)

        return judge

    backstop: dict[str, Any] = {
        "socket.connect": address_judge("out", "connect"),
        "socket.bind": address_judge("in", "bind"),
        "socket.sendto": address_judge("out", "sendto"),
        "socket.sendmsg": address_judge("out", "sendmsg"),
        "socket.getaddrinfo": returning(audit_name),
        "socket.gethostbyname": returning(audit_name),
        "socket.gethostbyaddr": returning(audit_reverse),
    }
    return resolvers, methods, guarded, socketpair, backstop


# ---------------------------------------------------------------------------------------
# Small helpers (pure; no guard state)
# ---------------------------------------------------------------------------------------


def _c_socket_class(cls: Any) -> Any:
    """The C socket class below ``cls`` (the raw class itself, the guarded one, or
    ``socket.socket`` made from either): the last class before ``object``."""
    return cls.__mro__[-2]


def _trimmed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` whose refusals surface from this one frame, without the guard's inner frames."""

    def face(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NetworkDeniedError as e:
            raise e.with_traceback(None) from None

    return face


def _plain(address: tuple[Any, ...]) -> bool:
    """An address of exact built-in types, safe to use as a cache key."""
    return type(address[0]) is str and all(type(x) is int for x in address[1:])


def _host_text(host: object) -> str | None:
    if isinstance(host, str):
        return host
    if isinstance(host, bytes | bytearray):
        try:
            return bytes(host).decode("ascii")
        except UnicodeDecodeError:
            return None
    return None


def _family_ok(address: str, family: int, af_inet: int, af_inet6: int) -> bool:
    if family == af_inet:
        return ":" not in address
    if family == af_inet6:
        return ":" in address
    return True


def _index(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    try:
        return _op_index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"'{type(value).__name__}' object cannot be interpreted as an integer"
        ) from None


def _default_proto(type_: int, _socket: Any) -> int:
    if type_ == _socket.SOCK_STREAM:
        return _socket.IPPROTO_TCP
    if type_ == _socket.SOCK_DGRAM:
        return _socket.IPPROTO_UDP
    return 0


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
