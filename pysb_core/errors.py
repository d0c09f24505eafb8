"""The exception tree users catch, and the exit codes pysb itself returns.

Every denial is *also* the builtin exception a program would already handle
(``FileNotFoundError``, ``PermissionError``, ...), so sandboxed code that copes with a
missing file keeps working, while callers who care can catch :class:`DeniedError`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from pysb_core.exitcodes import ExitCode as ExitCode


def __getattr__(name: str) -> object:
    # ExitCode is an IntEnum: importing enum costs ~1.5 ms, and the sandboxed interpreter
    # (which imports this module for the denial classes) never needs it.
    if name == "ExitCode":
        from pysb_core.exitcodes import ExitCode

        return ExitCode
    if name == "NameResolutionDeniedError":
        cls = _name_resolution_denied_error()
        globals()[name] = cls  # one class, made once: pickle finds it here again
        return cls
    raise AttributeError(f"module 'pysb_core.errors' has no attribute {name!r}")


class SandboxError(RuntimeError):
    """Base of every pysb error."""


class ProfileError(SandboxError):
    """A profile (or the rules given on the command line) is invalid.

    ``errors`` lists every problem as ``FILE:LINE: message``; the message shows them all.
    """

    def __init__(self, errors: Iterable[str]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(self.errors) if self.errors else "invalid profile")


class ProviderUnavailableError(SandboxError):
    """The chosen provider cannot run here; the message says why and how to fix it."""

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.reason = message
        self.fix = fix
        super().__init__(f"{message}\n  fix: {fix}" if fix else message)


class UnenforceableRuleError(SandboxError):
    """A rule that no active layer can enforce: the run must not start (fail closed)."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class SandboxProtocolError(SandboxError):
    """The channel to a sandboxed worker broke, or the sandbox failed closed."""


class SandboxTimeoutError(SandboxError, TimeoutError):
    """A sandboxed call ran longer than its ``timeout``."""


class SandboxBaseExceptionError(SandboxError):
    """A ``BaseException`` that is not an ``Exception`` (SystemExit, KeyboardInterrupt)
    raised in the child."""


class RestrictedResultError(SandboxError):
    """A value coming back from the sandbox is of a class the caller did not allow."""


class DeniedError(SandboxError):
    """An access the profile does not grant.

    The message names what was refused and the exact profile line that would allow it;
    ``suggested_rule`` holds that line alone. ``str()`` is the message. A denial that is
    also an ``OSError`` carries the ``errno`` its builtin base promises (``ENOENT`` for a
    hidden path, ``EACCES`` for a refused write or call, ``ECONNREFUSED`` for the network)
    and the message as ``strerror``, so code that reports ``e.strerror`` or tests
    ``e.errno`` reads what it would for the real error.
    """

    guard: str = ""
    #: The errno of an OSError denial (None: not an OSError).
    default_errno: int | None = None
    # What an OSError denial carries (the builtin base keeps them in C slots).
    errno: int | None
    strerror: str | None

    def __new__(cls, *args: Any, **kwargs: Any) -> DeniedError:
        """A denial, or -- made with a denial alone, by a class deriving from its class --
        a wrapper carrying the denial's fields that the builtin base keeps in C slots.

        Ray raises a task's exception on the caller's side as an instance of a class
        deriving from both ``RayTaskError`` and the exception's class, made as
        ``cls(cause)`` with no ``__init__`` of the bases: without this the wrapper of a
        refused ``open`` read None for ``errno`` and ``filename``, where partial mode's
        own caller reads the denial's (pysb-ray's tests)."""
        # The C base's own (a denial's Python bases come first in its MRO); the arguments
        # are ``__init__``'s to read: OSError's would take two as errno and strerror.
        exc = (OSError.__new__ if issubclass(cls, OSError) else BaseException.__new__)(cls)
        if len(args) == 1 and not kwargs and type(args[0]) in cls.__mro__[1:]:
            wrapped = args[0]
            for name in _SLOT_FIELDS:
                if isinstance(wrapped, _SLOT_FIELDS[name]):
                    setattr(exc, name, getattr(wrapped, name))
        return exc

    def __init__(self, message: str, *, target: str = "", suggested_rule: str = "") -> None:
        super().__init__(message)
        self.target = target
        self.suggested_rule = suggested_rule
        if self.default_errno is not None:
            self.errno = self.default_errno
            self.strerror = message

    def __reduce__(self) -> tuple[Any, ...]:  # keep the keyword attributes across pickling
        # The builtin bases keep these in C slots, not in __dict__.
        names: tuple[str, ...] = ()
        if isinstance(self, OSError):
            names = ("errno", "strerror", "filename", "filename2")
        names += ("name", "path", "msg") if isinstance(self, ImportError) else ()
        extra = {n: getattr(self, n) for n in names}
        return (_rebuild_denied, (type(self), self.args, self.__dict__, extra))

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


