"""The registry table, rule resolution, profile validation and the generated docs page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pysb_guards import registry
from pysb_guards.api.hooks import learned_api, validate_api_section

ROOT = Path(__file__).resolve().parents[3]


def test_eight_categories_and_about_150_names() -> None:
    assert list(registry.CATEGORIES) == [
        "process-exec",
        "process-control",
        "privileges",
        "threads",
        "native",
        "introspection",
        "dynamic-code",
        "deserialization",
    ]
    assert 140 <= len(registry.ENTRIES) <= 200
    assert {e.category for e in registry.ENTRIES} == set(registry.CATEGORIES)


def test_an_entry_holds_each_field_as_given_and_cannot_change() -> None:
    values = {
        "qualname": "a.b",
        "category": "native",
        "module": "a",
        "attr": "b",
        "alias_of": "c.d",
        "since": (3, 12),
        "until": (3, 14),
        "platform": "linux",
        "optional": True,
        "events": ("a.b",),
        "patch": False,
    }
    entry = registry.Entry(**values)  # type: ignore[arg-type]
    assert {name: getattr(entry, name) for name in values} == values
    assert set(registry.Entry.__slots__) == set(values)
    with pytest.raises(AttributeError, match="immutable"):
        entry.patch = True  # type: ignore[misc]
    assert entry.patch is False


def test_both_spellings_of_aliases_are_listed() -> None:
    for name in ("system", "execv", "fork", "kill", "setuid", "umask"):
        assert f"os.{name}" in registry.BY_NAME
        assert registry.BY_NAME[f"posix.{name}"].alias_of == f"os.{name}"


@pytest.mark.parametrize(
    ("version", "present", "absent"),
    [
        ((3, 11), "threading._start_new_thread", "threading._start_joinable_thread"),
        ((3, 12), "threading._start_new_thread", "_thread.start_joinable_thread"),
        ((3, 13), "threading._start_joinable_thread", "threading._start_new_thread"),
    ],
)
def test_thread_primitives_follow_the_version(version, present, absent) -> None:
    names = {e.qualname for e in registry.applicable(version, "linux")}
    assert present in names and absent not in names


def test_platform_applicability() -> None:
    linux = {e.qualname for e in registry.applicable((3, 12), "linux")}
    windows = {e.qualname for e in registry.applicable((3, 12), "win32")}
    assert "os.unshare" in linux and "os.unshare" not in windows
    assert "nt.system" in windows and "nt.system" not in linux
    assert "os.unshare" not in {e.qualname for e in registry.applicable((3, 11), "linux")}


def _verdicts(*rules: tuple[str, str]) -> dict[str, bool]:
    return registry.resolve(list(rules))


def test_default_is_deny() -> None:
    assert not any(_verdicts().values())


def test_function_beats_category_beats_star() -> None:
    v = _verdicts(("deny", "*"), ("allow", "process-exec"), ("deny", "os.system"))
    assert v["subprocess.Popen"] and not v["os.system"] and not v["gc.get_objects"]
    v = _verdicts(("allow", "*"), ("deny", "threads"), ("allow", "threading.Thread.start"))
    assert v["threading.Thread.start"] and not v["_thread.start_new_thread"] and v["os.system"]


def test_deny_wins_at_equal_specificity_whatever_the_order() -> None:
    for rules in (
        (("allow", "threads"), ("deny", "threads")),
        (("deny", "threads"), ("allow", "threads")),
    ):
        assert not _verdicts(*rules)["threading.Thread.start"]
    assert not _verdicts(("allow", "os.system"), ("deny", "posix.system"))["os.system"]


def test_a_rule_on_one_spelling_decides_both() -> None:
    v = _verdicts(("allow", "posix.system"))
    assert v["os.system"] and v["posix.system"]
    v = _verdicts(("allow", "process-exec"), ("deny", "os.system"))
    assert not v["posix.system"]


class _Located(str):
    location = "p.yaml:7"


def test_validation_rejects_unknown_targets_with_a_hint() -> None:
    messages = validate_api_section(
        {"allow": [_Located("os.sytem"), "threads"], "deny": ["process-exec", "*"]}, "p.yaml:5"
    )
    assert len(messages) == 1
    assert messages[0].startswith("p.yaml:7: api: unknown target 'os.sytem'")
    assert "did you mean 'os.system'" in messages[0]
    assert validate_api_section({"allow": ["nt.system", "sys.remote_exec"]}, "p:1") == []


def test_learned_api_uses_the_category_only_when_complete() -> None:
    from pysb_core.events import Event

    def ev(name: str) -> Event:
        return Event("python", "api", "learn", name, registry.BY_NAME[name].category)

    every = {e.group for e in registry.applicable() if e.category == "dynamic-code"}
    rows = learned_api([ev(n) for n in every] + [ev("os.system"), ev("posix.system")])
    values = [v for v, _ in rows]
    assert "dynamic-code" in values and "os.system" in values
    assert "process-exec" not in values and "posix.system" not in values


def test_docs_page_is_current() -> None:
    page = ROOT / "docs" / "api-registry.md"
    fresh = subprocess.run(
        [sys.executable, "-m", "pysb_guards.registry"], capture_output=True, text=True, check=True
    ).stdout
    assert page.read_text() == fresh, "run: python -m pysb_guards.registry > docs/api-registry.md"
