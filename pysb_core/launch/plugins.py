"""The plugin manager factory and the typed facade the pipeline calls.

``get_plugin_manager()`` builds a fresh manager (no import-time singleton): hookspecs,
the built-in plugins, then the ``pysb.guards`` and ``pysb.plugins`` entry points. A guard
that fails to import aborts the run (fail closed): the error names the distribution.
Raw ``pm.hook.*`` calls live in :class:`Hooks` only.
"""

from __future__ import annotations

import os

from pysb_core import hookspecs
from pysb_core._lazy import import_module
from pysb_core._startup.entrypoints import EntryPoint
from pysb_core._startup.records import Record, record
from pysb_core.errors import SandboxError
from pysb_core.launch.entrycache import entry_points

TYPE_CHECKING = False  # imported by every `pysb run`: no typing (nor pluggy) at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any

    import pluggy

    from pysb_core._startup.hooks import LightPluginManager
    from pysb_core.check import CheckReport
    from pysb_core.events import Event
    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import Policy
    from pysb_core.policy.hostservice import HostService
    from pysb_core.profile.learning import LearnedProfile
    from pysb_core.profile.schema import ProfileSchema
    from pysb_core.provider import Provider

GUARDS_GROUP = "pysb.guards"
PLUGINS_GROUP = "pysb.plugins"
PROVIDERS_GROUP = "pysb.providers"

#: Built-in plugins, registered through the same hooks as third-party ones.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "pysb_core.builtin.dns",
    "pysb_core.builtin.launch",
    "pysb_core.builtin.oslayer",
)


class PluginLoadError(SandboxError):
    """A guard, plugin or provider could not be loaded, or failed: the run must not start.

    The message is one paragraph naming the distribution and version to blame; the
    original exception is the ``__cause__`` (``--debug`` prints its traceback).
    """


def _label(p: LoadedPlugin) -> str:
    version = f" {p.version}" if p.version else ""
    return f"{p.kind} '{p.name}' ({p.distribution}{version})"


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (pluggy's messages span several)."""
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text}"


def _top(module: str) -> str:
    return module.partition(":")[0].strip().partition(".")[0]


def plugin_failure(
    exc: BaseException,
    plugins: Sequence[LoadedPlugin],
    provider: tuple[str, str, str, str] | None = None,
    *,
    doing: str = "",
) -> PluginLoadError:
    """The error for an exception raised by plugin code, naming who raised it.

    The innermost traceback frame that belongs to a plugin's (or the provider's) package
    decides; ``provider`` is ``(name, module, distribution, version)``. Code of
    pysb-core's own built-in plugins is an internal error of pysb.
    """
    owners: dict[str, str] = {}
    for p in plugins:
        if p.kind != "builtin":
            owners.setdefault(_top(p.module), _label(p))
    if provider is not None:
        name, module, dist, version = provider
        if _top(module) != "pysb_core":
            owners[_top(module)] = f"provider '{name}' ({dist} {version})"
    culprit = None
    tb = exc.__traceback__
    while tb is not None:
        top = _top(str(tb.tb_frame.f_globals.get("__name__", "")))
        culprit = owners.get(top, culprit)
        tb = tb.tb_next
    what = _one_line(exc)
    during = f" {doing}" if doing else ""
    if culprit is None:
        return PluginLoadError(
            f"internal error{during}: {what} (a bug in pysb: run with --debug for the "
            "traceback and report it)"
        )
    return PluginLoadError(
        f"{culprit} failed{during}: {what}\n  fix: report it to that distribution's "
        "maintainers, or uninstall it; --debug shows the traceback"
    )


@record
class LoadedPlugin(Record):
    """A plugin the manager holds, with where it came from (for ``pysb plugins``)."""

    name: str
    kind: str  # "guard" | "plugin" | "provider" | "builtin"
    module: str
    distribution: str
    version: str


def _entry_points(group: str) -> list[EntryPoint]:
    return sorted(entry_points(group=group), key=lambda ep: ep.name)


