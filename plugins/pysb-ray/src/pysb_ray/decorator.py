"""``@pysb_ray.sandboxed``: a partial-mode ``@sandbox`` function that is also a Ray task.

The decorator returns pysb's own ``@sandbox`` wrapper, so the module attribute stays the
object pysb finds the function by (``module:qualname``), and gives it ``.remote()`` and
``.options()``. Called directly it is a local partial-mode call (inside ``sandboxes()``);
``.remote()`` runs it on the cluster. Inside the sandbox the decorator costs nothing and
imports no Ray: the sandboxed worker imports the function's module too.
"""

import sys

from pysb_core import SandboxError, sandbox

TYPE_CHECKING = False  # no typing import inside the sandbox (its import guard judges it)
if TYPE_CHECKING:
    import os
    from typing import Any


def _note_pysb_ray() -> None:
    """Never called: decorating it makes ``pysb_ray`` one of partial mode's program modules.

    Partial mode lets the sandboxed worker import, without an ``imports`` line, the
    top-level packages of the modules that define sandboxed functions (and ``pysb_core``).
    The user's modules import ``pysb_ray`` to decorate their functions, so it must be one
    of them -- in a Ray worker and in a local ``with sandboxes()`` alike.
    """


sandbox(_note_pysb_ray)

#: Ray's own retries would run a call again after a worker died: never (SPEC §5).
RAY_DEFAULTS: "dict[str, Any]" = {"max_retries": 0, "retry_exceptions": False}


class SandboxedFunction:
    """The Ray side of one ``@sandboxed`` function (``fn.remote`` / ``fn.options``)."""

    def __init__(
        self,
        wrapper: "Any",
        profile: "str | os.PathLike[str] | None",
        provider: str | None,
        ray_options: "dict[str, Any]",
    ) -> None:
        self.wrapper = wrapper
        self.profile = profile
        self.provider = provider
        self.ray_options = ray_options
        self._remote_function: Any = None

    def remote(self, *args: "Any", **kwargs: "Any") -> "Any":
        """Submit one call; returns Ray's ``ObjectRef``. The profile is checked here."""
        from pysb_ray.spec import load_spec

        check_importable(self.wrapper)
        module = sys.modules.get(self.wrapper.__module__)
        spec = load_spec(self.profile, self.provider, near=getattr(module, "__file__", None))
        if self._remote_function is None:
            from pysb_ray.task import remote_function

            self._remote_function = remote_function(self.ray_options)
        return self._remote_function.remote(spec, self.wrapper, args, kwargs)

    def options(self, **ray_options: "Any") -> "SandboxedFunction":
        """The same function with other Ray options (``num_cpus``, ``resources``, ...)."""
        return SandboxedFunction(
            self.wrapper, self.profile, self.provider, {**self.ray_options, **ray_options}
        )


def check_importable(wrapper: "Any") -> None:
    """Refuse on the driver what no node could find by module and name."""
    fn = getattr(wrapper, "__pysb_wrapped__", wrapper)
    module = getattr(fn, "__module__", None) or ""
    qualname = getattr(fn, "__qualname__", "") or ""
    if module == "__main__":
        where = getattr(sys.modules.get("__main__"), "__file__", None) or "the __main__ module"
        raise SandboxError(
            f"{qualname}() is defined in {where}, which runs as __main__: Ray workers and "
            "the sandbox find a function by module and name. Move it into a module that "
            "every node can import (for example tools.py next to the script)"
        )
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise SandboxError(
            f"{module}.{qualname} is not defined at the top level of its module, so no node "
            "can find it by name. Define sandboxed functions at the top level of a module"
        )
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not wrapper:
        raise SandboxError(
            f"{module}.{qualname} does not name this sandboxed function (it was replaced or "
            "created at run time), so a node would run something else. Decorate it once, "
            "at the top level of a module"
        )


def sandboxed(
    fn: "Any" = None,
    /,
    *,
    profile: "str | os.PathLike[str] | None" = None,
    provider: str | None = None,
    timeout: float | None = None,
    num_cpus: float | None = None,
    retry_on_crash: bool = False,
    **ray_options: "Any",
) -> "Any":
    """Make ``fn`` a sandboxed function that Ray can run anywhere: ``fn.remote(...)``.

    ``profile`` (a path on the driver; its content travels with each task), ``provider``
    (overrides the profile's), ``timeout`` and ``retry_on_crash`` (as ``@pysb_core.sandbox``),
    ``num_cpus`` and any other keyword (Ray's task options, e.g. ``resources``).
    """
    if fn is None:

        def decorate(function: "Any") -> "Any":
            return sandboxed(
                function,
                profile=profile,
                provider=provider,
                timeout=timeout,
                num_cpus=num_cpus,
                retry_on_crash=retry_on_crash,
                **ray_options,
            )

        return decorate
    wrapper = sandbox(fn, timeout=timeout, retry_on_crash=retry_on_crash)
    options = {**RAY_DEFAULTS, **ray_options}
    if num_cpus is not None:
        options["num_cpus"] = num_cpus
    ray_side = SandboxedFunction(wrapper, profile, provider, options)
    wrapper.remote = ray_side.remote
    wrapper.options = ray_side.options
    wrapper.__pysb_ray__ = ray_side
    return wrapper
