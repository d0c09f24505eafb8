"""The pluggy-free hook manager of ``pysb run`` behaves as pluggy does (differential).

The same plugins are registered with a ``pluggy.PluginManager`` and a
``LightPluginManager``; every call must reach the same implementations, in the same
order, with the same arguments and the same results. Plugins that use more of pluggy
than the light manager implements must make it hand over to pluggy, after which both
behave identically, errors included.
"""

from __future__ import annotations

import types
import warnings
from typing import Any

import pluggy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pysb_core import hookimpl, hookspecs
from pysb_core._startup.hooks import LightPluginManager, _specs
from pysb_core._startup.markers import HookspecMarker
from pysb_core.childhooks import pluggy_manager
from pysb_core.launch.plugins import Hooks, get_plugin_manager


def _pluggy() -> pluggy.PluginManager:
    pm: pluggy.PluginManager = pluggy_manager("pysb")
    pm.add_hookspecs(hookspecs)
    return pm


def test_spec_marker_sets_what_pluggys_marker_sets() -> None:
    for kwargs in ({}, {"firstresult": True}, {"historic": True}):
        ours = HookspecMarker("pysb")(**kwargs)(lambda policy: None)
        theirs = pluggy.HookspecMarker("pysb")(**kwargs)(lambda policy: None)
        assert ours.pysb_spec == theirs.pysb_spec  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        HookspecMarker("pysb")(firstresult=True, historic=True)(lambda: None)


def test_specs_are_pluggys_specs() -> None:
    pm = _pluggy()
    ours = _specs()
    theirs = {n: c for n, c in vars(pm.hook).items() if not n.startswith("_")}
    assert set(ours) == set(theirs)
    for name, spec in ours.items():
        caller = theirs[name]
        assert spec.argnames == caller.spec.argnames
        assert spec.kwargnames == caller.spec.kwargnames
        assert spec.firstresult == bool(caller.spec.opts["firstresult"])
        assert not caller.is_historic()  # pysb has none; this module does not do them


# ---------------------------------------------------------------------------------------
# Generated plugins: modules and instances, tryfirst/trylast, results, argument subsets.
# ---------------------------------------------------------------------------------------

HOOK_ARGS = {
    "pysb_contribute": ("policy", "plan"),  # 1:N
    "pysb_dns_resolve": ("hostnames",),  # firstresult
    "pysb_configure": ("policy",),  # 1:N, no result
}


def _make_impl(
    log: list, pid: int, hook: str, args: tuple[str, ...], kw: bool, result: Any, method: bool
) -> Any:
    """A function (or a method, ``self`` first) taking ``args``, the last one with a
    default when ``kw``, that logs its call and returns ``result``."""
    params = [f"{a}=None" if kw and i == len(args) - 1 else a for i, a in enumerate(args)]
    if method:
        params.insert(0, "self")
    ns: dict[str, Any] = {"log": log}
    exec(
        f"def {hook}({', '.join(params)}):\n"
        f"    log.append(({pid}, {hook!r}, {{k: v for k, v in locals().items() "
        f"if k not in ('log', 'self')}}))\n"
        f"    return {result!r}\n",
        ns,
    )
    fn = ns[hook]
    if method and pid % 2:  # pluggy strips `self` of bound methods, dotted name or not
        fn.__qualname__ = f"Plugin{pid}.{hook}"
    return fn


impl_spec = st.fixed_dictionaries(
    {
        "hook": st.sampled_from(sorted(HOOK_ARGS)),
        "order": st.sampled_from([None, "tryfirst", "trylast"]),
        "nargs": st.integers(0, 2),
        "kw": st.booleans(),
        "result": st.sampled_from([None, None, "r1", "r2", 3]),
    }
)
plugin_spec = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["module", "instance"]),
        "impls": st.lists(impl_spec, max_size=3, unique_by=lambda d: d["hook"]),
        "late": st.booleans(),  # registered after the first calls
    }
)


def _build(spec: dict, pid: int, log: list) -> object:
    method = spec["kind"] == "instance"
    funcs = {}
    for d in spec["impls"]:
        hook = d["hook"]
        args = HOOK_ARGS[hook][: d["nargs"]]
        result = None if hook == "pysb_configure" else d["result"]
        fn = _make_impl(log, pid, hook, args, d["kw"], result, method)
        opts = {d["order"]: True} if d["order"] else {}
        funcs[hook] = hookimpl(**opts)(fn)
    if method:
        return type(f"Plugin{pid}", (), funcs)()
    module = types.ModuleType(f"plugin{pid}")
    module.__dict__.update(funcs)
    return module