def get_plugin_manager(
    *,
    guards: bool = True,
    autoload: bool = True,
    extra_plugins: Iterable[Any] = (),
    light: bool = False,
) -> tuple[pluggy.PluginManager | LightPluginManager, list[LoadedPlugin]]:
    """Build a fresh plugin manager.

    :param guards: load the ``pysb.guards`` entry points (false under
        ``--no-python-guards``: the families' parent-side hooks still matter for
        ``pysb check``, so callers normally keep this true and skip the child side).
    :param autoload: load ``pysb.plugins`` entry points.
    :param extra_plugins: plugin objects registered last (tests).
    :param light: return a :class:`~pysb_core._startup.hooks.LightPluginManager`, which calls
        the hooks without importing pluggy and hands over to pluggy itself as soon as a
        plugin needs more (the ``pysb run`` path); else a ``pluggy.PluginManager``.
    """
    pm: Any
    debug = bool(os.environ.get("PYSB_DEBUG_PLUGINS"))
    if light and not debug:
        from pysb_core._startup.hooks import LightPluginManager

        pm = LightPluginManager(hookspecs.PROJECT)
    else:
        from pysb_core.childhooks import pluggy_manager

        pm = pluggy_manager(hookspecs.PROJECT)
        pm.add_hookspecs(hookspecs)
        if debug:
            pm.trace.root.setwriter(lambda msg: os.write(2, msg.encode()))
            pm.enable_tracing()
    loaded: list[LoadedPlugin] = []
    for modname in BUILTIN_PLUGINS:
        pm.register(import_module(modname), name=modname)
        loaded.append(LoadedPlugin(modname.rsplit(".", 1)[1], "builtin", modname, "pysb-core", ""))
    groups = ([(GUARDS_GROUP, "guard")] if guards else []) + (
        [(PLUGINS_GROUP, "plugin")] if autoload else []
    )
    by_object: dict[int, LoadedPlugin] = {}
    for group, kind in groups:
        eps = _entry_points(group)
        _refuse_shared_names(eps, kind)
        for ep in eps:
            dist, version = ep.dist_name, ep.dist_version
            entry = LoadedPlugin(ep.name, kind, ep.value, dist, version)
            try:
                plugin = ep.load()
            except Exception as exc:  # fail closed: a guard that does not load stops the run
                raise PluginLoadError(
                    f"{kind} '{ep.name}' from {dist} {version} failed to load: "
                    f"{_one_line(exc)}\n  fix: reinstall it "
                    f"(pip install --force-reinstall "
                    f"{dist}) or uninstall it (pip uninstall {dist})"
                ) from exc
            _refuse_other_kit(plugin, entry)
            _refuse_uncallable_child_hooks(plugin, entry)
            if pm.is_registered(plugin):
                continue
            try:
                pm.register(plugin, name=f"{kind}:{ep.name}")
            except Exception as exc:  # pluggy's validation: a hook pysb does not have, ...
                raise PluginLoadError(
                    f"{_label(entry)} is not a valid pysb plugin: {_one_line(exc)}"
                    f"\n  fix: upgrade or uninstall it (pip uninstall {dist})"
                ) from exc
            by_object[id(plugin)] = entry
            loaded.append(entry)
    for plugin in extra_plugins:
        pm.register(plugin)
    try:
        pm.check_pending()
    except Exception as exc:  # an implementation of a hook that does not exist
        entry = by_object.get(id(getattr(exc, "plugin", None)))
        who = _label(entry) if entry else "a plugin"
        raise PluginLoadError(
            f"{who} implements a hook pysb does not have: {_one_line(exc)}"
            + (
                f"\n  fix: upgrade or uninstall it (pip uninstall {entry.distribution})"
                if entry
                else ""
            )
        ) from exc
    return pm, loaded


def _refuse_other_kit(plugin: object, entry: LoadedPlugin) -> None:
    """Refuse a guard written for a guard kit this pysb does not offer: ``PYSB_GUARDKIT``
    in the module the entry point names (or that defines the plugin object)."""
    import sys

    from pysb_core import guardkit, kitversion

    module = (
        plugin
        if isinstance(plugin, type(sys))  # a module
        else sys.modules.get(getattr(plugin, "__module__", "") or "")
    )
    why = kitversion.refusal(module, guardkit.DECLARATION, guardkit.KIT_VERSION, _label(entry))
    if why is not None:
        raise PluginLoadError(
            f"{why}\n  fix: pip install --upgrade {entry.distribution}, or uninstall it "
            f"(pip uninstall {entry.distribution})"
        )


def _refuse_uncallable_child_hooks(plugin: object, entry: LoadedPlugin) -> None:
    """A ``pysb_child_install`` / ``pysb_child_arm`` asking for an argument the bootstrap
    does not give would fail inside the sandbox: say so now, naming the distribution."""
    from pysb_core import childhooks

    found = childhooks.problems(plugin)
    if found:
        raise PluginLoadError(
            f"{_label(entry)} is not a valid pysb plugin: {'; '.join(found)}"
            f"\n  fix: upgrade or uninstall it (pip uninstall {entry.distribution})"
        )


def _refuse_shared_names(eps: Sequence[EntryPoint], kind: str) -> None:
    """Two distributions registering one name: pysb will not pick one (both named)."""
    seen: dict[str, EntryPoint] = {}
    for ep in eps:
        first = seen.setdefault(ep.name, ep)
        if first is not ep and first.dist_name != ep.dist_name:
            raise PluginLoadError(
                f"{kind} '{ep.name}' is registered by two distributions: "
                f"{first.dist_name} {first.dist_version} ({first.value}) and "
                f"{ep.dist_name} {ep.dist_version} ({ep.value}); pysb will not guess which "
                f"one to trust\n  fix: uninstall the one you did not mean to install"
            )


