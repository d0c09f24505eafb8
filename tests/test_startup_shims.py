"""The start-up stand-ins (pysb_core._startup) answer as the libraries they replace, on
what is really installed: the pysb distributions' entry points against importlib.metadata,
the installed plugins' hooks against pluggy, records against dataclasses.

tests/test_startup_hooks.py and tests/test_startup_entrypoints.py cover generated plugins
and odd distributions; this file covers the real ones a run loads.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import pickle
import sys
from pathlib import Path
from typing import Any

import pluggy
import pytest

from pysb_core import hookspecs
from pysb_core._startup import entrypoints
from pysb_core._startup.hooks import LightPluginManager
from pysb_core._startup.records import FrozenInstanceError, Record, field, record
from pysb_core.check import CheckReport
from pysb_core.launch.plugins import get_plugin_manager
from pysb_core.launch.profilecheck import check_profile

GUARDS = {"files", "imports", "network", "api", "env"}
GROUPS = ("pysb.providers", "pysb.guards", "pysb.plugins", "console_scripts")
PYSB_DISTRIBUTIONS = {
    "pysb-core",
    "pysb-guards",
    "pysb-landlock",
    "pysb-bwrap",
    "pysb-unshare",
    "pysb-firejail",
    "pysb-qemu",
}


def _theirs(group: str) -> dict[tuple[str, str], importlib.metadata.EntryPoint]:
    return {(ep.name, ep.value): ep for ep in importlib.metadata.entry_points(group=group)}


@pytest.mark.parametrize("group", GROUPS)
def test_every_entry_point_has_importlib_metadatas_distribution_and_object(group: str) -> None:
    theirs = _theirs(group)
    ours = entrypoints.entry_points(group)
    assert {(ep.name, ep.value) for ep in ours} == set(theirs)
    for ep in ours:
        real = theirs[ep.name, ep.value]
        assert real.dist is not None
        assert (ep.group, ep.dist_name, ep.dist_version) == (
            real.group,
            real.dist.name,
            real.dist.version,
        ), ep
        assert (ep.module, ep.attr, ep.extras) == (real.module, real.attr, real.extras)
        if ep.dist_name in PYSB_DISTRIBUTIONS and group != "console_scripts":
            assert ep.load() is real.load(), ep


def test_the_pysb_plugins_are_all_there() -> None:
    """The comparison above is not vacuous: every built-in plugin is found."""
    found = {ep.dist_name for g in GROUPS for ep in entrypoints.entry_points(g)}
    assert found >= PYSB_DISTRIBUTIONS
    names = {ep.name for ep in entrypoints.entry_points("pysb.providers")}
    assert names >= {"subprocess", "landlock", "bwrap", "unshare", "firejail", "qemu"}
    light, _ = _managers()
    assert len(_order(light, "pysb_check")) >= 6  # the OS layer and every family
    assert {ep.name for ep in entrypoints.entry_points("pysb.guards")} >= GUARDS


def _managers() -> tuple[LightPluginManager, pluggy.PluginManager]:
    light, _ = get_plugin_manager(light=True)
    real, _ = get_plugin_manager(light=False)
    assert isinstance(light, LightPluginManager) and light.pluggy is None  # no hand-over
    assert isinstance(real, pluggy.PluginManager)
    return light, real


def _order(pm: Any, hook: str) -> list[tuple[str, str]]:
    """The implementations of ``hook`` in call order: (plugin name, function)."""
    impls = getattr(pm.hook, hook).get_hookimpls()
    return [(i.plugin_name, i.function.__qualname__) for i in reversed(impls)]


@pytest.mark.parametrize("hook", sorted(n for n in dir(hookspecs) if n.startswith("pysb_")))
def test_the_installed_plugins_are_called_in_pluggys_order(hook: str) -> None:
    if not callable(getattr(hookspecs, hook)) or not hasattr(getattr(hookspecs, hook), "pysb_spec"):
        pytest.skip(f"{hook} is not a hook spec")
    light, real = _managers()
    assert _order(light, hook) == _order(real, hook)


def test_a_real_hook_call_has_the_same_effect_through_both(tmp_path: Path) -> None:
    """``pysb check``'s hook with every installed family: the same report either way."""
    (tmp_path / "p.yaml").write_text(
        "version: 1\nimports: [json]\nfiles: {expose-ro: [.]}\nenv: {TERM: xterm}\n"
        "network:\n  - allow tcp 127.0.0.1 8000 out\napi: {allow: [threads]}\n"
    )
    policy = check_profile(tmp_path / "p.yaml", cwd=tmp_path)
    light, real = _managers()
    reports = []
    for pm in (light, real):
        report = CheckReport(provider="landlock", python_families=frozenset(GUARDS))
        assert pm.hook.pysb_check(policy=policy, provider=None, report=report) == []
        reports.append(report)
    assert reports[0] == reports[1]
    assert {family for family, _, _ in reports[0]._rules} == GUARDS  # every family spoke


def test_firstresult_stops_at_the_first_answer_as_in_pluggy() -> None:
    """``pysb_dns_resolve`` (firstresult) with the installed plugins and two of a test's:
    the same answer, from the same implementation, through both managers."""

    from pysb_core import hookimpl

    class First:
        @hookimpl
        def pysb_dns_resolve(self, hostnames: list[str]) -> dict[str, list[str]] | None:
            return None  # no answer: the next one is asked

    class Second:
        @hookimpl
        def pysb_dns_resolve(self, hostnames: list[str]) -> dict[str, list[str]]:
            return {h: ["127.0.0.2"] for h in hostnames}

    class Third:
        @hookimpl(trylast=True)
        def pysb_dns_resolve(self, hostnames: list[str]) -> dict[str, list[str]]:
            raise AssertionError("never reached: an earlier one answered")

    answers = []
    for light in (True, False):
        pm, _ = get_plugin_manager(light=light, extra_plugins=[Third(), Second(), First()])
        answers.append(pm.hook.pysb_dns_resolve(hostnames=["example.test"]))
    assert answers[0] == answers[1] == {"example.test": ["127.0.0.2"]}


