"""Partial mode with the Python layer (pysb-guards) active in the worker.

The worker starts its threads, its event loop and captures what it needs before the API
guard is armed, so it serves calls while user code is refused threads, processes, files,
imports and network that the profile does not grant; and the denials reach the caller as
the builtin exceptions, with the profile line to add.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pysb_core import (
    ApiDeniedError,
    FileDeniedError,
    ImportDeniedError,
    SandboxError,
    sandbox_denials,
    sandboxes,
)
from pysb_core.testing.partial import write_module


def _guards_or_skip() -> None:
    try:
        from pysb_core.launch.plugins import get_plugin_manager

        _, plugins = get_plugin_manager()
    except Exception as exc:
        pytest.skip(f"pysb-guards cannot be loaded here: {exc}")
    families = {p.name for p in plugins if p.kind == "guard"}
    missing = {"imports", "files", "api"} - families
    if missing:
        pytest.skip(f"pysb-guards is not installed (missing guards: {sorted(missing)})")


FUNCTIONS = """
import asyncio
import json
import os
import threading
from pysb_core import sandbox

@sandbox
def dumps(value):
    return json.dumps(value)

@sandbox
def import_forbidden():
    import sqlite3
    return sqlite3.sqlite_version

@sandbox
def read(path):
    with open(path) as f:
        return f.read()

@sandbox
def run_shell():
    return os.system("true")

@sandbox
def start_thread():
    threading.Thread(target=lambda: None).start()

@sandbox
async def ajson(value):
    await asyncio.sleep(0)
    return json.dumps(value)

def init():
    import sqlite3  # not allowed: the start must fail, and say why
"""


@pytest.fixture
def setup(tmp_path: Path):
    _guards_or_skip()
    project = tmp_path / "project"
    project.mkdir()
    mod = write_module(project, FUNCTIONS)
    profile = project / ".pysb.yaml"
    profile.write_text(
        "version: 1\nprovider: subprocess\n"
        "imports: [json, asyncio, os, threading]\n"
        f"files:\n  expose-ro: [{project}]\n"
    )
    return mod, project, {"profile": str(profile), "cwd": str(project)}


def test_calls_are_served_while_the_api_guard_is_armed(setup):
    mod, _, kwargs = setup
    with sandboxes(**kwargs):
        assert mod.dumps([1, 2]) == "[1, 2]"
        with pytest.raises(ApiDeniedError) as info:
            mod.start_thread()  # the worker's own threads were started before arming
        assert isinstance(info.value, PermissionError)


def test_denials_reach_the_caller_as_builtin_exceptions_with_the_rule(setup, tmp_path):
    mod, _, kwargs = setup
    secret = tmp_path / "secret.txt"
    secret.write_text("host only")
    with sandboxes(**kwargs):
        with pytest.raises(ImportDeniedError) as imp:
            mod.import_forbidden()
        assert isinstance(imp.value, ModuleNotFoundError)
        assert "imports: [sqlite3]" in str(imp.value)
        with pytest.raises(FileDeniedError) as fil:
            mod.read(str(secret))
        assert isinstance(fil.value, FileNotFoundError)
        assert sandbox_denials(fil.value)
        with pytest.raises(ApiDeniedError) as api:
            mod.run_shell()
        assert "os.system" in (api.value.qualname or str(api.value))


def test_async_functions_run_under_the_guards(setup):
    mod, _, kwargs = setup

    async def main():
        async with sandboxes(**kwargs):
            return await asyncio.gather(mod.ajson({"a": 1}), mod.ajson([2]))

    assert asyncio.run(main()) == ['{"a": 1}', "[2]"]


def test_init_fn_runs_under_the_guards(setup):
    mod, _, kwargs = setup
    with pytest.raises(SandboxError, match="sqlite3"), sandboxes(**kwargs, init_fn=mod.init):
        pass


def test_learning_records_what_the_functions_used(tmp_path: Path):
    _guards_or_skip()
    mod = write_module(tmp_path, FUNCTIONS)
    learned = tmp_path / "learned.yaml"
    with sandboxes(learn=str(learned), cwd=str(tmp_path)):
        assert mod.dumps({"k": 1}) == '{"k": 1}'
    assert "json" in learned.read_text()
