"""The unshare provider mounts the profile's exposures from descriptors opened without
following links (issue 22): a directory of an exposure's path swapped for a link after
the profile was read cannot redirect the bind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pysb_unshare import nsinit
from pysb_unshare.rootfs import build_ops

from pysb_core.plan import LaunchPlan
from pysb_core.policy import Exposure, Policy


def test_profile_exposures_are_exact_binds_implicit_ones_are_not(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "lib").mkdir()
    mine = Exposure(str(tmp_path / "data"), "/data", False, ".pysb.yaml:3")
    implicit = Exposure(str(tmp_path / "lib"), str(tmp_path / "lib"), False, "<python>", True)
    plan = LaunchPlan(
        policy=Policy(exposures=(mine,)), python="/usr/bin/python3", argv=[], env={}, cwd="/"
    )
    plan.exposures = [implicit, mine]
    binds = {op[1]: op for op in build_ops(plan, hosts="", resolv="") if op[0] == "bind"}
    assert binds[str(tmp_path / "data")] == ["bind", str(tmp_path / "data"), "/data", True, True]
    assert binds[str(tmp_path / "lib")][4] is False


def test_open_exact_refuses_a_link_on_the_way(tmp_path: Path) -> None:
    (tmp_path / "real" / "inputs").mkdir(parents=True)
    os.symlink("real", tmp_path / "data")
    fd = nsinit.open_exact(str(tmp_path / "real" / "inputs"))
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "real" / "inputs"))
    finally:
        os.close(fd)
    with pytest.raises(nsinit.SetupError, match="no longer the one the profile named"):
        nsinit.open_exact(str(tmp_path / "data" / "inputs"))
