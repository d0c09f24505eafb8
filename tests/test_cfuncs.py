"""pysb_core.linux.cfuncs: libc calls without the ctypes package."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

from pysb_core.linux import cfuncs

SYS_GETPID = {"x86_64": 39, "aarch64": 172}.get(os.uname().machine)


def test_a_call_returns_its_value_and_errno_is_kept() -> None:
    getppid = cfuncs.function("getppid")
    assert getppid() == os.getppid()
    unshare = cfuncs.function("unshare")
    assert unshare(0x7FFFFFFF) == -1
    assert cfuncs.get_errno() == errno.EINVAL
    stat_missing = cfuncs.function("access")
    assert stat_missing(b"/nonexistent/pysb", 0) == -1
    assert cfuncs.get_errno() == errno.ENOENT


def test_long_arguments_and_results() -> None:
    if SYS_GETPID is None:
        return
    syscall = cfuncs.function("syscall", cfuncs.Long)
    assert syscall(cfuncs.Long(SYS_GETPID)) == os.getpid()


def test_buffer_is_a_copy_at_its_address() -> None:
    keep, address = cfuncs.buffer(b"pysb\0tail")
    assert address and bytes(keep) == b"pysb\0tail"  # type: ignore[call-overload]
    strlen = cfuncs.function("strlen", cfuncs.Long)
    assert strlen(cfuncs.Pointer(address)) == 4


def test_it_does_not_import_ctypes() -> None:
    code = "import sys; from pysb_core.linux import cfuncs; print('ctypes' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