class Hooks:
    """Typed calls of every hook: the one place that touches ``pm.hook``."""

    def __init__(self, pm: pluggy.PluginManager | LightPluginManager) -> None:
        self.pm = pm

    def add_profile_keys(self, schema: ProfileSchema) -> None:
        self.pm.hook.pysb_add_profile_keys(schema=schema)

    def configure(self, policy: Policy) -> None:
        self.pm.hook.pysb_configure(policy=policy)

    def host_services(self, policy: Policy, emit: Callable[[Event], None]) -> list[HostService]:
        answers = self.pm.hook.pysb_host_services(policy=policy, emit=emit)
        return [service for answer in answers if answer for service in answer]

    def contribute(self, policy: Policy, plan: LaunchPlan) -> None:
        self.pm.hook.pysb_contribute(policy=policy, plan=plan)

    def dns_resolve(self, hostnames: Sequence[str]) -> Mapping[str, Sequence[str]]:
        return self.pm.hook.pysb_dns_resolve(hostnames=list(hostnames)) or {}

    def check(self, policy: Policy, provider: Provider | None, report: CheckReport) -> None:
        self.pm.hook.pysb_check(policy=policy, provider=provider, report=report)

    def launch(self, plan: LaunchPlan, provider: Provider) -> Any:
        return self.pm.hook.pysb_launch(plan=plan, provider=provider)

    def event(self, event: Event) -> None:
        self.pm.hook.pysb_event(event=event)

    def learned(
        self, records: Sequence[Event], profile: LearnedProfile
    ) -> list[tuple[str, BaseException]]:
        """Each plugin's ``pysb_learned`` on its own, in pluggy's order, into a profile of
        its own merged into ``profile`` only when it returned: one plugin that raises (a
        rule that is not a string...) loses its own rules, never the others'. Returns the
        ``(plugin name, exception)`` of each that raised."""
        from pysb_core.profile.learning import LearnedProfile

        caller = self.pm.hook.pysb_learned
        arguments = {"records": list(records), "profile": None}
        failures: list[tuple[str, BaseException]] = []
        for impl in reversed(caller.get_hookimpls()):
            if getattr(impl, "hookwrapper", False) or getattr(impl, "wrapper", False):
                continue  # no wrapper has anything to learn (the light manager has none)
            own = LearnedProfile(cwd=profile.cwd, environ=profile.environ, scalars=profile.scalars)
            arguments["profile"] = own
            kwargs = {n: arguments[n] for n in getattr(impl, "kwargnames", ()) if n in arguments}
            try:
                impl.function(*(arguments[name] for name in impl.argnames), **kwargs)
                for rule in own:
                    profile.add(rule.section, rule.key, rule.value, rule.comment, group=rule.group)
            except Exception as exc:
                failures.append((impl.plugin_name, exc))
                continue
            profile.dropped.extend(own.dropped)
        return failures

    def register(self, plugin: Any, name: str | None = None) -> None:
        if not self.pm.is_registered(plugin):
            self.pm.register(plugin, name=name)

    def implementers(self, hook: str) -> list[str]:
        caller = getattr(self.pm.hook, hook)
        return [impl.plugin_name for impl in caller.get_hookimpls()]

    def child_modules(self) -> list[str]:
        """Modules the sandboxed interpreter must import to install the guards."""
        return list(self.guard_children().values())

    def guard_children(self) -> dict[str, str]:
        """Guard family -> the module the sandboxed interpreter imports to arm it.

        A guard family may keep its host-side hooks and its in-sandbox guard apart (the
        host then never imports the guard): its entry-point module names the in-sandbox
        module in ``PYSB_CHILD_MODULE``. Otherwise the module itself is sent when it has
        ``pysb_child_install`` or ``pysb_child_arm``. A guard with neither has nothing to
        arm: it is left out, and its family counts as not installed (a name is not a guard).
        """
        out: dict[str, str] = {}
        for name, plugin in self.pm.list_name_plugin():
            if not name.startswith("guard:"):
                continue
            child = getattr(plugin, "PYSB_CHILD_MODULE", None)
            if isinstance(child, str) and child:
                out[name.partition(":")[2]] = child
                continue
            modname = getattr(plugin, "__name__", None)
            has = hasattr(plugin, "pysb_child_install") or hasattr(plugin, "pysb_child_arm")
            if modname and has:
                out[name.partition(":")[2]] = modname
        return out
