"""How the provider waits for ``unshare`` before joining its namespaces from the host."""

from __future__ import annotations

import subprocess

import pytest
from pysb_unshare import _wait_for_namespaces

from pysb_core.errors import SandboxError


def test_returns_once_the_namespaces_and_id_maps_exist():
    from pysb_core.testing import require_provider

    require_provider("unshare")
    proc = subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--net", "--", "sleep", "5"],
        stdin=subprocess.DEVNULL,
    )
    try:
        _wait_for_namespaces(proc)
        with open(f"/proc/{proc.pid}/uid_map") as f:
            assert f.read().split()[0] == "0"
        assert proc.poll() is None
    finally:
        proc.kill()  # our own child, by PID
        proc.wait()


def test_a_command_that_never_makes_them_is_an_error():
    proc = subprocess.Popen(["/bin/sh", "-c", "exit 3"])
    with pytest.raises(SandboxError, match=r"exited \(3\) before making its namespaces"):
        _wait_for_namespaces(proc)
    proc.wait()


def test_the_same_namespaces_are_not_taken_for_new_ones():
    """A process still in pysb's own network namespace is never mistaken for the sandbox."""
    proc = subprocess.Popen(["/bin/sh", "-c", "sleep 0.3; exit 4"])
    with pytest.raises(SandboxError, match=r"exited \(4\)"):
        _wait_for_namespaces(proc)
    proc.wait()