def _run(pm: Any, plugins: list[dict], log: list) -> list:
    out: list = []
    early = [(i, p) for i, p in enumerate(plugins) if not p["late"]]
    late = [(i, p) for i, p in enumerate(plugins) if p["late"]]
    for i, p in early:
        out.append(("registered", pm.register(_build(p, i, log), name=f"p{i}")))
    pm.check_pending()
    out.append(("contribute", pm.hook.pysb_contribute(policy="POL", plan="PLAN")))
    out.append(("resolve", pm.hook.pysb_dns_resolve(hostnames=["h"])))
    out.append(("configure", pm.hook.pysb_configure(policy="POL")))
    for i, p in late:
        out.append(("registered", pm.register(_build(p, i, log), name=f"p{i}")))
    out.append(("contribute", pm.hook.pysb_contribute(policy="POL2", plan="PLAN2")))
    out.append(("resolve", pm.hook.pysb_dns_resolve(hostnames=["h2"])))
    out.append(("impls", [i.plugin_name for i in pm.hook.pysb_contribute.get_hookimpls()]))
    out.append(("names", [n for n, _ in pm.list_name_plugin()]))
    out.append(("log", list(log)))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(plugin_spec, max_size=6))
def test_same_calls_same_order_same_results_as_pluggy(plugins: list[dict]) -> None:
    light = LightPluginManager()
    assert _run(light, plugins, []) == _run(_pluggy(), plugins, [])
    assert light.pluggy is None  # nothing here needs pluggy itself


# ---------------------------------------------------------------------------------------
# Plugins that need pluggy: the light manager hands over, and then behaves like pluggy.
# ---------------------------------------------------------------------------------------


def _plain() -> types.ModuleType:
    m = types.ModuleType("plain")
    m.pysb_contribute = hookimpl(lambda policy, plan: "plain")  # type: ignore[attr-defined]
    return m


def _wrapper() -> types.ModuleType:
    m = types.ModuleType("wrapper")

    @hookimpl(wrapper=True)
    def pysb_contribute(policy, plan):
        result = yield
        return [*result, "wrapped"]

    m.pysb_contribute = pysb_contribute  # type: ignore[attr-defined]
    return m


def _hookwrapper() -> types.ModuleType:
    m = types.ModuleType("hookwrapper")

    @hookimpl(hookwrapper=True)
    def pysb_contribute(plan):
        outcome = yield
        outcome.force_result([*outcome.get_result(), "old-style"])

    m.pysb_contribute = pysb_contribute  # type: ignore[attr-defined]
    return m


def _specname() -> types.ModuleType:
    m = types.ModuleType("specname")
    m.contribute_too = hookimpl(specname="pysb_contribute")(lambda plan: "by specname")  # type: ignore[attr-defined]
    return m


def _optional() -> types.ModuleType:
    m = types.ModuleType("optional")
    m.pysb_not_a_hook = hookimpl(optionalhook=True)(lambda: "x")  # type: ignore[attr-defined]
    return m


def _unknown() -> types.ModuleType:
    m = types.ModuleType("unknown")
    m.pysb_not_a_hook = hookimpl(lambda: "x")  # type: ignore[attr-defined]
    return m


def _bad_args() -> types.ModuleType:
    m = types.ModuleType("badargs")
    m.pysb_contribute = hookimpl(lambda policy, nonsense: "x")  # type: ignore[attr-defined]
    return m


class _Static:
    @staticmethod
    @hookimpl
    def pysb_contribute(plan):
        return "static"


class _Class:
    @classmethod
    @hookimpl
    def pysb_contribute(cls, plan):
        return "classmethod"


class _Dir:
    @hookimpl
    def pysb_contribute(self, plan):
        return "dir"

    def __dir__(self):
        return []


class _OnInstance:
    def __init__(self) -> None:
        self.pysb_contribute = hookimpl(lambda plan: "on instance")


def _decorated() -> types.ModuleType:
    import functools

    def inner(policy, plan):
        return "decorated"

    m = types.ModuleType("decorated")
    m.pysb_contribute = hookimpl(functools.wraps(inner)(lambda *a: inner(*a)))  # type: ignore[attr-defined]
    return m


NEEDS_PLUGGY = {
    "wrapper": _wrapper,
    "hookwrapper": _hookwrapper,
    "specname": _specname,
    "optionalhook": _optional,
    "unknown hook": _unknown,
    "argument not in spec": _bad_args,
    "staticmethod": _Static,
    "classmethod": _Class,
    "class as plugin": lambda: _Class,
    "custom __dir__": _Dir,
    "instance attribute": _OnInstance,
    "decorated": _decorated,
}


