"""The network guard: sockets and resolver functions follow the profile's ``network`` rules.

Inside the sandboxed interpreter it patches

- ``socket.socket`` ``connect``, ``connect_ex``, ``bind``, ``listen``, ``sendto``, ``sendmsg``,
  and replaces ``_socket.socket`` (and ``_socket.socketpair``) with a guarded subclass that keeps
  the class's name, so that the C-level spelling is not a way around;
- ``getaddrinfo``, ``gethostbyname``, ``gethostbyname_ex``, ``gethostbyaddr``, ``getnameinfo`` (on
  ``_socket`` and ``socket``): pinned names answer with exactly their pinned addresses and no
  query; a name no rule covers is refused before any query unless a rule allows a wider
  network (SPEC §6, §7).

Every installed function is a ``_seal`` face over a door (docs/security.md, "Design choices"):
the door holds the C method and the judge as unreadable constants, the judges and all the
guard's state (the matcher, the decision cache, the recorder) live in sealed code with
private globals, and a *prepare* step in the face turns the program's arguments into exact
built-in types (``str`` and ``int`` subclasses, ``__index__`` ports, path-likes) before the
judge sees them, so that no judge ever runs the program's code. The judges accept exact types
only; whatever else reaches them (a door called directly) is refused with ``TypeError``.

Decisions come from :mod:`pysb_core.netmatch`'s functions (re-created here with private
globals), which answer exactly as :class:`pysb_core.netrules.NetworkMatcher`, the code the OS
providers compile from (a differential test holds them together). ``AF_UNIX`` paths need a
read-write exposure; abstract Unix sockets and families the rules cannot express (raw,
netlink, packet...) are refused.

A PEP 578 audit hook is the backstop: CPython raises ``socket.connect``, ``socket.bind``,
``socket.sendto``, ``socket.sendmsg`` and resolver events from C, however the C function was
reached (the raw class through the MRO, an original kept before the guard was installed), and
the hook judges them with the same rules.

In a learning run nothing is refused: each connection and bind is recorded, by host name when
the program used one (names are remembered from resolver answers), and the parent renders
them as ``network:`` rules (:mod:`pysb_guards.network.hooks`).

It is friction, not a boundary: native code, inherited descriptors and a raw ``listen()`` (no
audit event) get around it; the OS layer is what stops them (docs/network.md).
"""

from __future__ import annotations

import os

from pysb_core import hookimpl

TYPE_CHECKING = False  # no typing import at run time: this module is loaded in the sandbox
if TYPE_CHECKING:
    from typing import Any

    from pysb_core.guardkit import Policy, Recorder

GUARD = "network"

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

#: Positional names of the resolver functions (the faces pass keywords on as positions).
_RESOLVER_PARAMS = {
    "getaddrinfo": ("host", "port", "family", "type", "proto", "flags"),
    "gethostbyname": ("hostname",),
    "gethostbyname_ex": ("hostname",),
    "gethostbyaddr": ("ip_address",),
    "getnameinfo": ("sockaddr", "flags"),
}
#: Defaults of the trailing parameters (a keyword after a skipped one is passed with them).
_RESOLVER_DEFAULTS = {"getaddrinfo": (0, 0, 0, 0)}
#: Where each socket method's address is: a position counting ``self`` (negative: from the
#: end, when the method takes 3 or 4 arguments).
_ADDRESS_AT = {"connect": 1, "connect_ex": 1, "bind": 1, "sendto": -1, "sendmsg": 4}


# ---------------------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------------------


@hookimpl
def pysb_child_install(policy: Policy, recorder: Recorder) -> str:
    """Patch sockets and resolvers of this interpreter according to ``policy``; returns
    the family put in force."""
    install(policy, recorder)
    return GUARD


def pin_resolver(pins: dict[str, list[str]]) -> None:
    """Child set-up: pinned names answer with their pins, nothing is judged or refused."""
    from pysb_core.guardkit import Policy, Recorder

    policy = Policy(pins={k: tuple(v) for k, v in pins.items()}, python_guards=False)
    install(policy, Recorder(None, learning=False), enforce=False)


