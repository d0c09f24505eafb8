"""The network guard's engine: the judges of sockets and resolvers, and the backstop.

These functions never run with this module's globals: :func:`pysb_guards.network.guard.install`
re-creates every ``_n_*`` function (with :mod:`pysb_core.policy.netmatch`'s) in one private
namespace holding the compiled rules (``_seal.seal_group``); the names in capitals are the
values given there. The faces' judges are closures made in those sealed frames.

Why one module: its ``_n_*`` functions are re-created together in one sealed namespace (with
netmatch's), where they call one another by name and the faces' judges are closures of those
frames; one module is one namespace's source, and a split would add globals to copy and keep
consistent.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from typing import Any

TYPE_NAME: Any = None  # sealed values, for linters and readers only
GUARD: Any = None
M: Any = None
M_CHECK: Any = None
M_CHECK_HOST: Any = None
M_PINNED: Any = None
M_NAME_OF: Any = None
M_SUGGEST: Any = None
CANONICAL_TEXT: Any = None
NORMALIZE_HOST: Any = None
NUMERIC_HOST: Any = None
IP_TEXT: Any = None
RECORDER: Any = None
DENIED: Any = None
NAME_DENIED: Any = None  # a name refused before any query: also socket.gaierror
DEFER: Any = None
NEW_VALUE: Any = None
GUARD_FACE: Any = None
RESOLVER_DEFAULTS: Any = None
MAKE_DOOR: Any = None
MAKE_FACE: Any = None
ENFORCE: Any = None
NO_UDPLITE: Any = None
LEARNING: Any = None
WRITABLE: Any = None
SEEN: Any = None
FAST: Any = None
TYPE_NEW: Any = None
MODULE_TYPE: Any = None
PUBLIC: Any = None
GETCWD: Any = None
POSIX_OPEN: Any = None
POSIX_CLOSE: Any = None
READLINK: Any = None
O_PATH_DIR: Any = None
FSENC: Any = None
FOREIGN: Any = None
BUILT: Any = None
SOCKET_EVENTS: Any = None
BACKSTOP_EVENTS: Any = None
RESOLVER_PARAMS: Any = None
ADDRESS_AT: Any = None


def _n_patchers() -> tuple[Any, Any, list[Any], dict[str, Any]]:
    """The patches of ``_socket`` and ``socket`` (sharing one matcher and one cache) and
    the backstop's audit handlers (none when nothing is refused)."""
    started: list[Any] = []
    backstops: dict[str, list[Any]] = {e: [] for e in BACKSTOP_EVENTS}

    def faces_for(module: Any) -> Any:
        raw = module.socket.__mro__[-2]
        for known, faces in BUILT:
            if known is raw:
                return faces
        faces = _n_faces(module, raw)
        BUILT.append((raw, faces))
        if faces[4] is not None:
            for event, judge in faces[4].items():
                backstops[event].append(judge)
        return faces

    def patch_c(module: Any) -> None:
        """Patch one instance of the ``_socket`` C module (Python >= 3.12 may create a
        second one, with classes of its own: it gets faces of its own)."""
        started.append(module)
        resolvers, _methods, guarded, socketpair, _backstop = faces_for(module)
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
        if not issubclass(type(cls), type) or type(c_module) is not MODULE_TYPE:
            return
        if c_module.__dict__.get("__name__") != "_socket":
            return
        resolvers, methods, guarded, _socketpair, _backstop = faces_for(c_module)
        for name, fn in resolvers.items():
            if name != "getaddrinfo":  # socket.getaddrinfo calls _socket.getaddrinfo
                setattr(module, name, fn)
        if guarded is not None:
            for name, fn in methods.items():
                setattr(cls, name, fn)
            setattr(module, "SocketType", guarded)  # a copy of the raw class ("import *")

    handlers: dict[str, Any] = {}
    if ENFORCE and not LEARNING:
        for event in BACKSTOP_EVENTS:
            handlers[event] = _n_backstop_handler(event, backstops[event])
    return patch_c, patch_py, started, handlers


def _n_backstop_handler(event: str, judges: list[Any]) -> Any:
    """The audit handler of one event: each C socket class's judge in turn (the first whose
    class the socket is of answers); a refusal is returned (the hook raises it)."""
    if event not in SOCKET_EVENTS:

        def handler(args: tuple) -> Any:
            for judge in judges:
                verdict = judge(args)
                if verdict is not FOREIGN:
                    return verdict
            return None

        return handler

    direction = SOCKET_EVENTS[event]

    def socket_handler(args: tuple) -> Any:
        sock, address = args[0], args[1]
        # Exact types only are hashed (a str subclass's __hash__ would be the program's).
        exact = (
            type(address) is tuple
            and len(address) == 2
            and type(address[0]) is str
            and type(address[1]) is int
        ) or _n_exact_address(address)
        for family_of, type_of, proto_of, judge in judges:
            try:
                key = (family_of(sock), type_of(sock), proto_of(sock), address, direction)
            except TypeError:
                continue  # a socket of another C class: its own entry judges it
            if exact and FAST.get(key) is address:
                # The very tuple a face checked and handed to C (exact str and ints), not
                # merely one equal to it.
                return None
            verdict = judge(args)
            if verdict is not FOREIGN:
                return verdict
        return DEFER(
            DENIED,
            f"network {event} refused: a socket the network guard did not patch",
            target=event,
        )

    return socket_handler


def _n_exact_address(address: Any) -> bool:
    """An address made of exact built-in types only (safe to hash, compare and format)."""
    kind = type(address)
    if kind is tuple:
        for part in address:
            t = type(part)
            if t is not str and t is not int and t is not bytes:
                return False
        return True
    return kind is str or kind is bytes


