"""The child-side contract of a guard family: two functions the bootstrap calls inside the
sandbox. They are not pluggy hooks (the sandboxed interpreter does not load pluggy).

The host sends the sandbox the module to import for each guard family: the module its
``pysb.guards`` entry point names, or the module that one names in
``PYSB_CHILD_MODULE = "pkg.module"`` (so the host, which needs only the family's host
hooks, never imports the guard itself). The bootstrap imports it, then calls, for every
family in entry-point order:

1. :func:`pysb_child_install` -- before the program, before the API guard is armed;
2. the providers' child set-ups (``ChildSetup``; Landlock restricts the process here);
3. :func:`pysb_child_arm` -- last, right before the program's first line.

Each is called with the keyword arguments it names, like a pluggy hook: an implementation
may name ``policy``, ``recorder``, both, or neither (or take ``**kwargs``). A function
that names another argument fails closed: the host refuses the plugin when it can see the
function (exit 125, naming the distribution), the bootstrap otherwise. Either function may
be absent. A family that defines neither has nothing to arm: it counts as not installed.

An exception raised by either stops the sandbox before the program runs (exit 125).
Both return what they put in force: the family's name (or names), None for nothing. A
profile whose rules rely on the Python layer for a family that no guard armed, or that
two guards armed, does not run (exit 125): guards are trusted by what they arm, not by
their entry point's name.

The functions below are the specification (their docstrings are rendered in
docs/plugin-hooks.md); :func:`problems` and :func:`call` are what the host and the
bootstrap use.
"""

from __future__ import annotations

TYPE_CHECKING = False  # imported in the sandbox by the bootstrap: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from pysb_core.events import Recorder
    from pysb_core.policy import Policy

__all__ = ["ARGUMENTS", "NAMES", "call", "problems"]

#: The names of the child-side functions.
NAMES = ("pysb_child_install", "pysb_child_arm")
#: The arguments the bootstrap offers them.
ARGUMENTS = ("policy", "recorder")

_CO_VARKEYWORDS = 0x08


def pysb_child_install(policy: Policy, recorder: Recorder) -> str | Sequence[str] | None:
    """Patch what this family guards, inside the sandboxed interpreter, before the program.

    :param policy: the policy as the sandbox sees it (paths of renamed exposures as seen
        inside).
    :param recorder: where denials and learned accesses go: ``recorder.deny(guard,
        target, detail="", suggested_rule="")`` reports a refusal,
        ``recorder.learn(guard, target, detail="", suggested_rule="", **data)`` an access
        in a learning run (``recorder.learning`` tells which run this is; a learning
        guard records and lets the access proceed). The family's ``pysb_learned`` turns
        the learned records into rules.
    :return: the guard family (or families) this call put in force, None for none.

    .. versionadded:: 0.1
    """


def pysb_child_arm(policy: Policy, recorder: Recorder) -> str | Sequence[str] | None:
    """Arm what must not see the framework's own start-up (the API guard), right before
    the program's first line.

    :param policy: as for :func:`pysb_child_install`.
    :param recorder: as for :func:`pysb_child_install`.
    :return: the guard family (or families) put in force, None for none.

    .. versionadded:: 0.1
    """


def _wanted(fn: Callable[..., Any]) -> tuple[str, ...] | None:
    """The argument names ``fn`` takes by keyword, or None when it takes ``**kwargs`` (or
    is not a plain function or method: it gets every argument)."""
    func = getattr(fn, "__func__", fn)
    code = getattr(func, "__code__", None)
    if code is None or code.co_flags & _CO_VARKEYWORDS:
        return None
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    if func is not fn and names:  # a bound method: its first argument is bound
        names = names[1:]
    return tuple(names)


def problems(plugin: object) -> list[str]:
    """Why the child-side functions ``plugin`` defines cannot be called, one message each."""
    out = []
    for name in NAMES:
        fn = getattr(plugin, name, None)
        if fn is None:
            continue
        if not callable(fn):
            out.append(f"{name} is not a function")
            continue
        wanted = _wanted(fn)
        extra = [a for a in wanted or () if a not in ARGUMENTS]
        if extra:
            out.append(
                f"{name} takes {', '.join(extra)}, which pysb does not give "
                f"(it gives {', '.join(ARGUMENTS)})"
            )
    return out


def call(fn: Callable[..., Any], policy: Policy, recorder: Recorder) -> Any:
    """Call a child-side function with the arguments it names (all for ``**kwargs``)."""
    offered = {"policy": policy, "recorder": recorder}
    wanted = _wanted(fn)
    if wanted is None:
        return fn(**offered)
    return fn(**{name: offered[name] for name in wanted if name in offered})


def pluggy_manager(project: str) -> Any:
    """A ``pluggy.PluginManager`` that leaves the child-side functions alone: a plugin
    whose module holds them (marked with ``@hookimpl`` or not) registers on the host
    without pluggy taking them for hooks of its own."""
    import pluggy

    class PluginManager(pluggy.PluginManager):
        def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
            if name in NAMES:
                return None
            return super().parse_hookimpl_opts(plugin, name)

    return PluginManager(project)