# ---------------------------------------------------------------------------------------
# Install
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
    ns = _sealed_namespace(policy, recorder, enforce)
    patch_c, patch_py, started, handlers = ns["_n_patchers"]()
    if handlers:
        # The backstop (CPython's own audit events) is registered now, in the guards' one
        # audit hook: handlers can only be added before the program runs. Until a socket
        # module is loaded no such event can be raised.
        from pysb_guards import _seal

        add_handler, _close = _seal.audit_registry()
        for event, handler in handlers.items():
            add_handler(event, handler)
    if enforce:
        from pysb_guards.imports import guard as imports

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


def _sealed_namespace(policy: Policy, recorder: Recorder, enforce: bool) -> dict[str, Any]:
    """The guard's engine: the ``_n_*`` functions below and :mod:`pysb_core.netmatch`'s,
    re-created with private globals holding the compiled rules and everything they call,
    bound now, before the program runs (``_seal.seal_group``)."""
    import _operator
    import posix
    import sys

    from pysb_core.guardkit import NameResolutionDeniedError, NetworkDeniedError, netmatch
    from pysb_guards import _seal

    function_type = type(install)
    match_ns = _seal.seal_group(
        [
            v
            for v in vars(netmatch).values()
            if type(v) is function_type and v.__module__ == netmatch.__name__
        ],
        **{
            k: v
            for k, v in vars(netmatch).items()
            if not k.startswith("__") and type(v) in (int, str, type(len))
        },
    )
    learning = bool(recorder.learning)
    matcher = match_ns["compile_matcher"](
        policy.network,
        policy.pins,
        None,
        lambda rule: f"'{rule}' ({rule.source})",
        netmatch.ephemeral_ports(),  # a bind to port 0 lands there (docs/learning.md)
    )
    writable = tuple(
        sorted(
            {
                os.path.normpath(p).rstrip("/") or "/"
                for e in policy.exposures
                if e.writable
                for p in (e.path, e.target)
            }
        )
    )
    functions = [fn for name, fn in globals().items() if name.startswith("_n_")]
    builders = _seal.builders()
    builders["GUARD_FACE"] = builders.pop("GUARD")
    return _seal.seal_group(
        functions,
        **builders,
        GUARD=GUARD,
        SOCKET_EVENTS=dict(_SOCKET_EVENTS),
        BACKSTOP_EVENTS=_BACKSTOP_EVENTS,
        RESOLVER_PARAMS=dict(_RESOLVER_PARAMS),
        RESOLVER_DEFAULTS=dict(_RESOLVER_DEFAULTS),
        ADDRESS_AT=dict(_ADDRESS_AT),
        DENIED=NetworkDeniedError,
        NAME_DENIED=NameResolutionDeniedError,
        RECORDER=_seal.private_recorder(recorder),
        ENFORCE=enforce,
        LEARNING=learning,
        M=matcher,
        M_CHECK=match_ns["check"],
        M_CHECK_HOST=match_ns["check_host"],
        M_PINNED=match_ns["pinned"],
        M_NAME_OF=match_ns["name_of"],
        M_SUGGEST=match_ns["suggest"],
        CANONICAL_TEXT=match_ns["canonical_text"],
        NORMALIZE_HOST=match_ns["normalize_host"],
        NUMERIC_HOST=match_ns["numeric_host"],
        IP_TEXT=match_ns["ip_text"],
        WRITABLE=writable,
        SEEN={},  # address -> name the program resolved it from
        # (family, type, proto, address as given, direction) -> the checked address handed
        # to C, for allowed literal addresses of exact types: one dict lookup.
        FAST={},
        TYPE_NAME=type.__dict__["__name__"].__get__,
        TYPE_NEW=type.__new__,
        MODULE_TYPE=type(os),
        PUBLIC=_public_helpers(),
        GETCWD=posix.getcwd,
        POSIX_OPEN=posix.open,
        POSIX_CLOSE=posix.close,
        READLINK=posix.readlink,
        O_PATH_DIR=getattr(posix, "O_PATH", 0) | posix.O_DIRECTORY | posix.O_CLOEXEC,
        OP_INDEX=_operator.index,
        FSENC=sys.getfilesystemencoding(),
        FOREIGN=object(),  # a backstop's answer for a socket of another C class
        BUILT=[],  # C socket class -> its faces
    )


