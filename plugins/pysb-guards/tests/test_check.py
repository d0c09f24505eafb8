"""``pysb check``: which layer enforces each rule of the guard families."""

from __future__ import annotations

from pysb_guards.api import hooks as api
from pysb_guards.env import hooks as env
from pysb_guards.files import hooks as files
from pysb_guards.imports import hooks as imports

from pysb_core.check import CheckReport
from pysb_core.policy import ApiRule, Exposure, IgnoreRule, Policy
from pysb_core.provider import Capability, Provider, ProviderStatus


class FakeProvider(Provider):
    name = "fake"
    capabilities = frozenset({Capability.FILES, Capability.FILES_WRITE, Capability.ENV})

    def probe(self) -> ProviderStatus:
        return ProviderStatus.ok()

    def prepare(self, plan):  # pragma: no cover - not launched
        raise NotImplementedError


POLICY = Policy(
    exposures=(
        Exposure("/p/data", "/p/data", False, "p.yaml:3"),
        Exposure("/p/out", "/p/out", True, "p.yaml:4"),
        Exposure("/p/in", "/data", False, "p.yaml:5"),
        Exposure("/usr/lib/python3", "/usr/lib/python3", False, "<python>", True),
    ),
    ignore=(IgnoreRule(".env", "p.yaml:6"),),
    imports=("json",),
    imports_source="p.yaml:7",
    api=(ApiRule("allow", "threads", "p.yaml:8"),),
    env={"TERM": "xterm"},
    env_sources={"TERM": "p.yaml:9"},
)


def _layers(provider: Provider | None, python_guards: bool = True) -> dict[str, tuple[str, ...]]:
    report = CheckReport(provider="fake", python_guards=python_guards)
    for family in (files, imports, api, env):
        family.pysb_check(policy=POLICY, provider=provider, report=report)
    return {r.rule: r.layers for r in report.rules}


def test_layers_follow_the_provider_capabilities() -> None:
    layers = _layers(FakeProvider())
    assert layers["files: expose-ro: /p/data"] == ("python", "os")
    assert layers["files: expose-rw: /p/out"] == ("python", "os")
    assert layers["files: expose-ro: /p/in:/data"] == ("python",)  # no RENAME capability
    assert layers["files: ignore: .env"] == ("python",)  # no IGNORE capability
    assert layers["imports: json"] == ("python",)
    assert layers["api: allow: threads"] == ("python",)
    assert layers["env: TERM"] == ("os",)
    assert not any("/usr/lib/python3" in rule for rule in layers)  # implicit: not listed


def test_without_python_guards_only_the_os_layer_counts() -> None:
    report = CheckReport(provider="fake", python_guards=False)
    for family in (files, imports, api):
        family.pysb_check(policy=POLICY, provider=FakeProvider(), report=report)
    unenforced = {r.rule for r in report.unenforced()}
    # imports and api are given up knowingly; ignore and the renamed exposure are not
    assert unenforced == {"files: expose-ro: /p/in:/data", "files: ignore: .env"}


def test_check_says_what_the_python_layer_cannot_hold() -> None:
    """ctypes with `native` denied: a note, not silence. sqlite3 has none since a
    program's own authorizer composes with the guard's (issue 28)."""

    def notes(imports: tuple[str, ...], api: tuple[ApiRule, ...] = ()) -> list[str]:
        report = CheckReport(provider="fake")
        policy = Policy(imports=imports, imports_source="p.yaml:7", api=api)
        api_hooks_check(policy, report)
        return report.notes

    assert any("ctypes" in n for n in notes(("ctypes",)))
    assert any("ctypes" in n for n in notes(("*",)))
    assert not any("ctypes" in n for n in notes(("ctypes",), (ApiRule("allow", "native", "p:1"),)))
    assert notes(("sqlite3",)) == []
    assert notes(("json",)) == []


def api_hooks_check(policy: Policy, report: CheckReport) -> None:
    api.pysb_check(policy=policy, provider=None, report=report)
