"""The profile's exposures are opened without following symbolic links when the Landlock
rules are added (issue 22): a directory swapped for a link after the profile was read
cannot redirect a rule. A real kernel call (landlock_create_ruleset, openat2)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pysb_core.testing import require_provider


def test_an_exact_path_with_a_link_in_it_is_refused(tmp_path: Path) -> None:
    require_provider("landlock")
    from pysb_landlock import ruleset as ll

    (tmp_path / "real" / "inputs").mkdir(parents=True)
    os.symlink("real", tmp_path / "data")
    rs = ll.Ruleset(ll.abi_version())
    try:
        assert rs.add_path(str(tmp_path / "real" / "inputs"), ll.FS_READ, no_symlinks=True)
        # the same directory, named through the link: followed only when asked to
        assert rs.add_path(str(tmp_path / "data" / "inputs"), ll.FS_READ)
        with pytest.raises(ll.LandlockError) as info:
            rs.add_path(str(tmp_path / "data" / "inputs"), ll.FS_READ, no_symlinks=True)
        assert info.value.errno == errno.ELOOP
        assert "replaced by a symbolic link" in str(info.value)
    finally:
        rs.close()


def test_the_compiled_rules_mark_the_profile_exposures_exact(tmp_path: Path) -> None:
    from pysb_landlock.compiler import compile_plan

    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import Exposure, Policy

    mine = Exposure(str(tmp_path), str(tmp_path), True, ".pysb.yaml:3")
    implicit = Exposure("/usr/lib", "/usr/lib", False, "<python>", True)
    policy = Policy(exposures=(mine,))
    plan = LaunchPlan(policy=policy, python="/usr/bin/python3", argv=[], env={}, cwd="/")
    plan.exposures = [implicit, mine]
    args = compile_plan(plan, 4).args()
    assert args["exact"] == [str(tmp_path)]