# ---------------------------------------------------------------------------------------
# Public helpers: the faces' prepare steps and the guarded class's metaclass
# ---------------------------------------------------------------------------------------


def _public_helpers() -> dict[str, Any]:
    """Functions the program may see (they sit in faces' closures and in the guarded
    class's metaclass) and may run its code under (an ``__index__``, a ``__fspath__``).
    They hold no state of the guard: globals with no builtins, closures over C functions
    and built-in types only (:func:`_make_public`)."""
    import _operator

    function_type: Any = type(_public_helpers)
    public = function_type(
        _make_public.__code__,
        {"__builtins__": {}, "__name__": "pysb_guards.<face>"},
        "make_public",
    )
    return public(
        str, bytes, bytearray, int, tuple, list, dict, type, len, slice, memoryview,
        issubclass, _operator.index, os.fspath, TypeError,
    )  # fmt: skip


def _make_public(
    str_, bytes_, bytearray_, int_, tuple_, list_, dict_, type_, len_, slice_, memoryview_,
    issubclass_, index, fspath, type_error,
):  # fmt: skip
    """Built with empty builtins (see :func:`_public_helpers`): every name is a parameter."""
    whole = slice_(None)

    def exact(value):
        """``value`` as an exact str, bytes or int when it is one in disguise (a subclass, a
        bytearray, an ``__index__``, a path-like); anything else unchanged (refused later).
        """
        kind = type_(value)
        if kind is str_ or kind is int_ or kind is bytes_ or value is None:
            return value
        if issubclass_(kind, int_):  # first: IntEnum constants (socket.SOCK_STREAM...)
            return int_.__index__(value)
        if issubclass_(kind, str_):
            return str_.__str__(value)
        if issubclass_(kind, bytes_):
            return bytes_.__getitem__(value, whole)
        if issubclass_(kind, bytearray_):
            return bytes_(memoryview_(value))
        try:
            return int_.__index__(index(value))
        except type_error:
            pass
        try:
            path = fspath(value)
        except type_error:
            return value
        return exact(path) if type_(path) is not kind else value

    def exact_address(value):
        if type_(value) is tuple_:
            for x in value:
                t = type_(x)
                if t is not str_ and t is not int_ and t is not bytes_:
                    return tuple_([exact(x) for x in value])
            return value  # the common case: nothing to copy
        return exact(value)

    def address_prepare(position):
        def prepare(args, kwargs):
            n = len_(args)
            at = position
            if at < 0:
                if n not in (3, 4):
                    return args, kwargs
                at = n + at
            if at >= n:
                return args, kwargs
            address = args[at]
            exact_one = exact_address(address)
            if exact_one is address:
                return args, kwargs
            return (*args[:at], exact_one, *args[at + 1 :]), kwargs

        return prepare

    def resolver_prepare(names, defaults):
        first_default = len_(names) - len_(defaults)

        def prepare(args, kwargs):
            if kwargs:
                values = list_(args)
                rest = dict_(kwargs)
                i = len_(values)
                while i < len_(names) and rest:
                    name = names[i]
                    if name in rest:
                        values.append(rest.pop(name))
                    elif i >= first_default:
                        values.append(defaults[i - first_default])
                    else:
                        break
                    i += 1
                if rest:
                    return args, kwargs  # unknown or repeated keywords: refused
                args, kwargs = tuple_(values), {}
            for a in args:
                t = type_(a)
                # int subclasses (IntEnum constants) stay: the judge copies them with C code
                plain = t is str_ or t is int_ or t is bytes_ or a is None
                if not plain and not issubclass_(t, int_):
                    return tuple_([exact_address(a) for a in args]), kwargs
            return args, kwargs

        return prepare

    def class_check(raw, check, check_of_type):
        """``__instancecheck__`` / ``__subclasscheck__`` of the guarded class's metaclass:
        the guarded class answers for the raw one (every socket object is an instance);
        classes made from it keep the ordinary check."""

        def class_check(cls, obj):
            if cls.__mro__[1] is raw:
                return check(obj, raw)
            return check_of_type(cls, obj)

        return class_check

    return {
        "address_prepare": address_prepare,
        "resolver_prepare": resolver_prepare,
        "class_check": class_check,
    }


