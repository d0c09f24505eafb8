"""The read-only root made before firejail starts (root only): its pure parts, and that a
launch with it keeps the view firejail's options describe."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pysb_firejail import mountns, netns

from pysb_core.testing import Project, require_provider, run_pysb


def test_usable_only_as_root_without_a_writable_root() -> None:
    assert mountns.usable(as_root=True, root_writable=False) == os.path.isdir("/run/firejail")
    assert not mountns.usable(as_root=False, root_writable=False)
    assert not mountns.usable(as_root=True, root_writable=True)


def test_remount_keeps_nosuid_nodev_noexec_and_no_atime_flags() -> None:
    base = mountns.MS_REMOUNT | mountns.MS_BIND | mountns.MS_RDONLY
    assert mountns.remount_flags(0) == base
    assert mountns.remount_flags(0x2 | 0x4 | 0x8) == base | 0x2 | 0x4 | 0x8
    assert mountns.remount_flags(0x400 | 0x1000) == base  # noatime, relatime: kept as is


@pytest.mark.skipif(os.getuid() != 0, reason="only a root pysb makes the mount namespace")
def test_the_step_makes_the_root_read_only_in_its_namespace_only() -> None:
    """In a child: the root mount read-only (its own namespace), /run/firejail writable when
    asked; the host's root stays writable and gains no mount."""
    before = Path("/proc/self/mountinfo").read_text()
    step = mountns.read_only_root(bind_firejail_run=mountns.firejail_run_on_root())
    unshare = netns.unshare_function(mountns.CLONE_NEWNS)
    code = (
        "import os\n"
        "print(bool(os.statvfs('/').f_flag & 1))\n"
        "print(not os.statvfs('/run/firejail').f_flag & 1)\n"
    )
    out = subprocess.run(
        ["python3", "-c", code],
        preexec_fn=lambda: (unshare(), step()),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["True", "True"]
    assert not os.statvfs("/").f_flag & 1
    assert Path("/proc/self/mountinfo").read_text() == before


def test_view_with_the_read_only_root(project: Project) -> None:
    """Through pysb (as root: with the read-only root), with the project in /tmp: a
    writable exposure is writable (on the host), a read-only one, the system and / are
    not, the private /tmp is."""
    require_provider("firejail")
    scratch = project.root / "scratch"
    scratch.mkdir()
    ro = project.root / "ro"
    ro.mkdir()
    project.profile(f"version: 1\nfiles:\n  expose-rw: [{scratch}]\n  expose-ro: [{ro}]\n")
    code = (
        "import os\n"
        "def w(p):\n"
        "    try:\n"
        "        open(p, 'w').write('x'); return 'ok'\n"
        "    except OSError as e:\n"
        "        return e.strerror\n"
        f"print(w({str(scratch / 'f')!r}))\n"
        f"print(w({str(ro / 'f')!r}))\n"
        "print(w('/tmp/f'))\n"
        "print(w('/usr/f'))\n"
        "print(w('/f'))\n"
    )
    res = run_pysb(
        "run", "--provider", "firejail", "--no-python-guards", "-c", code, cwd=project.root
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:5] == [
        "ok",
        "Read-only file system",
        "ok",  # the private /tmp
        "Read-only file system",
        # A normal user's root mount is not remounted (argv.build_argv, section 5): / is
        # root's own directory, which the user cannot write to.
        "Read-only file system" if os.getuid() == 0 else "Permission denied",
    ], res.stdout
    assert (scratch / "f").read_text() == "x"
    assert not (ro / "f").exists()
