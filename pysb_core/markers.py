"""The marker plugins use: ``@pysb_core.hookimpl``.

It sets exactly the attribute pluggy's ``HookimplMarker("pysb")`` sets (``pysb_impl``
holding the hook-implementation options), so pluggy registers marked functions as usual.
It does not import pluggy: guard modules are imported inside the sandboxed interpreter,
whose start-up must stay cheap, and pluggy (with ``inspect``) costs about 5 ms there. A
test checks the equivalence against pluggy's own marker.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable
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

    def __call__(  # type: ignore[misc]
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