# ---------------------------------------------------------------------------------------
# The engine (sealed: these functions run only as copies with private globals, see
# _sealed_namespace; the names in capitals are the values given there)
# ---------------------------------------------------------------------------------------

TYPE_NAME: Any = None  # sealed values, for linters and readers only
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
    when only pinning, the backstop (audit event -> judge) is None in a learning run."""
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
    UDP_PROTOS = {0, IPPROTO_UDP}
    AI_NUMERICHOST, AI_PASSIVE = _socket.AI_NUMERICHOST, _socket.AI_PASSIVE
    AI_CANONNAME = _socket.AI_CANONNAME
    NI_NUMERICHOST, NI_NAMEREQD = _socket.NI_NUMERICHOST, _socket.NI_NAMEREQD
    EAI_NONAME, EAI_AGAIN, EAI_SERVICE = _socket.EAI_NONAME, _socket.EAI_AGAIN, _socket.EAI_SERVICE
    EAI_ADDRFAMILY = getattr(_socket, "EAI_ADDRFAMILY", EAI_NONAME)
    resolves_any = M["resolves_any_name"]
    open_names = learning or resolves_any or not enforce  # names outside the pins resolve

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

    # -- resolution ------------------------------------------------------------------

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

    def default_proto(type_: int) -> int:
        if type_ == SOCK_STREAM:
            return IPPROTO_TCP
        if type_ == SOCK_DGRAM:
            return IPPROTO_UDP
        return 0

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

    # -- socket calls -------------------------------------------------------------------

    def inet_target(sock, address, direction: str, call: str):
        """Judge an AF_INET/AF_INET6 address; return the address to hand to the C call."""
        family = family_of(sock)
        if type(address) is not tuple:
            kind = "AF_INET" if family == AF_INET else "AF_INET6"
            raise TypeError(f"{kind} address must be tuple, not {TYPE_NAME(type(address))}")
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

    def unix_target(address, call: str):
        kind = type(address)
        if kind is bytearray:
            address = bytes(address)
        elif kind is not str and kind is not bytes:
            raise TypeError(f"a bytes-like object or str is required, not {TYPE_NAME(kind)}")
        text = address if type(address) is str else address.decode(FSENC, "surrogateescape")
        if text == "" or text.startswith("\0"):
            what = f"{call} on an abstract Unix socket {text[1:]!r}"
            if learning:
                return address
            raise _n_refuse(f"{what} refused: abstract Unix sockets are never allowed", what)
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
            return unix_target(address, call)
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
            "__module__": "_socket",
            "__doc__": "Keeps isinstance(s, _socket.socket) true for every socket object.",
        },
    )
    guarded = TYPE_NEW(
        meta,
        "socket",
        (raw,),
        {"__slots__": (), "__module__": "_socket", "__doc__": raw.__doc__, **methods},
    )
    raw_new = raw.__new__
    raw_init = raw.__dict__["__init__"]
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

    # -- the backstop: CPython's own audit events -----------------------------------------
    # The C socket functions raise PEP 578 audit events before acting, whichever way they
    # were reached (the raw class through the MRO, an original kept in a closure...). The
    # hook judges those too; what the faces already judged costs one lookup.

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
    return resolvers, methods, guarded, socketpair, backstop
