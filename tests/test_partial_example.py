"""The worked example of docs/partial-mode.md: an LLM agent's tools, confined by their own
profile, while the agent keeps its API key (examples/llm_tool)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pysb_core.testing import require_provider

AGENT = Path(__file__).resolve().parents[1] / "examples" / "llm_tool" / "agent.py"


def _guards_installed() -> bool:
    try:
        from pysb_core.launch.plugins import get_plugin_manager

        _, plugins = get_plugin_manager()
    except Exception:
        return False
    return {"imports", "files", "network", "api"} <= {p.name for p in plugins if p.kind == "guard"}


@pytest.mark.parametrize("provider", ["unshare", "bwrap", "landlock"])
def test_the_tools_are_contained_and_the_agent_keeps_its_key(provider: str, tmp_path: Path):
    require_provider(provider)
    if provider == "landlock" and not _guards_installed():
        pytest.skip("landlock filters ports, not hosts: the profile's host rule needs pysb-guards")
    key = "sk-test-" + "k" * 30
    env = {**os.environ, "PYSB_PROVIDER": provider, "OPENAI_API_KEY": key}
    env.pop("PYSB_PROFILE", None)
    out = subprocess.run(
        [sys.executable, str(AGENT)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "RESULT: contained" in out.stdout
    assert "-> 84.0" in out.stdout  # the honest calls worked
    assert "Weather in Lyon" in out.stdout
    assert key not in out.stdout  # the injected calls never got the key
    assert "audit server was contacted 0 time(s)" in out.stdout
    assert "API key still available to the agent: True" in out.stdout