def _n_host_text(host: Any) -> str | None:
    kind = type(host)
    if kind is str:
        return host
    if kind is bytes or kind is bytearray:
        try:
            return bytes(host).decode("ascii")
        except UnicodeDecodeError:
            return None
    return None


def _n_family_ok(address: str, family: int, af_inet: int, af_inet6: int) -> bool:
    if family == af_inet:
        return ":" not in address
    if family == af_inet6:
        return ":" in address
    return True


def _n_hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _n_exact_int(value: Any) -> int:
    if type(value) is int:
        return value
    raise TypeError(f"'{TYPE_NAME(type(value))}' object cannot be interpreted as an integer")


def _n_refuse(message: str, target: str, suggestion: str = "", name: bool = False) -> Any:
    """Record a refusal; the placeholder to raise (the face builds the error). ``name``:
    a host name refused before any query, raised as the resolver's own error for a name
    that does not resolve (``socket.gaierror``) as well as a NetworkDeniedError."""
    RECORDER.deny(GUARD, target, message, suggestion)
    return DEFER(NAME_DENIED if name else DENIED, message, target=target, suggested_rule=suggestion)


def _n_refusal_text(what: str, rule: Any, suggestion: str) -> str:
    if rule is not None:
        return (
            f"{what} refused by network rule {rule}; a deny rule beats every allow: remove "
            "or narrow it to allow this"
        )
    return (
        f"{what} refused: no network rule allows it; to allow it, add to the profile's "
        f"network: section:  - {suggestion}"
    )


def _n_canon(address: str) -> str:
    try:
        return CANONICAL_TEXT(address.split("%", 1)[0])
    except ValueError:
        return address


def _n_unix_canonical(text: str) -> str:
    """The absolute path of a socket with its directory's symlinks resolved (by the kernel:
    ``O_PATH`` open, then ``/proc/self/fd``), or the path as written when the directory
    cannot be opened (hidden, missing): judged so, which refuses it. C calls only."""
    if not text.startswith("/"):
        text = GETCWD() + "/" + text
    parts: list[str] = []
    for part in text.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part and part != ".":
            parts.append(part)
    name = parts.pop() if parts else ""
    directory = "/" + "/".join(parts)
    try:
        fd = POSIX_OPEN(directory, O_PATH_DIR)
    except OSError:
        return (directory.rstrip("/") or "") + "/" + name
    try:
        resolved = READLINK(f"/proc/self/fd/{fd}")
    except OSError:
        resolved = directory
    finally:
        POSIX_CLOSE(fd)
    return (resolved.rstrip("/") or "") + "/" + name


def _n_faces(_socket: Any, raw: Any) -> tuple[Any, ...]:
    """The guarded functions for one ``_socket`` module and its C socket class:
    ``(resolvers, methods, guarded class, socketpair, backstop)``: the last three are None
    when only pinning, the backstop (audit event -> judge) is None in a learning run.

    The judges are closures made by the ``_n_*`` groups below, over one context
    (:func:`_n_context`: this module's C functions and constants) and each other's
    functions, all passed in ``k`` and bound as locals: every closure is made in a sealed
    frame and holds only what it uses."""
    k = _n_context(_socket, raw)
    for group in (_n_names, _n_answers, _n_resolvers, _n_inet, _n_sockets):
        k.update(group(k))
    enforce, learning = k["enforce"], k["learning"]
    family_of, type_of, proto_of = _n_take(k, "family_of type_of proto_of")
    address_judge, j_listen = _n_take(k, "address_judge j_listen")
    j_getaddrinfo, j_gethostbyname, j_gethostbyname_ex = _n_take(
        k, "j_getaddrinfo j_gethostbyname j_gethostbyname_ex"
    )
    j_gethostbyaddr, j_getnameinfo = _n_take(k, "j_gethostbyaddr j_getnameinfo")

    public = PUBLIC
    methods: dict[str, Any] = {}
    for name, direction, call in (
        ("connect", "out", "connect"),
        ("connect_ex", "out", "connect"),
        ("bind", "in", "bind"),
        ("sendto", "out", "sendto"),
        ("sendmsg", "out", "sendmsg"),
    ):
        methods[name] = GUARD_FACE(
            getattr(raw, name),
            address_judge(name, direction, call),
            prepare=public["address_prepare"](ADDRESS_AT[name]),
        )
    methods["listen"] = GUARD_FACE(raw.listen, j_listen)

    judges = {
        "getaddrinfo": j_getaddrinfo,
        "gethostbyname": j_gethostbyname,
        "gethostbyname_ex": j_gethostbyname_ex,
        "gethostbyaddr": j_gethostbyaddr,
        "getnameinfo": j_getnameinfo,
    }
    resolvers: dict[str, Any] = {}
    for name, judge in judges.items():
        original = getattr(_socket, name)
        face = GUARD_FACE(
            original,
            judge,
            prepare=public["resolver_prepare"](
                RESOLVER_PARAMS[name], RESOLVER_DEFAULTS.get(name, ())
            ),
        )
        face.__module__ = "_socket"
        resolvers[name] = face

    if not enforce:
        return resolvers, methods, None, None, None

    meta = TYPE_NEW(
        type,
        "_GuardedType",
        (type,),
        {
            "__instancecheck__": public["class_check"](raw, isinstance, type.__instancecheck__),
            "__subclasscheck__": public["class_check"](raw, issubclass, type.__subclasscheck__),
            "__setattr__": public["immutable"](raw, type.__setattr__, TypeError),
            "__delattr__": public["immutable"](raw, type.__delattr__, TypeError),
            "__module__": "_socket",
            "__doc__": "Keeps isinstance(s, _socket.socket) true for every socket object.",
        },
    )
    raw_init = raw.__dict__["__init__"]
    init = raw_init  # the face looks like the C slot it stands for
    if not learning:
        door = MAKE_DOOR(_n_refused_socket_init(k, raw_init), None, None, "__init__")
        init = MAKE_FACE(door, raw_init)
    guarded = TYPE_NEW(
        meta,
        "socket",
        (raw,),
        {
            "__slots__": (),
            "__module__": "_socket",
            "__doc__": raw.__doc__,
            **methods,
            "__init__": init,
        },
    )
    raw_new = raw.__new__
    raw_detach = raw.__dict__["detach"]

    def adopt(result: Any, args: tuple, kwargs: dict) -> Any:
        """socketpair's sockets as sockets of the guarded class (C calls only)."""
        out = []
        for s in result:
            fam, typ, pro = family_of(s), type_of(s), proto_of(s)
            g = raw_new(guarded)
            raw_init(g, fam, typ, pro, raw_detach(s))
            out.append(g)
        return (out[0], out[1])

    socketpair = MAKE_FACE(
        MAKE_DOOR(_socket.socketpair, None, adopt, "socketpair"), _socket.socketpair
    )
    if learning:
        return resolvers, methods, guarded, socketpair, None  # nothing is refused

    return resolvers, methods, guarded, socketpair, _n_backstop(k)