# -- records against frozen dataclasses ----------------------------------------------------


@record
class Point(Record):
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class DataPoint:
    x: int
    y: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((1,), {}),
    ((1, 2), {}),
    ((), {"x": 3, "tags": ["a"]}),
    ((1,), {"y": 5}),
    ((1, 2, ["t"]), {}),
]
BAD_CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((), {}),  # missing x
    ((1, 2, [], 4), {}),  # too many
    ((1,), {"x": 2}),  # twice
    ((1,), {"z": 2}),  # unknown
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_a_record_is_built_compared_and_shown_as_a_frozen_dataclass(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    ours, theirs = Point(*args, **kwargs), DataPoint(*args, **kwargs)
    assert [getattr(ours, f.name) for f in dataclasses.fields(DataPoint)] == [
        getattr(theirs, f.name) for f in dataclasses.fields(DataPoint)
    ]
    assert repr(ours) == repr(theirs).replace("DataPoint(", "Point(", 1)
    assert (ours == Point(*args, **kwargs)) == (theirs == DataPoint(*args, **kwargs))
    changed = ours.replace(y=9)
    assert (changed.x, changed.y) == (theirs.x, dataclasses.replace(theirs, y=9).y)
    assert pickle.loads(pickle.dumps(ours)) == ours
    with pytest.raises(dataclasses.FrozenInstanceError):
        theirs.x = 5  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        ours.x = 5  # type: ignore[misc]
    assert issubclass(FrozenInstanceError, AttributeError)
    assert issubclass(dataclasses.FrozenInstanceError, AttributeError)


@pytest.mark.parametrize(("args", "kwargs"), BAD_CALLS)
def test_a_record_refuses_the_calls_a_dataclass_refuses(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(TypeError):
        DataPoint(*args, **kwargs)
    with pytest.raises(TypeError):
        Point(*args, **kwargs)


def test_defaults_from_a_factory_are_fresh_and_hash_follows_equality() -> None:
    a, b = Point(1), Point(1)
    assert a.tags is not b.tags  # as default_factory: a new list each time
    assert DataPoint(1).tags is not DataPoint(1).tags
    frozen_a, frozen_b = Point(1, 2, ()), Point(1, 2, ())  # type: ignore[arg-type]
    assert frozen_a == frozen_b and hash(frozen_a) == hash(frozen_b)
    assert Point(1) != DataPoint(1)  # like two dataclasses: another class is never equal


def _both_capability_classes() -> tuple[Any, Any]:
    """pysb's Capability (the light StrEnum) and enum.StrEnum made of the same members."""
    import enum

    from pysb_core.provider import Capability

    return Capability, enum.StrEnum("Capability", [(m.name, m.value) for m in Capability])


def test_the_light_strenum_answers_as_enum_strenum() -> None:
    """``Capability`` is built at every ``pysb run`` without ``enum``: every answer code
    gets from a member or from the class is ``enum.StrEnum``'s for the same members."""
    import copy
    import json

    ours, theirs = _both_capability_classes()
    assert [(m.name, m.value) for m in ours] == [(m.name, m.value) for m in theirs]
    assert len(ours) == len(theirs) == 10 and repr(ours) == repr(theirs)
    assert [m.name for m in reversed(ours)] == [m.name for m in reversed(theirs)]
    assert list(ours.__members__) == list(theirs.__members__)
    for a, b in zip(ours, theirs, strict=True):
        assert (repr(a), str(a), f"{a}", f"{a:>12}", a.name, a.value) == (
            repr(b),
            str(b),
            f"{b}",
            f"{b:>12}",
            b.name,
            b.value,
        )
        assert a == b == a.value and hash(a) == hash(b) == hash(a.value)
        assert isinstance(a, str) and isinstance(a, ours)
        assert ours(a.value) is a and ours(a) is a and ours[a.name] is a
        assert a in ours
        if sys.version_info >= (3, 12):
            assert a.value in ours and a.value in theirs
        else:  # a member only, a TypeError otherwise (enum warns first)
            with pytest.raises(TypeError) as mine:
                a.value in ours  # noqa: B015
            with pytest.raises(TypeError) as real, pytest.warns(DeprecationWarning):
                a.value in theirs  # noqa: B015
            assert str(mine.value) == str(real.value)
        assert getattr(ours, a.name) is a
        assert pickle.loads(pickle.dumps(a)) is a
        assert copy.copy(a) is a and copy.deepcopy(a) is a
        assert json.dumps({a: [a]}) == json.dumps({b: [b]})
    assert sorted(ours) == sorted(theirs)
    if sys.version_info >= (3, 12):
        assert "no-such" not in ours and 3 not in ours
    for bad in ("no-such", 3, None):
        with pytest.raises(ValueError) as mine:
            ours(bad)
        with pytest.raises(ValueError) as real:
            theirs(bad)
        assert str(mine.value) == str(real.value)
    with pytest.raises(KeyError):
        ours["no_such"]
    assert frozenset({ours.FILES, ours.ENV}) == frozenset({"files", "env"})
