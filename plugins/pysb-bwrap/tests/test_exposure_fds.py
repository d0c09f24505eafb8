"""bwrap binds the profile's exposures from descriptors opened without following links
(issue 22): a directory of an exposure's path swapped for a link after the profile was
read cannot redirect the mount."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pysb_bwrap.argv import build_argv
from pysb_bwrap.hostfs import HostLayout
from pysb_bwrap.netsession import Resources
from pysb_bwrap.provider import _binds_fds, _exposure_fds

from pysb_core.errors import SandboxError
from pysb_core.linux.nofollow import open_dir_nofollow
from pysb_core.plan import LaunchPlan
from pysb_core.policy import Exposure, Policy
from pysb_core.testing import BASE_ENV, pysb_command, require_provider

PY = "/opt/py/bin/python3.11"


def plan(*exposures: Exposure) -> LaunchPlan:
    return LaunchPlan(
        policy=Policy(exposures=exposures, provider="bwrap"),
        python=PY,
        argv=[PY, "-c", "pass"],
        env={},
        cwd="/p",
        exposures=list(exposures),
    )


def test_exposures_with_a_descriptor_are_bound_from_it() -> None:
    ro = Exposure("/p", "/p", False, "x.yaml:1")
    rw = Exposure("/p/out", "/p/out", True, "x.yaml:2")
    renamed = Exposure("/d", "/data", False, "x.yaml:3")
    argv = build_argv(
        plan(ro, rw, renamed), HostLayout(), exposure_fds={"/p": 7, "/p/out": 8, "/d": 9}
    ).argv
    text = " ".join(argv)
    assert "--ro-bind-fd 7 /p " in text
    assert "--bind-fd 8 /p/out " in text
    assert "--ro-bind-fd 9 /data " in text
    assert "--ro-bind /p /p" not in text and "--bind /p/out" not in text


def test_bind_fd_needs_bwrap_0_8() -> None:
    assert _binds_fds("0.8.0") and _binds_fds("0.11.1")
    assert not _binds_fds("0.7.0") and not _binds_fds("") and not _binds_fds("x")


def test_open_dir_nofollow_refuses_a_link_on_the_way(tmp_path: Path) -> None:
    (tmp_path / "real" / "inputs").mkdir(parents=True)
    os.symlink("real", tmp_path / "data")
    fd = open_dir_nofollow(str(tmp_path / "real" / "inputs"))
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "real" / "inputs"))
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        open_dir_nofollow(str(tmp_path / "data" / "inputs"))


def test_a_link_swapped_in_is_refused_at_launch(tmp_path: Path) -> None:
    """The descriptors are what bwrap mounts; a path that now crosses a link is an error."""
    (tmp_path / "rw" / "data" / "inputs").mkdir(parents=True)
    exp = Exposure(str(tmp_path / "rw" / "data" / "inputs"), "/in", False, "x.yaml:4")
    os.rename(tmp_path / "rw" / "data", tmp_path / "rw" / "old")
    os.symlink(str(tmp_path / "rw" / "old"), tmp_path / "rw" / "data")
    res = Resources()
    try:
        with pytest.raises(SandboxError, match="replaced by a symbolic link"):
            _exposure_fds(plan(exp), res, [])
    finally:
        res.release()


def test_a_run_binds_its_exposures_by_descriptor(tmp_path: Path) -> None:
    """End to end: the exposures work when bound from descriptors (read and write)."""
    require_provider("bwrap")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text("hello\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "p.yaml").write_text(
        'version: 1\nimports: ["*"]\nfiles:\n  expose-ro: ["./data:/data"]\n  expose-rw: [./out]\n'
    )
    code = "print(open('/data/x.txt').read().strip()); open('out/y.txt', 'w').write('ok')"
    run = ["run", "--profile", "p.yaml", "--provider", "bwrap", "--no-python-guards"]
    r = subprocess.run(
        [*pysb_command(), *run, "-c", code],
        cwd=tmp_path,
        env=BASE_ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "hello\n"
    assert (tmp_path / "out" / "y.txt").read_text() == "ok"


def test_the_launch_command_uses_descriptors(tmp_path: Path) -> None:
    """What ``prepare`` builds on this machine: every profile exposure from an fd that
    the child inherits (pysb check shows paths: it opens nothing)."""
    require_provider("bwrap")
    from pysb_bwrap.provider import BwrapProvider

    (tmp_path / "data").mkdir()
    exp = Exposure(str(tmp_path / "data"), "/data", False, "x.yaml:1")
    p = plan(exp)
    p.argv = ["/usr/bin/python3", "-c", "pass"]
    res, child_fds = Resources(), []
    try:
        cmd = BwrapProvider({})._command(p, empty_file="/nonexistent", res=res, child_fds=child_fds)
        i = cmd.argv.index("--ro-bind-fd")
        fd = int(cmd.argv[i + 1])
        assert cmd.argv[i + 2] == "/data" and fd in child_fds
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "data"))
    finally:
        res.release()


def test_each_descriptor_is_used_once_bwrap_closes_it_after_binding() -> None:
    """The same directory exposed twice (the profile's and a partial-mode caller's module
    directory): bwrap closes a descriptor once bound, so a second use failed the start
    with "Can't stat fd N"."""
    twice = Exposure("/p", "/p", False, "x.yaml:1")
    again = Exposure("/p", "/p", False, "<caller>")
    elsewhere = Exposure("/p", "/data", False, "x.yaml:2")
    argv = build_argv(plan(twice, again, elsewhere), HostLayout(), exposure_fds={"/p": 7}).argv
    text = " ".join(argv)
    assert text.count("--ro-bind-fd 7 ") == 1
    assert text.count(" /p /p") == 0 and "--ro-bind-fd 7 /p " in text
    assert "--ro-bind /p /data" in text  # a second place: by path (no descriptor left)