def _n_refused_socket_init(k: dict[str, Any], raw_init: Any) -> Any:
    """The guarded class's ``__init__``: the C one, and a UDP socket the OS layer refuses
    to make (landlock's seccomp filter, for a profile whose rules allow no UDP at all: it
    cannot filter UDP by address) is refused as every other network access is, with a
    NetworkDeniedError naming the rule to add, not the kernel's bare PermissionError. A
    UDP-Lite socket, which that filter refuses to every profile (it lets through UDP's
    protocol number only), is refused with a NetworkDeniedError saying so."""
    AF_INET, AF_INET6, SOCK_DGRAM = _n_take(k, "AF_INET AF_INET6 SOCK_DGRAM")
    UDP_PROTOS, IPPROTO_UDPLITE = _n_take(k, "UDP_PROTOS IPPROTO_UDPLITE")
    names = ("family", "type", "proto", "fileno")

    def number(value: Any, default: int) -> int | None:
        kind = type(value)
        if kind is int:
            return value
        if issubclass(kind, int):  # an IntEnum constant: its value, no method of its own
            return int.__index__(value)
        return None if value is not None else default

    def creates_udp(args: tuple, kwargs: dict) -> int | None:
        """The protocol of the UDP (or UDP-Lite) socket these arguments make, else None."""
        given = [-1, -1, -1, None]
        for i, value in enumerate(args[1:5]):
            given[i] = value
        for key in kwargs:  # exact str keys: the door refused any other
            if key in names:
                given[names.index(key)] = kwargs[key]
        family, kind, proto = (number(v, -1) for v in given[:3])
        if given[3] is not None or family is None or kind is None or proto is None:
            return None
        if family == -1:
            family = AF_INET
        if family in (AF_INET, AF_INET6) and kind & 0xF == SOCK_DGRAM and proto in UDP_PROTOS:
            return proto
        return None

    carried = not NO_UDPLITE
    refused_lite = (
        "network: udplite socket refused: the OS layer carries TCP and UDP only ({why}), "
        "so no UDP-Lite datagram would reach its peer; use a udp socket"
    )

    def init(*args: Any, **kwargs: Any) -> Any:
        if not carried and creates_udp(args, kwargs) == IPPROTO_UDPLITE:
            why = "the packet filter of the sandbox's network namespace"
            raise _n_refuse(refused_lite.format(why=why), "udplite socket")
        try:
            return raw_init(*args, **kwargs)
        except PermissionError as e:
            if type(e) is not PermissionError or e.errno != 13:
                raise
            proto = creates_udp(args, kwargs)
            if proto is None:
                raise
        if proto == IPPROTO_UDPLITE:
            why = "landlock's seccomp filter, which lets through UDP's protocol alone"
            raise _n_refuse(refused_lite.format(why=why), "udplite socket")
        rule = "allow udp HOST PORT out"
        raise _n_refuse(
            "network: udp socket refused: no network rule allows udp, and the OS layer "
            "refuses a udp socket to such a profile; to allow it, add a udp rule to the "
            f"profile's network: section, such as:  - {rule}",
            "udp socket",
            rule,
        )

    return init


def _n_context(_socket: Any, raw: Any) -> dict[str, Any]:
    """What every judge of this ``_socket`` module uses: its C functions, the C members of
    its socket class, its constants, and how open name resolution is."""
    enforce, learning = ENFORCE, LEARNING
    fast_get = FAST.get
    raw_getaddrinfo = _socket.getaddrinfo
    raw_gethostbyname = _socket.gethostbyname
    raw_gethostbyname_ex = _socket.gethostbyname_ex
    raw_getnameinfo = _socket.getnameinfo
    raw_getsockname = raw.getsockname
    raw_getservbyname = _socket.getservbyname
    # The C members, not socket.socket's properties (which build enum objects on each read).
    family_of = raw.__dict__["family"].__get__
    type_of = raw.__dict__["type"].__get__
    proto_of = raw.__dict__["proto"].__get__
    gaierror = _socket.gaierror
    AF_INET, AF_INET6, AF_UNIX = _socket.AF_INET, _socket.AF_INET6, _socket.AF_UNIX
    SOCK_STREAM, SOCK_DGRAM = _socket.SOCK_STREAM, _socket.SOCK_DGRAM
    IPPROTO_TCP, IPPROTO_UDP = _socket.IPPROTO_TCP, _socket.IPPROTO_UDP
    TCP_PROTOS = {0, IPPROTO_TCP, getattr(_socket, "IPPROTO_MPTCP", 262)}
    # UDP-Lite (RFC 3828: UDP with a partial checksum, ports like UDP's) is judged by the udp
    # rules (``any`` and ``tcp,udp`` include them), allows and denies alike: no rule
    # grammar names it, and a ``deny udp`` must cover it (docs/network.md).
    UDP_PROTOS = {0, IPPROTO_UDP, getattr(_socket, "IPPROTO_UDPLITE", 136)}
    IPPROTO_UDPLITE = getattr(_socket, "IPPROTO_UDPLITE", 136)
    AI_NUMERICHOST, AI_PASSIVE = _socket.AI_NUMERICHOST, _socket.AI_PASSIVE
    AI_CANONNAME = _socket.AI_CANONNAME
    NI_NUMERICHOST, NI_NAMEREQD = _socket.NI_NUMERICHOST, _socket.NI_NAMEREQD
    EAI_NONAME, EAI_AGAIN, EAI_SERVICE = _socket.EAI_NONAME, _socket.EAI_AGAIN, _socket.EAI_SERVICE
    EAI_ADDRFAMILY = getattr(_socket, "EAI_ADDRFAMILY", EAI_NONAME)
    resolves_any = M["resolves_any_name"]
    open_names = learning or resolves_any or not enforce  # names outside the pins resolve
    return locals()