def _outcome(pm: Any, make: Any) -> list:
    out: list = []
    for step in (lambda: pm.register(_plain(), name="plain"), lambda: pm.register(make())):
        try:
            out.append(("ok", step()))
        except Exception as exc:
            out.append(("error", type(exc).__name__, str(exc).split("\n")[0]))
    for step in (
        pm.check_pending,
        lambda: pm.hook.pysb_contribute(policy="P", plan="Q"),
    ):
        try:
            out.append(("ok", step()))
        except Exception as exc:
            out.append(("error", type(exc).__name__, str(exc).split("\n")[0]))
    return out


@pytest.mark.parametrize("case", sorted(NEEDS_PLUGGY))
def test_what_needs_pluggy_goes_to_pluggy(case: str) -> None:
    make = NEEDS_PLUGGY[case]
    light = LightPluginManager()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = _outcome(_pluggy(), make)
        ours = _outcome(light, make)
    assert light.pluggy is not None
    assert _without_ids(ours) == _without_ids(theirs)


def _without_ids(outcome: list) -> str:
    """Plugin names default to ``str(id(plugin))`` and reprs hold addresses."""
    import re

    return re.sub(r"0x[0-9a-f]+|\b\d{6,}\b", "ID", repr(outcome))


def test_names_and_plugins_registered_twice_fail_as_in_pluggy() -> None:
    for pm in (_pluggy(), LightPluginManager()):
        plugin = _plain()
        pm.register(plugin, name="x")
        with pytest.raises(ValueError, match="already registered"):
            pm.register(_plain(), name="x")
        with pytest.raises(ValueError, match="already registered"):
            pm.register(plugin, name="y")


def test_a_missing_argument_warns_or_fails_as_in_pluggy() -> None:
    for pm in (_pluggy(), LightPluginManager()):
        policy_only = types.ModuleType("policy_only")
        policy_only.pysb_contribute = hookimpl(lambda policy: "ok")  # type: ignore[attr-defined]
        pm.register(policy_only)
        with pytest.warns(UserWarning, match="'plan'"):
            assert pm.hook.pysb_contribute(policy="P") == ["ok"]
        pm.register(_plain())
        with pytest.warns(UserWarning), pytest.raises(pluggy.HookCallError, match="'plan'"):
            pm.hook.pysb_contribute(policy="P")


def test_the_run_path_uses_the_light_manager_and_the_cli_pluggy() -> None:
    pm, _ = get_plugin_manager(light=True)
    assert isinstance(pm, LightPluginManager) and pm.pluggy is None
    assert Hooks(pm).implementers("pysb_check")
    full, _ = get_plugin_manager()
    assert isinstance(full, pluggy.PluginManager)
    assert {n for n, _ in pm.list_name_plugin()} == {n for n, _ in full.list_name_plugin()}
    for hook in ("pysb_check", "pysb_contribute", "pysb_launch", "pysb_dns_resolve"):
        assert Hooks(pm).implementers(hook) == Hooks(full).implementers(hook)


def test_child_side_functions_are_not_host_hooks_for_either_manager() -> None:
    """A guard whose entry-point module holds its child side: ``pysb_child_install`` /
    ``pysb_child_arm`` (marked or not) are the bootstrap's, not pluggy's."""
    for pm in (_pluggy(), LightPluginManager()):
        guard = types.ModuleType("guard")
        guard.pysb_contribute = hookimpl(lambda plan: "contributed")  # type: ignore[attr-defined]
        guard.pysb_child_install = hookimpl(lambda policy, recorder: "files")  # type: ignore[attr-defined]
        guard.pysb_child_arm = lambda: None  # type: ignore[attr-defined]
        pm.register(guard, name="guard:g")
        pm.check_pending()
        assert pm.hook.pysb_contribute(policy="P", plan="L") == ["contributed"]
        assert not hasattr(pm.hook, "pysb_child_install")
    assert LightPluginManager().pluggy is None


def test_a_historic_spec_is_refused_by_the_light_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    @HookspecMarker("pysb")(historic=True)
    def pysb_configure(policy: object) -> None: ...

    monkeypatch.setattr(hookspecs, "pysb_configure", pysb_configure)
    from pysb_core._startup.hooks import NeedsPluggy

    with pytest.raises(NeedsPluggy, match="historic"):
        _specs()
