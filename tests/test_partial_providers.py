"""Partial mode under every provider available here: the worker runs inside the OS
sandbox (its view of files and environment is the profile's), and calls, output,
exceptions and async calls work the same as under the subprocess provider."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from pysb_core import sandboxes
from pysb_core.testing import require_provider
from pysb_core.testing.partial import profile_text, write_module

PROVIDERS = ["subprocess", "landlock", "bwrap", "unshare", "firejail", "qemu"]
OS_PROVIDERS = PROVIDERS[1:]

FUNCTIONS = """
import asyncio, os, sys
from pysb_core import sandbox

@sandbox
def add(a, b):
    print("adding", a, b)
    print("to stderr", file=sys.stderr)
    return a + b

@sandbox
def read(path):
    with open(path) as f:
        return f.read()

@sandbox
def getenv(name):
    return os.environ.get(name)

@sandbox
def fail(message):
    raise ValueError(message)

@sandbox(timeout=1)
def hang():
    import time
    time.sleep(120)

@sandbox
async def aadd(a, b):
    await asyncio.sleep(0)
    return a + b
"""


@pytest.fixture(params=PROVIDERS)
def provider(request) -> str:
    if request.param != "subprocess":
        require_provider(request.param)
    return request.param


@pytest.fixture
def setup(tmp_path: Path, provider: str):
    project = tmp_path / "project"
    project.mkdir()
    mod = write_module(project, FUNCTIONS)
    profile = project / ".pysb.yaml"
    profile.write_text(profile_text(provider, project))
    kwargs = {"profile": str(profile), "cwd": str(project), "start_timeout": 180.0}
    return mod, project, kwargs


def test_calls_output_and_exceptions(setup, capsys):
    mod, _, kwargs = setup
    with sandboxes(**kwargs):
        assert mod.add(2, 3) == 5
        with pytest.raises(ValueError, match="from the sandbox"):
            mod.fail("from the sandbox")
    out, err = capsys.readouterr()
    assert "adding 2 3" in out and "to stderr" in err


def test_async_calls(setup):
    mod, _, kwargs = setup

    async def main():
        async with sandboxes(**kwargs):
            return await asyncio.gather(mod.aadd(1, 2), mod.aadd(3, 4))

    assert asyncio.run(main()) == [3, 7]


def test_a_timeout_kills_the_worker_itself_and_restarts_it(setup, provider):
    from pysb_core import SandboxTimeoutError
    from pysb_core.testing.partial import worker_host_pid

    mod, _, kwargs = setup
    with sandboxes(**kwargs) as box:
        assert mod.add(1, 1) == 2
        # inside a VM the worker has no host PID: then the VM's own process must go
        worker = box.pid if provider == "qemu" else worker_host_pid(box.pid)
        with pytest.raises(SandboxTimeoutError):
            mod.hang()
        assert mod.add(2, 2) == 4  # a new worker answers
        assert _gone(worker), f"the timed-out worker {worker} is still running"


def _gone(pid: int, within: float = 20.0) -> bool:
    import time

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
            return True
        time.sleep(0.05)
    return False


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_host_environment_does_not_reach_the_worker(setup, monkeypatch):
    mod, _, kwargs = setup
    monkeypatch.setenv("PYSB_TEST_SECRET_API_KEY", "s3cret")
    with sandboxes(**kwargs):
        assert mod.getenv("PYSB_TEST_SECRET_API_KEY") is None
    assert os.environ["PYSB_TEST_SECRET_API_KEY"] == "s3cret"  # the host keeps its secrets


@pytest.mark.parametrize("os_provider", OS_PROVIDERS)
def test_files_outside_the_profile_are_out_of_reach(tmp_path: Path, os_provider: str):
    require_provider(os_provider)
    project = tmp_path / "project"
    project.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("host only")
    (project / "visible.txt").write_text("exposed")
    mod = write_module(project, FUNCTIONS)
    profile = project / ".pysb.yaml"
    profile.write_text(profile_text(os_provider, project))
    with sandboxes(profile=str(profile), cwd=str(project), start_timeout=180.0):
        assert mod.read(str(project / "visible.txt")) == "exposed"
        with pytest.raises(OSError):
            mod.read(str(secret))
    assert secret.read_text() == "host only"
