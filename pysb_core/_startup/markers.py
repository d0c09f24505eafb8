"""The markers of pysb's hooks: ``@pysb_core.hookimpl`` for plugins, ``hookspec`` for
:mod:`pysb_core.hookspecs`.

They set exactly the attributes pluggy's ``HookimplMarker("pysb")`` and
``HookspecMarker("pysb")`` set (``pysb_impl`` / ``pysb_spec``, holding the options), so
pluggy registers marked functions as usual. They do not import pluggy: guard modules are
imported inside the sandboxed interpreter, and ``pysb run`` calls its hooks without pluggy
when it can (:mod:`pysb_core._startup.hooks`); pluggy (with ``inspect``) costs about 5 ms to
import. Tests check the equivalence against pluggy's own markers.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeVar, overload

    F = TypeVar("F", bound=Callable[..., Any])

PROJECT = "pysb"


class HookimplMarker:
    """Mark a function as a pysb hook implementation (same options as pluggy's marker)."""

    def __init__(self, project_name: str) -> None:
        self.project_name = project_name

    if TYPE_CHECKING:

        @overload
        def __call__(self, function: F) -> F: ...

        @overload
        def __call__(
            self,
            function: None = None,
            *,
            hookwrapper: bool = False,
            optionalhook: bool = False,
            tryfirst: bool = False,
            trylast: bool = False,
            specname: str | None = None,
            wrapper: bool = False,
        ) -> Callable[[F], F]: ...

    def __call__(
        self,
        function: F | None = None,
        *,
        hookwrapper: bool = False,
        optionalhook: bool = False,
        tryfirst: bool = False,
        trylast: bool = False,
        specname: str | None = None,
        wrapper: bool = False,
    ) -> F | Callable[[F], F]:
        opts = {
            "wrapper": wrapper,
            "hookwrapper": hookwrapper,
            "optionalhook": optionalhook,
            "tryfirst": tryfirst,
            "trylast": trylast,
            "specname": specname,
        }

        def mark(func: F) -> F:
            setattr(func, self.project_name + "_impl", opts)
            return func

        return mark(function) if function is not None else mark


hookimpl = HookimplMarker(PROJECT)


class HookspecMarker:
    """Mark a function as a pysb hook specification (same options as pluggy's marker)."""

    def __init__(self, project_name: str) -> None:
        self.project_name = project_name

    if TYPE_CHECKING:

        @overload
        def __call__(self, function: F) -> F: ...

        @overload
        def __call__(
            self,
            function: None = None,
            firstresult: bool = False,
            historic: bool = False,
            warn_on_impl: Warning | None = None,
            warn_on_impl_args: Mapping[str, Warning] | None = None,
        ) -> Callable[[F], F]: ...

    def __call__(
        self,
        function: F | None = None,
        firstresult: bool = False,
        historic: bool = False,
        warn_on_impl: Warning | None = None,
        warn_on_impl_args: Mapping[str, Warning] | None = None,
    ) -> F | Callable[[F], F]:
        def mark(func: F) -> F:
            if historic and firstresult:
                raise ValueError("cannot have a historic firstresult hook")
            opts = {
                "firstresult": firstresult,
                "historic": historic,
                "warn_on_impl": warn_on_impl,
                "warn_on_impl_args": warn_on_impl_args,
            }
            setattr(func, self.project_name + "_spec", opts)
            return func

        return mark(function) if function is not None else mark


hookspec = HookspecMarker(PROJECT)
