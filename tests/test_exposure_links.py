"""Exposures are never resolved through a symbolic link a sandbox could have made
(pysb_core.profile.compile: ``resolve`` and the refusal of links inside read-write
exposures). The end-to-end attack is tests/security/test_redirected_exposure.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pysb_core.errors import ProfileError
from pysb_core.profile import CliRules, load_policy
from pysb_core.profile.compile import resolve


def policy(tmp_path: Path, text: str, cli: CliRules | None = None):
    (tmp_path / ".pysb.yaml").write_text("version: 1\nfiles:\n" + text)
    return load_policy(".pysb.yaml", cwd=str(tmp_path), environ={"HOME": str(tmp_path)}, cli=cli)


def test_resolve_agrees_with_realpath_and_lists_the_links(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    os.symlink("a/b", tmp_path / "rel")
    os.symlink(str(tmp_path / "rel"), tmp_path / "abs")
    os.symlink("../..", tmp_path / "a" / "b" / "up")
    for path in ("abs", "rel", "a/b/up", "a/b/up/a/b", "abs/nosuch/x"):
        full = str(tmp_path / path)
        real, _ = resolve(full)
        assert real == os.path.realpath(full), path
    _, links = resolve(str(tmp_path / "abs"))
    assert links == [(str(tmp_path / "abs"), str(tmp_path / "rel")), (str(tmp_path / "rel"), "a/b")]


def test_resolve_refuses_a_loop(tmp_path: Path) -> None:
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    with pytest.raises(OSError, match="level"):
        resolve(str(tmp_path / "loop1" / "x"))


def _planted(tmp_path: Path) -> None:
    """rw/data/inputs -> ../../.. : a link inside the read-write ./rw pointing above."""
    (tmp_path / "rw" / "data").mkdir(parents=True)
    os.symlink("../../..", tmp_path / "rw" / "data" / "inputs")


@pytest.mark.parametrize(
    "files, line, key",
    [
        ("  expose-ro: [., ./rw/data/inputs]\n  expose-rw: [./rw]\n", 3, "files.expose-ro"),
        ("  expose-rw: [./rw, ./rw/data/inputs]\n", 3, "files.expose-rw"),
        ('  expose-ro: ["./rw/data/inputs:/data"]\n  expose-rw: [./rw]\n', 3, "files.expose-ro"),
    ],
    ids=["read-only", "read-write", "renamed"],
)
def test_a_link_inside_a_read_write_exposure_is_refused(
    tmp_path: Path, files: str, line: int, key: str
) -> None:
    _planted(tmp_path)
    with pytest.raises(ProfileError) as info:
        policy(tmp_path, files)
    (message,) = info.value.errors
    assert message.startswith(f".pysb.yaml:{line}: {key}: './rw/data/inputs")
    assert f"symbolic link {tmp_path}/rw/data/inputs -> ../../.." in message
    assert f"read-write exposure {tmp_path}/rw (.pysb.yaml:" in message


def test_a_link_inside_a_read_write_exposure_given_on_the_command_line(tmp_path: Path) -> None:
    _planted(tmp_path)
    with pytest.raises(ProfileError, match=r"read-write exposure .*/rw \(<cli>\)"):
        policy(tmp_path, "  expose-ro: [./rw/data/inputs]\n", CliRules(expose_rw=["./rw"]))


def test_a_link_the_sandbox_cannot_write_is_followed(tmp_path: Path) -> None:
    """A link outside every read-write exposure (the user's own) resolves as before."""
    (tmp_path / "real" / "data").mkdir(parents=True)
    (tmp_path / "rw").mkdir()
    os.symlink("real/data", tmp_path / "data")
    p = policy(tmp_path, "  expose-ro: [./data]\n  expose-rw: [./rw]\n")
    assert {e.path for e in p.exposures} == {str(tmp_path / "real" / "data"), str(tmp_path / "rw")}


def test_a_read_write_exposure_that_is_itself_a_link_is_followed(tmp_path: Path) -> None:
    """The link ``out -> real-out`` lies in the project, not inside the exposure it names."""
    (tmp_path / "real-out").mkdir()
    os.symlink("real-out", tmp_path / "out")
    p = policy(tmp_path, "  expose-rw: [./out]\n")
    assert [e.path for e in p.exposures] == [str(tmp_path / "real-out")]


def test_a_link_inside_a_read_only_exposure_is_followed(tmp_path: Path) -> None:
    (tmp_path / "ro" / "real").mkdir(parents=True)
    os.symlink("real", tmp_path / "ro" / "link")
    p = policy(tmp_path, "  expose-ro: [./ro, ./ro/link]\n")
    assert sorted(e.path for e in p.exposures) == [
        str(tmp_path / "ro"),
        str(tmp_path / "ro" / "real"),
    ]


def test_a_link_swapped_in_after_the_profile_was_read_stops_the_start(tmp_path: Path) -> None:
    """Between reading the profile and starting a sandbox (a partial-mode restart can come
    much later), a running sandbox may swap a directory of an exposure's path for a link:
    every start checks again (the providers bind by path)."""
    from pysb_core.errors import SandboxError
    from pysb_core.profile.compile import verify_exposures

    (tmp_path / "rw" / "data" / "inputs").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    p = policy(tmp_path, "  expose-ro: [., ./rw/data/inputs]\n  expose-rw: [./rw]\n")
    verify_exposures(p.exposures)  # unchanged: fine
    os.rename(tmp_path / "rw" / "data", tmp_path / "rw" / "old")
    os.symlink(str(tmp_path / "elsewhere"), tmp_path / "rw" / "data")
    (tmp_path / "elsewhere" / "inputs").mkdir()
    with pytest.raises(SandboxError) as info:
        verify_exposures(p.exposures)
    assert str(info.value) == (
        f".pysb.yaml:3: the exposure {tmp_path}/rw/data/inputs now goes through the symbolic "
        f"link {tmp_path}/rw/data -> {tmp_path}/elsewhere, made after the profile was read: "
        "refusing to start"
    )
