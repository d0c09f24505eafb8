"""Partial mode under qemu: the worker runs in the VM, its channel is a forwarded socket."""

from __future__ import annotations

from pathlib import Path

import pytest
from pysb_qemu import assets

from pysb_core import sandboxes
from pysb_core.testing import require_provider
from pysb_core.testing.partial import profile_text, write_module

pytestmark = pytest.mark.slow

FUNCTIONS = """
import os, sys
from pysb_core import sandbox

@sandbox
def add(a, b):
    print("adding", a, b)
    return a + b

@sandbox
def kernel():
    return os.uname().release

@sandbox
def read(path):
    with open(path) as f:
        return f.read()

@sandbox
def fail(message):
    raise ValueError(message)
"""


def test_calls_run_in_the_vm(tmp_path: Path, capsys) -> None:
    require_provider("qemu")
    project = tmp_path / "project"
    project.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("host only")
    mod = write_module(project, FUNCTIONS)
    profile = project / ".pysb.yaml"
    profile.write_text(profile_text("qemu", project))
    with sandboxes(profile=str(profile), cwd=str(project)):
        assert mod.add(2, 3) == 5
        assert mod.kernel() == assets.find_kernel().version  # the guest's own kernel
        with pytest.raises(ValueError, match="from the VM"):
            mod.fail("from the VM")
        with pytest.raises(OSError):
            mod.read(str(secret))
    assert "adding 2 3" in capsys.readouterr().out
