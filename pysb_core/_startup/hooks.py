"""pysb's hooks called without importing pluggy, on the ``pysb run`` path.

pluggy (with ``inspect``, ``ast``, ``dis``, ``tokenize`` and ``typing``) costs about 6 ms
to import, a fifth of what ``pysb run`` may spend before the sandbox starts, while a run
only needs pluggy's plain 1:N calls. :class:`LightPluginManager` has the part of
``pluggy.PluginManager`` that :func:`pysb_core.launch.plugins.get_plugin_manager` and
:class:`pysb_core.launch.plugins.Hooks` use, with pluggy's semantics, for plugins that need
nothing more:

- modules (``ModuleType`` itself) and instances of ordinary classes;
- hook implementations that are functions defined in the module or class, marked with
  ``@pysb_core.hookimpl`` (or pluggy's marker for ``pysb``) with at most ``tryfirst`` /
  ``trylast``;
- for hooks of :mod:`pysb_core.hookspecs`, with arguments the spec declares.

Order (``tryfirst``, ``trylast``, last registered first), ``firstresult``, keyword
defaults and the ``self`` rules of argument names are pluggy's
(``tests/test_startup_hooks.py`` runs the same plugins through both and compares).

Anything else -- a wrapper or hookwrapper, ``specname``, ``optionalhook``, an unknown hook
name, an argument the spec lacks, a static or class method, a custom ``__dir__``, a class
as a plugin, a name or plugin registered twice, ``PYSB_DEBUG_PLUGINS`` -- and the manager
hands over to a real ``pluggy.PluginManager``: every plugin is registered again, in order,
and pluggy does exactly what it always does from then on, errors included. Historic hooks
are not implemented: pysb has none (every plugin is registered before the first call).

``pysb_child_install`` / ``pysb_child_arm`` in a plugin are left alone, by this manager
and by the pluggy one it hands over to: the bootstrap calls them in the sandbox
(:mod:`pysb_core.childhooks`).
"""

from __future__ import annotations

from pysb_core import hookspecs
from pysb_core.childhooks import NAMES as _CHILD_SIDE

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from typing import Any


# ``types``' names, without the module (~0.2 ms of every start): what each is the type of.
class _Slotted:
    __slots__ = ("slot",)

    def method(self) -> None:
        """A bound method's type (``types.MethodType``)."""


_FunctionType = type(_Slotted.method)
_ModuleType = type(hookspecs)
_MemberDescriptorType = type(_Slotted.slot)
#: Holders pluggy accepts besides plain functions: handed over to pluggy when marked.
_OTHER_HOLDERS = (type(_Slotted().method), staticmethod, classmethod)
_IMPLICIT_NAMES = ("self", "cls")
#: Options whose presence (truthy) needs pluggy itself.
_PLUGGY_ONLY = ("wrapper", "hookwrapper", "optionalhook", "specname")


class NeedsPluggy(Exception):
    """A plugin uses more of pluggy than this module implements."""


class _Spec:
    __slots__ = ("argnames", "firstresult", "kwargnames")

    def __init__(self, argnames: tuple[str, ...], firstresult: bool) -> None:
        self.argnames = argnames
        self.kwargnames: tuple[str, ...] = ()
        self.firstresult = firstresult


def _specs() -> dict[str, _Spec]:
    """The hooks of :mod:`pysb_core.hookspecs` (positional arguments, no defaults)."""
    out: dict[str, _Spec] = {}
    for name, fn in vars(hookspecs).items():
        if type(fn) is not _FunctionType:
            continue
        opts = fn.__dict__.get(hookspecs.PROJECT + "_spec")
        if not isinstance(opts, dict):
            continue
        if fn.__defaults__ or opts.get("warn_on_impl") or opts.get("warn_on_impl_args"):
            raise NeedsPluggy(f"hookspec {name} uses options pluggy alone implements")
        if opts.get("historic"):  # a developer's error: caught by tests/test_startup_hooks.py
            raise NeedsPluggy(f"hookspec {name} is historic, which this module does not do")
        code = fn.__code__
        out[name] = _Spec(
            code.co_varnames[: code.co_argcount],
            bool(opts.get("firstresult")),
        )
    return out


def _marker(holder: object, attr: str) -> object:
    """pluggy's reading of marker options: on the holder, else on its ``__func__``."""
    opts = getattr(holder, attr, None)
    if opts is None:
        func = getattr(holder, "__func__", None)
        if func is not None:
            opts = getattr(func, attr, None)
    return opts


