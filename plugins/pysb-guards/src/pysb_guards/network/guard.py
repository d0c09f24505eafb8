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

Decisions come from :mod:`pysb_core.policy.netmatch`'s functions (re-created here with private
globals), which answer exactly as :class:`pysb_core.policy.netrules.NetworkMatcher`, the code the OS
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

# What the install uses is imported with this module, before any guard: once the import
# guard is installed, an import statement run by an install goes through its faces and
# judge (docs/performance.md, "Start-up").
import _operator
import os
import posix
import sys

from pysb_core import hookimpl
from pysb_core.guardkit import NameResolutionDeniedError, NetworkDeniedError, netmatch
from pysb_guards import _seal
from pysb_guards.network import engine

#: The kernel's ephemeral port range (where a bind to port 0 lands), read as this module
#: is imported: the bootstrap imports every guard before it installs any, so the file
#: guard never judges pysb's own read of ``ip_local_port_range`` -- installed first, it
#: refused it, and ``--events`` showed the read as a denial of the program's.
EPHEMERAL = netmatch.ephemeral_ports()

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

#: The providers whose OS layer carries no UDP-Lite: the packet filter of their network
#: namespace accepts TCP and UDP only, so a datagram is dropped at its first send (EPERM)
#: while the peer, in another thread, waits for it for ever (CPython's test_socket hung
#: there). The guard refuses the socket itself under them, at once and in words.
#: (Landlock's seccomp filter refuses the socket already: ``_n_refused_socket_init``.)
_NO_UDPLITE = frozenset({"bwrap", "unshare", "firejail"})


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
    """The guard's engine: the ``_n_*`` functions of :mod:`pysb_guards.network.engine` and
    :mod:`pysb_core.policy.netmatch`'s, re-created with private globals holding the compiled rules
    and everything they call, bound now, before the program runs (``_seal.seal_group``)."""
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
        EPHEMERAL,  # a bind to port 0 lands there (docs/learning.md)
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
    functions = [fn for name, fn in vars(engine).items() if name.startswith("_n_")]
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
        NO_UDPLITE=policy.provider in _NO_UDPLITE,
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

    def immutable(raw, change_of_type, error):
        """The metaclass's ``__setattr__`` / ``__delattr__``: the guarded class is as immutable
        as the C type (CPython's TypeError), classes made from it stay mutable. Nothing
        relies on it: the audit hook's backstop judges a changed method's calls too."""

        def refuse_change(cls, name, *value):
            if cls.__mro__[1] is raw:
                raise error(f"cannot set {name!r} attribute of immutable type '_socket.socket'")
            return change_of_type(cls, name, *value)

        return refuse_change

    return {
        "address_prepare": address_prepare,
        "resolver_prepare": resolver_prepare,
        "class_check": class_check,
        "immutable": immutable,
    }
