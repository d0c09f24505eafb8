"""pysb_core.check_profile: a profile validated from Python exactly as a run validates it."""

from __future__ import annotations

from pathlib import Path

import pytest

import pysb_core
from pysb_core import ProfileError, check_profile


def test_a_valid_profile_compiles_to_its_policy(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "p.yaml").write_text(
        "version: 1\nprovider: bwrap\nfiles:\n  expose-ro: [./data]\n"
        "env:\n  TOKEN: ${TOKEN}\nlimits: {processes: 8}\n"
    )
    policy = check_profile("p.yaml", cwd=tmp_path, environ={"TOKEN": "t"})
    assert policy.provider == "bwrap"
    assert [e.path for e in policy.exposures if not e.implicit] == [str(tmp_path / "data")]
    assert policy.env["TOKEN"] == "t"
    assert policy.limits.processes == 8
    policy = check_profile(tmp_path / "p.yaml", provider="landlock", cwd=tmp_path)
    assert policy.provider == "landlock"


def test_every_problem_of_every_file_at_once_with_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "local.yaml").write_text("version: 1\nnetwork:\n  - allow tcp host 99999 out\n")
    (tmp_path / "p.yaml").write_text(
        "version: 1\ninclude: [local.yaml]\nfiels: {}\nlimits: {memory: lots}\n"
    )
    with pytest.raises(ProfileError) as caught:
        check_profile(tmp_path / "p.yaml")
    errors = caught.value.errors
    assert any(
        e.startswith(f"{tmp_path}/p.yaml:3:") and "did you mean 'files'" in e for e in errors
    )
    assert any(e.startswith(f"{tmp_path}/p.yaml:4:") and "memory" in e for e in errors)
    assert any(e.startswith(f"{tmp_path}/local.yaml:3:") and "99999" in e for e in errors)


def test_the_installed_guard_families_validate_their_sections(tmp_path: Path) -> None:
    """The api section's targets are checked by pysb-guards (pysb_add_profile_keys), as
    in a run: a typo must not pass on the way to a sandbox started elsewhere."""
    pytest.importorskip("pysb_guards")
    (tmp_path / "p.yaml").write_text("version: 1\napi:\n  allow: [os.sytem]\n")
    with pytest.raises(ProfileError) as caught:
        check_profile(tmp_path / "p.yaml")
    assert any(e.startswith(f"{tmp_path}/p.yaml:3:") for e in caught.value.errors), caught.value


def test_a_profile_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="does not exist"):
        check_profile(tmp_path / "nosuch.yaml")
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ProfileError, match="is a directory, not a profile file"):
        check_profile(tmp_path / "dir.yaml")


def test_it_is_a_public_name() -> None:
    assert "check_profile" in pysb_core.__all__
    assert pysb_core.check_profile is check_profile