def _n_take(k: dict[str, Any], names: str) -> list[Any]:
    """The values of ``names`` (space-separated) in ``k``."""
    return [k[name] for name in names.split()]


def _n_names(k: dict[str, Any]) -> dict[str, Any]:
    """Name resolution for the judges: pins, real queries when allowed, refusals
    before any query; ports and protocols as the resolvers take them."""
    AF_INET, AF_INET6, IPPROTO_TCP = _n_take(k, "AF_INET AF_INET6 IPPROTO_TCP")
    IPPROTO_UDP, open_names = _n_take(k, "IPPROTO_UDP open_names")
    raw_getaddrinfo, raw_getservbyname = _n_take(k, "raw_getaddrinfo raw_getservbyname")
    SOCK_DGRAM, SOCK_STREAM = _n_take(k, "SOCK_DGRAM SOCK_STREAM")

    def name_addresses(name: str, family: int, port: Any, proto: str, direction: str) -> list:
        """Addresses of a name for a socket of ``family``: pins, else a real query when
        allowed, else a refusal before any query."""
        key = NORMALIZE_HOST(name)
        pinned = M_PINNED(M, key)
        if pinned is not None:
            return [a for a in pinned if _n_family_ok(a, family, AF_INET, AF_INET6)]
        if not open_names:
            raise refuse_name(key, port, proto, direction)
        found: list[str] = []
        for res in raw_getaddrinfo(name, None, family, SOCK_STREAM):
            address = res[4][0]
            if address not in found:
                found.append(address)
            SEEN[_n_canon(address)] = key
        return found

    def refuse_name(key: str, port: Any, proto: str = "tcp", direction: str = "out") -> Any:
        shown = port if type(port) is int else "PORT"
        suggestion = f"allow {proto} {key} {shown} {direction}"
        message = (
            f"name resolution of '{key}' refused before any query: no network rule names it; "
            f"to allow it, add to the profile's network: section:  - {suggestion}"
        )
        return _n_refuse(message, key, suggestion, name=True)

    def refuse_reverse(key: str) -> Any:
        message = (
            f"reverse name resolution of '{key}' refused before any query: only a rule that "
            "allows a wider network (a CIDR or *) lets names outside the pins resolve"
        )
        return _n_refuse(message, key)

    def numeric_port(port: Any, protos: Any) -> int | None:
        kind = type(port)
        if kind is int:
            return port
        if kind is bytes:
            text = port.decode("ascii", "replace")
        elif kind is str:
            text = port
        else:
            return None
        if text.isdigit():
            return int(text)
        for proto in protos:
            try:
                return raw_getservbyname(text, proto)
            except OSError:
                continue
        return None

    def requested_protos(type_: int, proto: int) -> list[str]:
        if type_ == SOCK_STREAM or (type_ == 0 and proto == IPPROTO_TCP):
            return ["tcp"]
        if type_ == SOCK_DGRAM or (type_ == 0 and proto == IPPROTO_UDP):
            return ["udp"]
        return ["tcp", "udp"]

    def resolver_args(args: tuple, kwargs: dict, count: int, ints: int) -> tuple:
        """Exact positional arguments, or a TypeError (a door called with something else:
        the faces prepare every call)."""
        if kwargs or len(args) > count:
            raise TypeError("pysb: resolver arguments reach the C function through its face")
        copied = None
        for i, value in enumerate(args):
            kind = type(value)
            if kind is not int and issubclass(kind, int):
                # An IntEnum (socket.SOCK_STREAM...): its value, copied by C code alone
                # (int.__index__ of an int subclass runs no __index__ of its own); the C
                # function reads the same value from the object itself.
                if copied is None:
                    copied = list(args)
                copied[i] = value = int.__index__(value)
                kind = int
            if i >= count - ints and kind is not int:
                raise TypeError(f"an integer is required (got type {TYPE_NAME(kind)})")
            scalar = kind is str or kind is bytes or kind is int or value is None
            if not scalar and (kind is not tuple or not _n_exact_address(value)):
                raise TypeError(f"str, bytes or None expected, not {TYPE_NAME(kind)}")
        return args if copied is None else tuple(copied)

    def default_proto(type_: int) -> int:
        if type_ == SOCK_STREAM:
            return IPPROTO_TCP
        if type_ == SOCK_DGRAM:
            return IPPROTO_UDP
        return 0

    return {
        "name_addresses": name_addresses,
        "refuse_name": refuse_name,
        "refuse_reverse": refuse_reverse,
        "numeric_port": numeric_port,
        "requested_protos": requested_protos,
        "resolver_args": resolver_args,
        "default_proto": default_proto,
    }


