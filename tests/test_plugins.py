"""The plugin manager, the marker, the typed facade and the OS-layer rule report."""

from __future__ import annotations

import types

import pluggy
import pytest

from pysb_core import hookimpl, hookspecs
from pysb_core.check import CheckReport
from pysb_core.launch.plugins import BUILTIN_PLUGINS, Hooks, get_plugin_manager
from pysb_core.policy import Exposure, Limits, Policy
from pysb_core.provider import Capability, Provider


def test_marker_sets_what_pluggys_marker_sets() -> None:
    ours = hookimpl(tryfirst=True)(lambda policy: None)
    theirs = pluggy.HookimplMarker("pysb")(tryfirst=True)(lambda policy: None)
    assert ours.pysb_impl == theirs.pysb_impl  # type: ignore[attr-defined]
    bare = hookimpl(lambda policy: None)
    assert bare.pysb_impl == pluggy.HookimplMarker("pysb")(lambda policy: None).pysb_impl  # type: ignore[attr-defined]


def test_marked_functions_register_and_are_called() -> None:
    seen = []
    plugin = types.SimpleNamespace(pysb_configure=hookimpl(lambda policy: seen.append(policy)))
    pm, _ = get_plugin_manager(guards=False, autoload=False, extra_plugins=[plugin])
    Hooks(pm).configure(Policy())
    assert seen == [Policy()]


def test_builtins_are_plugins_and_specs_are_checked() -> None:
    pm, loaded = get_plugin_manager(guards=False, autoload=False)
    assert {p.module for p in loaded} == set(BUILTIN_PLUGINS)
    bad = types.SimpleNamespace(pysb_no_such_hook=hookimpl(lambda: None))
    pm.register(bad)
    with pytest.raises(pluggy.PluginValidationError):
        pm.check_pending()
    assert hookspecs.PROJECT == "pysb"


class _PortOnly(Provider):
    name = "portonly"
    capabilities = frozenset({Capability.FILES, Capability.TCP_PORT, Capability.ENV})

    def probe(self):  # pragma: no cover - not called
        raise NotImplementedError

    def prepare(self, plan):  # pragma: no cover - not called
        raise NotImplementedError


def test_os_layer_report_follows_capabilities() -> None:
    from pysb_core.policy.netrules import parse_rule

    policy = Policy(
        exposures=(
            Exposure("/data", "/data", False, "p.yaml:3"),
            Exposure("/out", "/out", True, "p.yaml:4"),
            Exposure("/src", "/dst", False, "p.yaml:5"),
        ),
        network=(
            parse_rule("allow tcp * 443 out", "p.yaml:7"),
            parse_rule("allow tcp 127.0.0.1 8000 out", "p.yaml:8"),
        ),
        env={"HOME": "/home/x"},
        limits=Limits(memory=1 << 20),
    )
    pm, _ = get_plugin_manager(guards=False, autoload=False)
    report = CheckReport("portonly", python_guards=False)
    Hooks(pm).check(policy, _PortOnly(), report)
    by_source = {r.source: r.layers for r in report.rules}
    assert by_source["p.yaml:3"] == ("os",)  # read-only exposure: FILES
    assert by_source["p.yaml:4"] == ()  # writes need FILES_WRITE
    assert by_source["p.yaml:5"] == ()  # renames need RENAME
    assert by_source["p.yaml:7"] == ("os",)  # any host, by port
    assert by_source["p.yaml:8"] == ()  # a host needs TCP_HOST
    unenforced = {r.source for r in report.unenforced()}
    assert unenforced >= {"p.yaml:4", "p.yaml:5", "p.yaml:8"}


def test_python_only_families_may_be_given_up_knowingly() -> None:
    report = CheckReport("x", python_guards=False)
    report.add("imports: json", "p:1", ["python"], "imports")
    report.add("files: expose-ro: /d", "p:2", ["python"], "files")
    assert [r.source for r in report.unenforced()] == ["p:2"]
    on = CheckReport("x", python_guards=True)
    on.add("imports: json", "p:1", ["python"], "imports")
    on.add("imports: json", "p:1", ["os"], "imports")
    assert on.rules[0].layers == ("python", "os") and not on.unenforced()