#: The fields the builtin bases of a denial keep in C slots, and the base holding each.
_SLOT_FIELDS: dict[str, type[BaseException]] = {
    "errno": OSError,
    "strerror": OSError,
    "filename": OSError,
    "filename2": OSError,
    "name": ImportError,
    "path": ImportError,
    "msg": ImportError,
}


def _rebuild_denied(
    cls: type[DeniedError],
    args: tuple[Any, ...],
    state: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> DeniedError:
    exc = (OSError.__new__ if issubclass(cls, OSError) else cls.__new__)(cls)
    exc.args = args
    exc.__dict__.update(state)
    for name, value in (extra or {}).items():
        setattr(exc, name, value)
    return exc


class FileDeniedError(DeniedError, FileNotFoundError):
    """A path that is not exposed, or is ignored."""

    guard = "files"
    default_errno = 2  # ENOENT (errno numbers are the same on every Linux)


class WriteDeniedError(DeniedError, PermissionError):
    """A write to a path that is exposed read-only (or is a profile file)."""

    guard = "files"
    default_errno = 13  # EACCES


class ImportDeniedError(DeniedError, ModuleNotFoundError):
    """An import of a module the profile does not list (``name``: the module, as
    ``ModuleNotFoundError`` promises; ``msg``: the message)."""

    guard = "imports"

    def __init__(self, message: str, *, target: str = "", suggested_rule: str = "") -> None:
        super().__init__(message, target=target, suggested_rule=suggested_rule)
        self.name = target or None
        self.msg = message


class NetworkDeniedError(DeniedError, ConnectionRefusedError):
    """A connection, bind or name resolution that no network rule allows."""

    guard = "network"
    default_errno = 111  # ECONNREFUSED


def _name_resolution_denied_error() -> type[NetworkDeniedError]:
    """``NameResolutionDeniedError``: made on first use, since its second base lives in
    ``_socket``, which a run without network rules never loads on the host."""
    from _socket import EAI_NONAME, gaierror

    class NameResolutionDeniedError(NetworkDeniedError, gaierror):
        """A host name no network rule covers: refused before any query. Also the
        ``socket.gaierror`` (``EAI_NONAME``) the resolver raises for a name that does not
        resolve -- what code asking for a name handles (smtplib, ``socket.getfqdn``
        users, HTTP clients) -- and still a :class:`NetworkDeniedError`."""

        default_errno = EAI_NONAME

    NameResolutionDeniedError.__module__ = __name__
    NameResolutionDeniedError.__qualname__ = "NameResolutionDeniedError"
    return NameResolutionDeniedError


class ApiDeniedError(DeniedError, PermissionError):
    """A call of a sensitive function the ``api`` rules do not allow."""

    guard = "api"
    default_errno = 13  # EACCES

    def __init__(
        self, message: str, *, qualname: str = "", category: str = "", suggested_rule: str = ""
    ) -> None:
        super().__init__(message, target=qualname, suggested_rule=suggested_rule)
        self.qualname = qualname
        self.category = category


def sandbox_denials(exc: BaseException | None) -> list[str]:
    """Return the denials behind ``exc`` as ``"ExceptionName: message"``, innermost first.

    Follows ``__cause__`` and ``__context__`` (and exception groups) so that a denial a
    library wrapped in its own exception is still found.
    """
    found: list[str] = []
    seen: set[int] = set()

    def walk(e: BaseException | None) -> None:
        while e is not None and id(e) not in seen:
            seen.add(id(e))
            for sub in getattr(e, "exceptions", ()) or ():
                if isinstance(sub, BaseException):
                    walk(sub)
            inner = e.__cause__ if e.__cause__ is not None else e.__context__
            walk(inner)
            if isinstance(e, DeniedError):
                found.append(f"{type(e).__name__}: {e}")
            return

    walk(exc)
    return found


class UntrustedProfileError(SandboxError):
    """A discovered profile (found, not named) that the user has not trusted as it is now
    (``pysb trust``): a program an earlier run let write its directory may have planted
    or rewritten it. The run must not start (exit 125)."""


if TYPE_CHECKING:  # made on first use at run time (module __getattr__ above)
    from socket import gaierror

    class NameResolutionDeniedError(NetworkDeniedError, gaierror): ...
