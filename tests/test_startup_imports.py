"""What ``pysb run`` imports on the host: start-up time is a feature (docs/performance.md).

The host needs the profile, the plugins' host-side hooks and the provider; it must not pay
for pluggy, typing, the guards themselves (sockets, address parsing, the sealed engines)
or for what only some profiles need.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, require_provider, trust_profile

FAMILIES = ("imports", "files", "network", "api", "env")

NEVER_ON_THE_HOST = {
    # pluggy and what it drags in: the run path calls hooks without it (pysb_core._startup.hooks)
    "pluggy",
    "inspect",
    "typing",
    "dataclasses",
    "importlib.metadata",
    # the guards themselves run in the sandbox only (pysb_guards.<family>.hooks here)
    *(f"pysb_guards.{family}.{part}" for family in FAMILIES for part in ("guard", "engine")),
    "pysb_guards.registry",
    "pysb_guards._seal",
    "pysb_core.policy.netrules",
    "socket",
    "ipaddress",
    # other commands' dependencies, and what a warm profile cache makes unnecessary
    "click",
    "stevedore",
    "yaml",
    "dns",
    "json",
    # the interpreter's paths come from the interpreter itself (pysb_core.launch.pyenv)
    "sysconfig",
}

RUN = """
import sys
from pysb_core.cli.run import run_main
status = run_main([*sys.argv[1:], "-c", "pass"])
modules = sorted(sys.modules)
import json
print(json.dumps({"status": status, "modules": modules}))
"""

PLAN = """
import json
from pysb_core.launch.pipeline import Program, Session
session = Session.create()
plan = session.plan(Program("code", argv=["-c"], code="pass"))
print(json.dumps(plan.payload["guards"]))
"""


def _python(code: str, cwd: Path, *args: str) -> str:
    env = {**BASE_ENV, "XDG_CACHE_HOME": str(cwd / "cache")}
    r = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,  # no file on a standard stream: no relay threads
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_a_plain_run_imports_none_of_it(tmp_path: Path) -> None:
    (tmp_path / ".pysb.yaml").write_text("version: 1\nimports: [json]\nenv: {TERM: xterm}\n")
    trust_profile(tmp_path / ".pysb.yaml")
    _python(RUN, tmp_path)  # fills the profile cache
    out = json.loads(_python(RUN, tmp_path))
    assert out["status"] == 0
    assert NEVER_ON_THE_HOST.isdisjoint(out["modules"]), NEVER_ON_THE_HOST & set(out["modules"])
    assert "pysb_guards.files.hooks" in out["modules"]


#: What the providers that start the sandbox without a helper (no ``subprocess``, which
#: brings ``threading`` and ``signal``'s ``enum``) keep off the host too: ``enum`` (the
#: kits' ``Capability`` is the light StrEnum), ``threading`` (a lock of ``_thread``; the
#: module only for a thread), ``functools`` and ``collections`` that both bring; nor
#: ``importlib`` (with ``warnings``: pysb_core._lazy) and ``types`` (their names are made
#: where they are needed), which ``subprocess`` brings too.
NEVER_WITHOUT_A_HELPER = {
    *("enum", "threading", "functools", "collections", "collections.abc"),
    *("importlib", "warnings", "types"),
}


def _modules_of_a_run(tmp_path: Path, provider: str) -> list[str]:
    """The modules pysb's host process holds after a run of ``-c pass`` (the second: the
    first fills the profile cache)."""
    (tmp_path / ".pysb.yaml").write_text("version: 1\nimports: [json]\n")
    trust_profile(tmp_path / ".pysb.yaml")
    _python(RUN, tmp_path, "--provider", provider)
    out = json.loads(_python(RUN, tmp_path, "--provider", provider))
    assert out["status"] == 0
    return list(out["modules"])


@pytest.mark.parametrize("provider", ["subprocess", "landlock"])
def test_a_run_without_a_helper_imports_no_enum_nor_threading(
    tmp_path: Path, provider: str
) -> None:
    if provider != "subprocess":
        require_provider(provider)
    modules = _modules_of_a_run(tmp_path, provider)
    never = NEVER_ON_THE_HOST | NEVER_WITHOUT_A_HELPER
    assert never.isdisjoint(modules), never & set(modules)


def test_the_sandbox_still_gets_every_guard(tmp_path: Path) -> None:
    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    trust_profile(tmp_path / ".pysb.yaml")
    guards = json.loads(_python(PLAN, tmp_path))
    assert sorted(guards) == [
        "pysb_guards.api.guard",
        "pysb_guards.env.guard",
        "pysb_guards.files.guard",
        "pysb_guards.imports.guard",
        "pysb_guards.network.guard",
    ]


@pytest.mark.parametrize(
    ("provider", "own"),
    [
        ("unshare", "pysb_unshare.rootfs"),
        ("bwrap", "pysb_bwrap.provider"),
        ("firejail", "pysb_firejail.provider"),
    ],
)
def test_a_run_with_a_helper_imports_no_subprocess(tmp_path: Path, provider: str, own: str) -> None:
    """unshare starts ``unshare`` with the kit's ``start_process``; bwrap and firejail adopt
    pysb's light process (``LaunchSpec.light``); the netns network (imported on every run)
    loads ``subprocess`` and ``re`` only to load a filter: no ``subprocess`` (``locale``,
    ``re``, ``selectors``, ``signal``'s enums...) nor what it brings, nor ``functools`` or
    ``collections`` (``partial``, ``lru_cache``, ``collections.abc``, ``array``:
    docs/performance.md)."""
    require_provider(provider)
    modules = _modules_of_a_run(tmp_path, provider)
    never = NEVER_ON_THE_HOST | NEVER_WITHOUT_A_HELPER | {"subprocess", "re", "locale", "selectors"}
    assert never.isdisjoint(modules), never & set(modules)
    assert own in modules