def _n_answers(k: dict[str, Any]) -> dict[str, Any]:
    """What a name resolves to for the program: judged as a whole (every address), or
    answered from its pins."""
    AF_INET, AF_INET6, AI_CANONNAME = _n_take(k, "AF_INET AF_INET6 AI_CANONNAME")
    AI_PASSIVE, default_proto, EAI_NONAME = _n_take(k, "AI_PASSIVE default_proto EAI_NONAME")
    EAI_SERVICE, gaierror, IPPROTO_TCP = _n_take(k, "EAI_SERVICE gaierror IPPROTO_TCP")
    IPPROTO_UDP, numeric_port = _n_take(k, "IPPROTO_UDP numeric_port")
    requested_protos, SOCK_DGRAM = _n_take(k, "requested_protos SOCK_DGRAM")
    (SOCK_STREAM,) = _n_take(k, "SOCK_STREAM")

    def judge_name(key, addresses, port, type_, proto, flags) -> None:
        """A name is usable only if every address of it is allowed for some protocol asked."""
        protos = requested_protos(type_, proto)
        number = numeric_port(port, protos)
        if number is None or not addresses:
            return
        direction = "in" if flags & AI_PASSIVE else "out"
        decision: tuple = (False, None)
        canon = [_n_canon(a) for a in addresses]
        for p in protos:
            decision = M_CHECK_HOST(M, p, key, number, direction, canon)
            if decision[0]:
                return
        suggestion = M_SUGGEST(M, protos[0], key, number, direction)
        what = (
            f"network connection to {_n_hostport(key, number)} ({protos[0]} {direction}) "
            f"[{', '.join(addresses)}]"
        )
        raise _n_refuse(_n_refusal_text(what, decision[1], suggestion), key, suggestion)

    def pinned_answers(key, pinned, port, family, type_, proto, flags):
        number = numeric_port(port, requested_protos(type_, proto)) or 0
        if port is not None and numeric_port(port, ["tcp", "udp"]) is None:
            raise DEFER(gaierror, EAI_SERVICE, "Servname not supported for ai_socktype")
        kinds = (
            [(SOCK_STREAM, IPPROTO_TCP), (SOCK_DGRAM, IPPROTO_UDP)]
            if type_ == 0
            else [(type_, proto or default_proto(type_))]
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
                canon = key if (flags & AI_CANONNAME and not out) else ""
                out.append((fam, kind, kproto, canon, sockaddr))
        if not out:
            raise DEFER(gaierror, EAI_NONAME, "Name or service not known")
        return out

    return {
        "judge_name": judge_name,
        "pinned_answers": pinned_answers,
    }


def _n_resolvers(k: dict[str, Any]) -> dict[str, Any]:
    """The judges of the five resolvers (``getaddrinfo``, ``gethostbyname``,
    ``gethostbyname_ex``, ``gethostbyaddr``, ``getnameinfo``)."""
    AI_NUMERICHOST, AI_PASSIVE, EAI_AGAIN = _n_take(k, "AI_NUMERICHOST AI_PASSIVE EAI_AGAIN")
    enforce, gaierror, judge_name, learning = _n_take(k, "enforce gaierror judge_name learning")
    NI_NAMEREQD, NI_NUMERICHOST = _n_take(k, "NI_NAMEREQD NI_NUMERICHOST")
    numeric_port, open_names = _n_take(k, "numeric_port open_names")
    pinned_answers, raw_getaddrinfo = _n_take(k, "pinned_answers raw_getaddrinfo")
    raw_gethostbyname, raw_gethostbyname_ex = _n_take(k, "raw_gethostbyname raw_gethostbyname_ex")
    raw_getnameinfo, refuse_name = _n_take(k, "raw_getnameinfo refuse_name")
    refuse_reverse, requested_protos = _n_take(k, "refuse_reverse requested_protos")
    (resolver_args,) = _n_take(k, "resolver_args")

    def j_getaddrinfo(args: tuple, kwargs: dict) -> Any:
        args = resolver_args(args, kwargs, 6, 4)
        if len(args) < 2:
            return None  # the C function explains
        host, port = args[0], args[1]
        family, type_, proto, flags = (*args[2:], 0, 0, 0, 0)[:4]
        if host is None:
            return None
        text = _n_host_text(host)
        if text is None or NUMERIC_HOST(text) is not None or flags & AI_NUMERICHOST:
            # Numeric: the C library answers without a query; make sure of it.
            return ((host, port, family, type_, proto, flags | AI_NUMERICHOST), {})
        key = NORMALIZE_HOST(text)
        pinned = M_PINNED(M, key)
        if pinned is None:
            if not open_names:
                protos = requested_protos(type_, proto)
                direction = "in" if flags & AI_PASSIVE else "out"
                raise refuse_name(key, numeric_port(port, protos), protos[0], direction)
            answers = raw_getaddrinfo(host, port, family, type_, proto, flags)
            for res in answers:
                SEEN.setdefault(_n_canon(res[4][0]), key)
            if enforce and not learning:
                judge_name(key, [r[4][0] for r in answers], port, type_, proto, flags)
            return answers
        if enforce and not learning:
            judge_name(key, list(pinned), port, type_, proto, flags)
        return pinned_answers(key, pinned, port, family, type_, proto, flags)

    def forward_name(args: tuple, kwargs: dict) -> Any:
        """``(host, key, pins)`` of a name the guard answers (pins None: a real query, when
        names outside the pins may resolve), or None when the C function answers (a
        numeric host, a malformed call); a refusal for any other name."""
        args = resolver_args(args, kwargs, 1, 0)
        if len(args) != 1:
            return None
        text = _n_host_text(args[0])
        if text is None or NUMERIC_HOST(text) is not None:
            return None
        key = NORMALIZE_HOST(text)
        pinned = M_PINNED(M, key)
        if pinned is None and not open_names:
            raise refuse_name(key, None)
        return (args[0], key, pinned)

    def pinned_v4(pinned: Any) -> list[str]:
        v4 = [a for a in pinned if ":" not in a]
        if not v4:
            raise DEFER(gaierror, EAI_AGAIN, "Temporary failure in name resolution")
        return v4

    def j_gethostbyname(args: tuple, kwargs: dict) -> Any:
        name = forward_name(args, kwargs)
        if name is None:
            return None
        host, key, pinned = name
        if pinned is None:
            answer = raw_gethostbyname(host)
            SEEN.setdefault(answer, key)
            return answer
        return pinned_v4(pinned)[0]

    def j_gethostbyname_ex(args: tuple, kwargs: dict) -> Any:
        name = forward_name(args, kwargs)
        if name is None:
            return None
        host, key, pinned = name
        if pinned is None:
            answer = raw_gethostbyname_ex(host)
            for a in answer[2]:
                SEEN.setdefault(a, key)
            return NEW_VALUE(answer)
        return NEW_VALUE((key, [], pinned_v4(pinned)))

    def j_gethostbyaddr(args: tuple, kwargs: dict) -> Any:
        args = resolver_args(args, kwargs, 1, 0)
        if len(args) != 1:
            return None
        text = _n_host_text(args[0])
        literal = NUMERIC_HOST(text) if text is not None else None
        if literal is not None:
            name = M_NAME_OF(M, IP_TEXT(literal))
            if name is not None:
                return NEW_VALUE((name, [], [IP_TEXT(literal)]))
        elif text is not None:
            pinned = M_PINNED(M, text)
            if pinned is not None:
                return NEW_VALUE((NORMALIZE_HOST(text), [], list(pinned)))
        if open_names:
            return None
        raise refuse_reverse(text if text is not None else "?")

    def j_getnameinfo(args: tuple, kwargs: dict) -> Any:
        args = resolver_args(args, kwargs, 2, 1)
        if len(args) != 2:
            return None
        sockaddr, flags = args
        if flags & NI_NUMERICHOST or open_names:
            return None
        host, service = raw_getnameinfo(sockaddr, flags | NI_NUMERICHOST)
        name = M_NAME_OF(M, host)
        if name is not None:
            return NEW_VALUE((name, service))
        if flags & NI_NAMEREQD:
            raise refuse_reverse(host)
        return NEW_VALUE((host, service))

    return {
        "j_getaddrinfo": j_getaddrinfo,
        "forward_name": forward_name,
        "pinned_v4": pinned_v4,
        "j_gethostbyname": j_gethostbyname,
        "j_gethostbyname_ex": j_gethostbyname_ex,
        "j_gethostbyaddr": j_gethostbyaddr,
        "j_getnameinfo": j_getnameinfo,
    }


def _n_inet(k: dict[str, Any]) -> dict[str, Any]:
    """The judge of an IPv4 / IPv6 address (and what a learning run records of it)."""
    AF_INET, AF_INET6, EAI_ADDRFAMILY = _n_take(k, "AF_INET AF_INET6 EAI_ADDRFAMILY")
    EAI_NONAME, enforce, family_of, gaierror = _n_take(k, "EAI_NONAME enforce family_of gaierror")
    learning, name_addresses, proto_of = _n_take(k, "learning name_addresses proto_of")
    SOCK_DGRAM, SOCK_STREAM, TCP_PROTOS = _n_take(k, "SOCK_DGRAM SOCK_STREAM TCP_PROTOS")
    type_of, UDP_PROTOS = _n_take(k, "type_of UDP_PROTOS")

    def learn_inet(proto: str, host: str, port: int, direction: str, call: str) -> None:
        RECORDER.learn(
            GUARD,
            f"{proto} {_n_hostport(host, port)} {direction}",
            call,
            f"allow {proto} {host} {port} {direction}",
            kind="inet",
            proto=proto,
            host=host,
            port=port,
            direction=direction,
        )

    def inet_target(sock, address, direction: str, call: str):
        """Judge an AF_INET/AF_INET6 address; return the address to hand to the C call."""
        family = family_of(sock)
        if type(address) is not tuple:
            kind = "AF_INET" if family == AF_INET else "AF_INET6"
            raise TypeError(
                f"{call}(): {kind} address must be tuple, not {TYPE_NAME(type(address))}"
            )  # CPython's words (getsockaddrarg names its caller)
        if family == AF_INET and len(address) != 2:
            raise TypeError("AF_INET address must be a pair (host, port)")
        if family == AF_INET6 and not 2 <= len(address) <= 4:
            raise TypeError("AF_INET6 address must be a tuple (host, port[, flowinfo[, scopeid]])")
        host, port, *rest = address
        port = _n_exact_int(port)
        if not 0 <= port <= 65535:
            raise OverflowError(f"{call}(): port must be 0-65535.")
        rest = [_n_exact_int(x) for x in rest]
        proto = sock_proto(sock, call)
        if proto is None:
            return address
        text = _n_host_text(host)
        if text is None:
            raise TypeError(f"str, bytes or bytearray expected, not {TYPE_NAME(type(host))}")
        name = None
        every: list[str] = []
        if text == "":
            addresses = ["0.0.0.0" if family == AF_INET else "::"]
        elif text == "<broadcast>" and family == AF_INET:
            addresses = ["255.255.255.255"]
        else:
            literal = NUMERIC_HOST(text)
            if literal is not None:
                if literal[0] != (4 if family == AF_INET else 6):
                    raise DEFER(
                        gaierror, EAI_ADDRFAMILY, "Address family for hostname not supported"
                    )
                addresses = [IP_TEXT(literal)]
            else:
                # A name is judged as a whole (every address, any family); the C call gets the
                # first address of the socket's family.
                name = NORMALIZE_HOST(text)
                every = name_addresses(text, 0, port, proto, direction)
                addresses = [a for a in every if _n_family_ok(a, family, AF_INET, AF_INET6)]
                if not addresses:
                    raise DEFER(gaierror, EAI_NONAME, "Name or service not known")
        result = (addresses[0], port, *rest)
        if enforce and not learning:
            if name is None:
                allowed, rule = M_CHECK(M, proto, addresses[0], port, direction)
            else:
                allowed, rule = M_CHECK_HOST(
                    M, proto, name, port, direction, [_n_canon(a) for a in every]
                )
            if not allowed:
                shown = name or _n_canon(addresses[0])
                suggestion = M_SUGGEST(M, proto, shown, port, direction)
                what = f"network {call} to {_n_hostport(shown, port)} ({proto} {direction})"
                if name is not None:
                    what += f" [{', '.join(every)}]"
                raise _n_refuse(
                    _n_refusal_text(what, rule, suggestion), _n_hostport(shown, port), suggestion
                )
            if len(FAST) >= 4096:
                FAST.clear()
            sock_kind = (family, type_of(sock), proto_of(sock))
            FAST[(*sock_kind, result, direction)] = result  # what the audit backstop sees
            if name is None and _n_exact_address(address):
                FAST[(*sock_kind, address, direction)] = result
        elif learning:
            canon = _n_canon(addresses[0])
            shown = name or SEEN.get(canon) or M_NAME_OF(M, canon) or canon
            learn_inet(proto, shown, port, direction, call)
        return result

    def sock_proto(sock, call: str) -> str | None:
        type_, proto = type_of(sock), proto_of(sock)
        if type_ == SOCK_STREAM and proto in TCP_PROTOS:
            return "tcp"
        if type_ == SOCK_DGRAM and proto in UDP_PROTOS:
            return "udp"
        what = f"{call} on a socket of type {type_} protocol {proto}"
        if learning:
            return None  # no rule can express it: nothing to learn
        raise _n_refuse(
            f"{what} refused: network rules cover only TCP and UDP (raw, ICMP and other "
            "protocols are never allowed)",
            what,
        )

    return {
        "learn_inet": learn_inet,
        "inet_target": inet_target,
        "sock_proto": sock_proto,
    }


def _n_sockets(k: dict[str, Any]) -> dict[str, Any]:
    """The judges of the socket methods taking an address (``connect``, ``bind``,
    ``sendto``...) and of ``listen``."""
    AF_INET, AF_INET6, AF_UNIX, family_of = _n_take(k, "AF_INET AF_INET6 AF_UNIX family_of")
    fast_get, inet_target, learning = _n_take(k, "fast_get inet_target learning")
    proto_of, raw_getsockname, SOCK_STREAM = _n_take(k, "proto_of raw_getsockname SOCK_STREAM")
    (type_of,) = _n_take(k, "type_of")

    abstract = M["abstract"]

    def unix_target(address, call: str, direction: str):
        kind = type(address)
        if kind is bytearray:
            address = bytes(address)
        elif kind is not str and kind is not bytes:
            raise TypeError(f"a bytes-like object or str is required, not {TYPE_NAME(kind)}")
        text = address if type(address) is str else address.decode(FSENC, "surrogateescape")
        if text == "" or text.startswith("\0"):
            # No path, host or port to name: judged by the rules over everything alone
            # (netmatch.abstract_decision; docs/network.md). Learning writes no rule for
            # them: the one rule that allows them grants every address.
            allowed, rule = abstract[direction]
            if allowed or learning:
                return address
            what = f"{call} on an abstract Unix socket {text[1:]!r}"
            suggestion = f"allow any * * {direction}"
            if rule is not None:
                message = _n_refusal_text(what, rule, suggestion)
            else:
                message = (
                    f"{what} refused: an abstract Unix socket has no path or address a rule "
                    "can name, so only a rule over every address, port and protocol allows "
                    f"it; to allow it (and every other address), add to the profile's network: "
                    f"section:  - {suggestion}"
                )
            raise _n_refuse(message, what, suggestion)
        canonical = _n_unix_canonical(text)
        for w in WRITABLE:
            if canonical == w or canonical.startswith(w + "/") or w == "/":
                return address
        directory = canonical.rsplit("/", 1)[0] or "/"
        if learning:
            RECORDER.learn(
                GUARD,
                f"unix {canonical}",
                call,
                f"expose-rw: {directory}",
                kind="unix",
                path=canonical,
            )
            return address
        suggestion = f"expose-rw: {directory}"
        message = (
            f"network {call} to Unix socket {canonical} refused: a Unix socket needs a "
            f"read-write exposure; to allow it, add to the profile's files: section:  {suggestion}"
        )
        raise _n_refuse(message, canonical, suggestion)

    def target(sock, address, direction: str, call: str):
        family = family_of(sock)
        if family in (AF_INET, AF_INET6):
            return inet_target(sock, address, direction, call)
        if family == AF_UNIX:
            return unix_target(address, call, direction)
        if learning:
            return address
        what = f"{call} on an address family {family} socket"
        raise _n_refuse(
            f"{what} refused: network rules cover only IPv4, IPv6 and Unix-path sockets", what
        )

    def checked_address(sock, address, direction: str, call: str):
        """The address to hand to C: from the cache when a face checked this very spelling
        (exact types only: they are safe to hash), else judged now."""
        if _n_exact_address(address):
            try:
                hit = fast_get((family_of(sock), type_of(sock), proto_of(sock), address, direction))
            except TypeError:  # not a socket of this class: the full judge explains
                hit = None
            if hit is not None:
                return hit
        return target(sock, address, direction, call)

    # Exact built-in types no buffer / no integer converter takes: ``sendto``'s C parsing
    # refuses such data or flags (TypeError) before it reads the address.
    not_data = (str, int, float, complex, bool, type(None), list, tuple, dict, set)
    not_flags = (str, bytes, bytearray, float, complex, type(None), list, tuple, dict, set)

    def one_of(value, kinds) -> bool:
        kind = type(value)  # by identity: a class's hash may be the program's (a metaclass)
        return any(kind is k for k in kinds)

    def address_judge(name: str, direction: str, call: str):
        at = ADDRESS_AT[name]

        def judge(args: tuple, kwargs: dict) -> Any:
            n = len(args)
            if n == 2 and at == 1 and not kwargs:
                # The common case, inline: an exact (str, int) pair this socket kind and
                # direction already passed (exact types: safe to hash and compare).
                sock, address = args
                if (
                    type(address) is tuple
                    and len(address) == 2
                    and type(address[0]) is str
                    and type(address[1]) is int
                ):
                    try:
                        hit = fast_get(
                            (family_of(sock), type_of(sock), proto_of(sock), address, direction)
                        )
                    except TypeError:
                        hit = None
                    if hit is not None:
                        return ((sock, hit), kwargs)
            if kwargs:
                return None  # these C methods take no keywords: the call fails there
            pos = n + at if at < 0 else at
            if at < 0 and n not in (3, 4):
                return None  # sendto(data) / wrong count: the C method explains
            if pos >= n or (name == "sendmsg" and args[pos] is None):
                return None  # no address (a connected socket): nothing to judge
            if name == "sendto" and (
                one_of(args[1], not_data) or (n == 4 and one_of(args[2], not_flags))
            ):
                # CPython's TypeError for the data (or flags), raised by the C method's
                # argument parsing before the address is read: nothing is sent (and the
                # audit backstop judges the address of any call that gets further).
                return None
            checked = checked_address(args[0], args[pos], direction, call)
            return ((*args[:pos], checked, *args[pos + 1 :]), kwargs)

        return judge

    def j_listen(args: tuple, kwargs: dict) -> Any:
        if not args:
            return None
        sock = args[0]
        family = family_of(sock)
        if (family in (AF_INET, AF_INET6)) and type_of(sock) == SOCK_STREAM:
            # listen() on a never-bound socket binds it to the wildcard address and a port the
            # kernel picks: judge that implicit bind. A bound socket was judged at bind().
            here = raw_getsockname(sock)
            if here[1] == 0:
                target(sock, (here[0], 0), "in", "listen")
            elif learning:
                # The port this server got: a connection to it is the program talking to
                # itself, learned as the ephemeral range (network.hooks.learned_rules).
                RECORDER.learn(
                    GUARD, f"tcp {here[1]} own", "listen", "", kind="own", proto="tcp",
                    port=here[1],
                )  # fmt: skip
        return None

    return {
        "unix_target": unix_target,
        "target": target,
        "checked_address": checked_address,
        "address_judge": address_judge,
        "j_listen": j_listen,
    }


def _n_backstop(k: dict[str, Any]) -> dict[str, Any]:
    """The backstop: judges of CPython's own audit events (audit event -> judge).

    The C socket functions raise PEP 578 audit events before acting, whichever way they
    were reached (the raw class through the MRO, an original kept in a closure...). The
    hook judges those too; what the faces already judged costs one lookup."""
    AF_INET, AF_INET6, family_of, proto_of = _n_take(k, "AF_INET AF_INET6 family_of proto_of")
    refuse_name, refuse_reverse = _n_take(k, "refuse_name refuse_reverse")
    resolves_any, target, type_of = _n_take(k, "resolves_any target type_of")

    def audit_address(direction: str, call: str):
        def judge(args: tuple) -> Any:
            sock, address = args[0], args[1]
            if address is None:
                return None  # sendmsg on a connected socket
            try:
                family = family_of(sock)
            except TypeError:
                return FOREIGN  # another C socket class: its own backstop judges it
            if not _n_exact_address(address):
                # The C call already parsed it; judging it again would run the program's
                # code (an __index__, a str subclass's methods) here: refused.
                return _n_refuse(
                    f"network {call} by a raw socket method with an address of other than "
                    "built-in types refused: call the socket's own method",
                    call,
                )
            if (family in (AF_INET, AF_INET6)) and len(address) >= 2:
                text = _n_host_text(address[0])
                if text not in ("", "<broadcast>") and (text is None or NUMERIC_HOST(text) is None):
                    # The C call would resolve the name itself: no pin, maybe a query.
                    what = f"network {call} to host name {text!r} by a raw socket method"
                    return _n_refuse(
                        f"{what} refused: names are resolved through socket.getaddrinfo, "
                        "which answers pinned names; call the socket's own method",
                        str(text),
                    )
            try:
                target(sock, address, direction, call)
            except BaseException as e:
                e.__context__ = None
                return e.with_traceback(None)
            return None

        return judge

    def audit_name(args: tuple) -> Any:
        host = args[0]
        if host is None or resolves_any:
            return None
        text = _n_host_text(host) if type(host) in (str, bytes, bytearray) else None
        if text is not None and NUMERIC_HOST(text) is not None:
            return None
        return refuse_name(NORMALIZE_HOST(text) if text is not None else "?", None)

    def audit_reverse(args: tuple) -> Any:
        if resolves_any:
            return None
        host = args[0]
        return refuse_reverse(host if type(host) is str else "?")

    backstop: dict[str, Any] = {
        "socket.connect": (family_of, type_of, proto_of, audit_address("out", "connect")),
        "socket.bind": (family_of, type_of, proto_of, audit_address("in", "bind")),
        "socket.sendto": (family_of, type_of, proto_of, audit_address("out", "sendto")),
        "socket.sendmsg": (family_of, type_of, proto_of, audit_address("out", "sendmsg")),
        "socket.getaddrinfo": audit_name,
        "socket.gethostbyname": audit_name,
        "socket.gethostbyaddr": audit_reverse,
    }
    return backstop
