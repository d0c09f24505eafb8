"""Where the host forbids what a provider needs, pysb says so, with the fix, and refuses.

A real restriction, made by the test itself: a user namespace whose
``user.max_user_namespaces`` is 0 (the limit is per namespace, so the host's stays as it
is). pysb runs inside it (as that namespace's uid 0): bwrap and unshare cannot make their
namespaces; ``pysb providers`` lists them unavailable with the reason and the sysctl to
change, and ``pysb run`` exits 125 with the same words before anything starts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, pysb_command


def _in_limited_namespace(args: list[str], cwd: Path, state: Path) -> subprocess.CompletedProcess:
    unshare = shutil.which("unshare", path="/usr/bin:/bin")
    if unshare is None:
        pytest.skip("unshare (util-linux) is not installed")
    script = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
    env = {**BASE_ENV, "XDG_STATE_HOME": str(state), "XDG_CACHE_HOME": str(state)}
    return subprocess.run(
        [unshare, "--user", "--map-root-user", "sh", "-c", script, "sh", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("provider", ["bwrap", "unshare"])
def test_no_user_namespaces_is_unavailable_with_the_fix(tmp_path: Path, provider: str) -> None:
    (tmp_path / "p.yaml").write_text("version: 1\nimports: [sys]\n")
    state = tmp_path / "state"  # no probe result remembered from an unrestricted run
    listed = _in_limited_namespace([*pysb_command(), "providers", "--json"], tmp_path, state)
    if listed.returncode != 0 and "max_user_namespaces" in listed.stderr:
        pytest.skip("cannot restrict user namespaces here")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    entries = data if isinstance(data, list) else data["providers"]
    entry = next(e for e in entries if e["name"] == provider)
    assert entry["available"] is False
    assert "namespace" in entry["reason"]
    assert "user.max_user_namespaces" in entry["fix"]
    run = _in_limited_namespace(
        [*pysb_command(), "run", "--profile", "p.yaml", "--provider", provider, "-c", "print(1)"],
        tmp_path,
        state,
    )
    assert run.returncode == 125, run.stderr
    assert run.stdout == ""
    assert "user.max_user_namespaces" in run.stderr  # the same fix
