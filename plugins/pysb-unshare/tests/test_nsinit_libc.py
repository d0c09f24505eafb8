"""nsinit's libc calls go through ``_ctypes``, not the ``ctypes`` package (~2.5 ms of every
unshare start without network rules), and pass their arguments as ``ctypes`` would.

Run in a fresh ``python -I -S`` as nsinit itself runs (``unshare`` execs it so); the calls
made here are harmless on the host (getters, a buffer the kernel fills). The calls that
change the namespaces (mount, mount_setattr, pivot_root, capset) are exercised by every
real unshare run: test_sandbox.py, test_cli.py and the last test below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pysb_unshare
import pytest

pytestmark = [pytest.mark.provider("unshare")]

NSINIT_DIR = str(Path(pysb_unshare.__file__).parent)

PROBE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import nsinit
nsinit.load_libc()
lib = nsinit._libc
out = {"ctypes": "ctypes" in sys.modules}
out["dumpable"] = lib.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE: 1
out["no_new_privs"] = lib.prctl(39, 0, 0, 0, 0)  # PR_GET_NO_NEW_PRIVS: 0 here
out["getpid"] = lib.syscall(39) == os.getpid()  # SYS_getpid (x86_64)
buf = nsinit._buffer(bytes(4096))
n = lib.syscall(79, buf, 4096)  # SYS_getcwd fills the buffer through its address
out["cwd"] = bytes(buf)[: n - 1].decode() if n > 0 else None
out["bad"] = lib.prctl(-1, 0, 0, 0, 0)
out["errno"] = nsinit._get_errno()
try:
    nsinit._check(lib.prctl(-1, 0, 0, 0, 0), "prctl(-1)")
except nsinit.SetupError as exc:
    out["message"] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probe's syscall numbers")
def test_libc_through_ctypes_c_module(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROBE, NSINIT_DIR],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ctypes"] is False  # the package stayed out
    assert out["dumpable"] == 1
    assert out["no_new_privs"] == 0
    assert out["getpid"] is True
    assert out["cwd"] == os.path.realpath(tmp_path)
    assert out["bad"] == -1 and out["errno"] == 22  # EINVAL, read back through errno
    assert out["message"] == "prctl(-1): Invalid argument"


def test_a_real_run_drops_every_capability(project) -> None:
    """The namespace-changing calls on the real path: the program runs with no capability
    at all, no_new_privs, a read-only root (mount_setattr) and the sandbox's host name."""
    from pysb_core.testing import require_provider

    require_provider("unshare")
    project.file(".pysb.yaml", "version: 1\nlearn: false\nimports: ['*']\n")
    code = (
        "import json, os\n"
        "status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines()"
        " if l.startswith(('Cap', 'NoNewPrivs')))\n"
        "root = [l.split()[5] for l in open('/proc/self/mountinfo') if l.split()[4] == '/']\n"
        "print(json.dumps({'status': status, 'root': root, 'host': os.uname().nodename}))\n"
    )
    proc = project.run(
        "run", "--profile", ".pysb.yaml", "--provider", "unshare", "--no-python-guards", "-c", code
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(out["status"][cap], 16) == 0, (cap, out["status"])
    assert out["status"]["NoNewPrivs"].strip() == "1"
    assert out["root"] and out["root"][-1].startswith("ro,")
    assert out["host"] == "sandbox"
