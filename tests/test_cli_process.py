"""The ``pysb run`` process: collector paused during start-up, quick exit only when safe."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from pysb_core.testing import BASE_ENV, pysb_command, trust_profile

# Run in a fresh interpreter: the test runner itself registers atexit callbacks.
DECIDE = """
import atexit, sys, threading, types
from pysb_core.builtin.subprocess_provider import SubprocessProvider
from pysb_core.cli.run import quick_exit_safe
from pysb_core.launch.plugins import LoadedPlugin
from pysb_core.provider import Provider, ProviderStatus

OWN = [
    LoadedPlugin("dns", "builtin", "pysb_core.builtin.dns", "pysb-core", ""),
    LoadedPlugin("files", "guard", "pysb_guards.files.hooks", "pysb-guards", "0.1.0"),
]
THIRD = LoadedPlugin("corp-dns", "plugin", "corp_dns", "corp-dns", "1.0")

class ThirdPartyProvider(Provider):
    name = "thirdparty"
    def probe(self):
        return ProviderStatus.ok()
    def prepare(self, plan):
        raise NotImplementedError

def safe(plugins=OWN, provider=None):
    session = types.SimpleNamespace(plugins=plugins, provider=provider or SubprocessProvider())
    return quick_exit_safe(session)

out = {"own": safe(), "third-party plugin": safe([*OWN, THIRD]),
       "third-party provider": safe(provider=ThirdPartyProvider())}
stop = threading.Event()
worker = threading.Thread(target=stop.wait)
worker.start()
out["non-daemon thread"] = safe()
stop.set(); worker.join()
stop.clear()
daemon = threading.Thread(target=stop.wait, daemon=True)
daemon.start()
out["daemon thread"] = safe()
stop.set(); daemon.join()
atexit.register(print)
out["atexit callback"] = safe()
atexit.unregister(print)
print(out)
"""


def test_quick_exit_only_when_nothing_needs_finalization() -> None:
    r = subprocess.run(
        [sys.executable, "-c", DECIDE], capture_output=True, text=True, timeout=60, check=True
    )
    assert ast.literal_eval(r.stdout) == {
        "own": True,
        "third-party plugin": False,
        "third-party provider": False,
        "non-daemon thread": False,
        "daemon thread": True,  # daemon threads do not delay an exit
        "atexit callback": False,
    }


def test_exit_status_and_output_survive_the_quick_exit(tmp_path: Path) -> None:
    (tmp_path / ".pysb.yaml").write_text("version: 1\nimports: [sys]\n")
    trust_profile(tmp_path / ".pysb.yaml")
    big = "print('x' * 200000); import sys; sys.stderr.write('done\\n'); sys.exit(7)"
    r = subprocess.run(
        [*pysb_command(), "run", "--verbose", "-c", big],
        cwd=tmp_path,
        env=BASE_ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 7, r.stderr
    assert r.stdout == "x" * 200000 + "\n"
    assert "chosen by 'auto'" in r.stderr and r.stderr.endswith("done\n")