def _varnames(func: Any, bound: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """pluggy's ``varnames`` for a plain function (bound or not): positional names
    without defaults, and those with defaults."""
    if "__wrapped__" in func.__dict__:
        raise NeedsPluggy("decorated hook implementation")  # pluggy unwraps it
    code = func.__code__
    args = code.co_varnames[: code.co_argcount]
    defaults = func.__defaults__
    kwargs: tuple[str, ...] = ()
    if defaults:
        index = -len(defaults)
        args, kwargs = args[:index], args[index:]
    tail = func.__qualname__.rsplit("<locals>.", maxsplit=1)[-1]
    if args and (bound or ("." in tail and args[0] in _IMPLICIT_NAMES)):
        args = args[1:]
    return args, kwargs


class HookImpl:
    """One implementation (the attributes of pluggy's ``HookImpl`` that callers read)."""

    __slots__ = (
        "argnames",
        "function",
        "kwargnames",
        "plugin",
        "plugin_name",
        "tryfirst",
        "trylast",
    )

    def __init__(
        self,
        plugin: object,
        plugin_name: str,
        function: Callable[..., Any],
        opts: dict,
        bound: bool,
    ) -> None:
        self.plugin = plugin
        self.plugin_name = plugin_name
        self.function = function
        self.argnames, self.kwargnames = _varnames(
            function.__func__ if bound else function,  # type: ignore[attr-defined]
            bound,
        )
        self.tryfirst = bool(opts.get("tryfirst"))
        self.trylast = bool(opts.get("trylast"))

    def __repr__(self) -> str:
        return f"<HookImpl plugin_name={self.plugin_name!r}, plugin={self.plugin!r}>"


def _call(impls: list[HookImpl], kwargs: Mapping[str, object], firstresult: bool) -> Any:
    """pluggy's ``_multicall`` without wrappers: last registered first, stop at the first
    result of a ``firstresult`` hook; an exception propagates as it is."""
    results: list[object] = []
    for impl in reversed(impls):
        try:
            args = [kwargs[name] for name in impl.argnames]
        except KeyError as exc:
            from pluggy import HookCallError  # only on a caller's mistake

            raise HookCallError(f"hook call must provide argument {exc.args[0]!r}") from exc
        if impl.kwargnames:
            kw = {name: kwargs[name] for name in impl.kwargnames if name in kwargs}
            res = impl.function(*args, **kw)
        else:
            res = impl.function(*args)
        if res is not None:
            results.append(res)
            if firstresult:
                break
    if firstresult:
        return results[0] if results else None
    return results


class HookCaller:
    """One hook: ``hook(**kwargs)`` and ``get_hookimpls`` as in pluggy."""

    __slots__ = ("_impls", "name", "spec")

    def __init__(self, name: str, spec: _Spec) -> None:
        self.name = name
        self.spec = spec
        self._impls: list[HookImpl] = []

    def __repr__(self) -> str:
        return f"<HookCaller {self.name!r}>"

    def is_historic(self) -> bool:
        return False

    def get_hookimpls(self) -> list[HookImpl]:
        return self._impls.copy()

    def _add(self, impl: HookImpl) -> None:
        """pluggy's ``_add_hookimpl`` for non-wrappers."""
        impls = self._impls
        if impl.trylast:
            impls.insert(0, impl)
        elif impl.tryfirst:
            impls.append(impl)
        else:
            i = len(impls) - 1
            while i >= 0 and impls[i].tryfirst:
                i -= 1
            impls.insert(i + 1, impl)

    def _check_args(self, kwargs: Mapping[str, object]) -> None:
        missing = [repr(name) for name in self.spec.argnames if name not in kwargs]
        if missing:
            import warnings  # only on a caller's mistake

            warnings.warn(
                f"Argument(s) {', '.join(missing)} which are declared in the hookspec "
                "cannot be found in this hook call",
                stacklevel=3,
            )

    def __call__(self, **kwargs: object) -> Any:
        self._check_args(kwargs)
        return _call(self._impls.copy(), kwargs, self.spec.firstresult)


class HookRelay:
    """``pm.hook``: one :class:`HookCaller` attribute per hook."""


def _plugin_impls(plugin: object) -> Iterator[tuple[str, Any, dict, bool]]:
    """``(hook name, function, options, bound)`` of every marked implementation, found as
    pluggy finds them (static lookup: no property or ``__getattr__`` is run); raise
    :class:`NeedsPluggy` for any form this module does not implement."""
    attr = hookspecs.PROJECT + "_impl"
    if type(plugin) is _ModuleType:
        namespace = plugin.__dict__
        if "__dir__" in namespace:
            raise NeedsPluggy("module with __dir__")
        for name, value in list(namespace.items()):
            if type(value) is _FunctionType:
                opts = value.__dict__.get(attr)
                if isinstance(opts, dict):
                    yield name, value, opts, False
            elif isinstance(value, _OTHER_HOLDERS) and _marker(value, attr) is not None:
                raise NeedsPluggy(f"{name}: not a plain function")
        return
    cls = type(plugin)
    if isinstance(plugin, (type, _ModuleType)) or cls.__dir__ is not object.__dir__:
        raise NeedsPluggy("a class, a module subclass or a custom __dir__")
    try:
        own = object.__getattribute__(plugin, "__dict__")
    except AttributeError:
        own = {}
    if not isinstance(own, dict):
        raise NeedsPluggy("instance __dict__ is not a dict")
    for name, value in own.items():
        if isinstance(value, (_FunctionType, *_OTHER_HOLDERS)) and _marker(value, attr):
            raise NeedsPluggy(f"{name}: implementation stored on the instance")
    seen = set(own)
    for klass in cls.__mro__:
        for name, value in list(vars(klass).items()):
            if name in seen:
                continue
            seen.add(name)
            if type(value) is _MemberDescriptorType:  # a slot: pluggy reads its value
                try:
                    value = value.__get__(plugin, cls)
                except AttributeError:
                    continue
                if isinstance(value, (_FunctionType, *_OTHER_HOLDERS)) and _marker(value, attr):
                    raise NeedsPluggy(f"{name}: implementation stored in a slot")
                continue
            if type(value) is _FunctionType:
                opts = value.__dict__.get(attr)
                if isinstance(opts, dict):
                    yield name, value.__get__(plugin, cls), opts, True
            elif isinstance(value, _OTHER_HOLDERS) and _marker(value, attr) is not None:
                raise NeedsPluggy(f"{name}: not a plain method")


class LightPluginManager:
    """The subset of ``pluggy.PluginManager`` pysb's run path uses (see the module doc).

    After a handover, every method delegates to the real manager (``self.pluggy``).
    """

    def __init__(self, project_name: str = hookspecs.PROJECT) -> None:
        if project_name != hookspecs.PROJECT:
            raise ValueError(f"only {hookspecs.PROJECT!r} hooks are implemented here")
        self.project_name = project_name
        self.pluggy: Any = None
        self._name2plugin: dict[str, object] = {}
        self._specs = _specs()
        self._relay = HookRelay()
        for name, spec in self._specs.items():
            setattr(self._relay, name, HookCaller(name, spec))

    # -- pluggy's surface --------------------------------------------------------------

    @property
    def hook(self) -> Any:
        return self.pluggy.hook if self.pluggy is not None else self._relay

    def add_hookspecs(self, module_or_class: object) -> None:
        if self.pluggy is not None:
            self.pluggy.add_hookspecs(module_or_class)
        elif module_or_class is not hookspecs:
            self.use_pluggy()
            self.pluggy.add_hookspecs(module_or_class)

    def register(self, plugin: object, name: str | None = None) -> str | None:
        if self.pluggy is not None:
            return self.pluggy.register(plugin, name=name)  # type: ignore[no-any-return]
        if plugin is None:
            return None
        plugin_name = name or self.get_canonical_name(plugin)
        try:
            if plugin_name in self._name2plugin or self.is_registered(plugin):
                raise NeedsPluggy("registered twice")  # pluggy says how
            impls = []
            for hook_name, function, opts, bound in _plugin_impls(plugin):
                if hook_name in _CHILD_SIDE:
                    continue  # called by the bootstrap in the sandbox, not a host hook
                if any(opts.get(k) for k in _PLUGGY_ONLY):
                    raise NeedsPluggy(f"{hook_name}: {opts}")
                caller = getattr(self._relay, hook_name, None)
                if caller is None:
                    raise NeedsPluggy(f"unknown hook {hook_name}")  # pluggy checks it
                impl = HookImpl(plugin, plugin_name, function, opts, bound)
                spec = caller.spec
                if not set(impl.argnames) <= {*spec.argnames, *spec.kwargnames}:
                    raise NeedsPluggy(f"{hook_name}: arguments the spec lacks")
                impls.append((caller, impl))
        except NeedsPluggy:
            self.use_pluggy()
            return self.pluggy.register(plugin, name=name)  # type: ignore[no-any-return]
        self._name2plugin[plugin_name] = plugin
        for caller, impl in impls:
            caller._add(impl)
        return plugin_name

    def get_canonical_name(self, plugin: object) -> str:
        return getattr(plugin, "__name__", None) or str(id(plugin))

    def is_registered(self, plugin: object) -> bool:
        if self.pluggy is not None:
            return bool(self.pluggy.is_registered(plugin))
        return plugin in self._name2plugin.values()

    def get_plugin(self, name: str) -> Any:
        if self.pluggy is not None:
            return self.pluggy.get_plugin(name)
        return self._name2plugin.get(name)

    def list_name_plugin(self) -> list[tuple[str, object]]:
        if self.pluggy is not None:
            return self.pluggy.list_name_plugin()  # type: ignore[no-any-return]
        return list(self._name2plugin.items())

    def check_pending(self) -> None:
        if self.pluggy is not None:
            self.pluggy.check_pending()
        # Here every implementation was checked against its spec when registered.

    # -- the handover ------------------------------------------------------------------

    def use_pluggy(self) -> None:
        """Hand over to a real ``pluggy.PluginManager`` (every plugin registered again)."""
        if self.pluggy is not None:
            return
        from pysb_core.childhooks import pluggy_manager

        pm = pluggy_manager(self.project_name)
        pm.add_hookspecs(hookspecs)
        for name, plugin in self._name2plugin.items():
            pm.register(plugin, name=name)
        self.pluggy = pm
