"""A learning run with third-party families (issue 32, item 3): one family's broken
learning step (a rule that is not a string) costs its own rules only, and is said; a
family's single-value section is written as a scalar the next run reads back."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pysb_core.errors import SandboxError
from pysb_core.events import Event
from pysb_core.guardkit import hookimpl
from pysb_core.launch.pipeline import Session
from pysb_core.profile import load_policy
from pysb_core.profile.schema import SCALAR, ProfileSchema


class Mode:
    """A family with a single-value section: ``mode: strict``."""

    @hookimpl
    def pysb_add_profile_keys(self, schema: ProfileSchema) -> None:
        schema.add_section("mode", SCALAR)

    @hookimpl
    def pysb_learned(self, records, profile) -> None:
        profile.add("mode", None, "strict", "the mode the program asked for")


class Broken:
    """A family whose learning step hands a number where a rule is a string."""

    @hookimpl
    def pysb_learned(self, records, profile) -> None:
        profile.add("broken", None, 5)


def _finish(tmp_path: Path, *plugins: object) -> tuple[Path, str, SandboxError | None]:
    learned = tmp_path / "learned.yaml"
    (tmp_path / "app.py").write_text("pass\n")
    err = io.StringIO()
    session = Session.create(
        learn=str(learned),
        provider="subprocess",
        cwd=str(tmp_path),
        script=str(tmp_path / "app.py"),
        stderr=err,
        extra_plugins=plugins,
    )
    # what the run learned: a module the program imported (the imports family's rule)
    session.learned.append(Event("python", "imports", "learn", "json", data={}))
    session._spawned = True  # the program ran
    failure = None
    try:
        session.finish(0)
    except SandboxError as exc:
        failure = exc
    return learned, err.getvalue(), failure


def test_a_broken_learning_step_loses_only_its_own_rules_and_is_said(tmp_path: Path) -> None:
    pytest.importorskip("pysb_guards")
    learned, _, failure = _finish(tmp_path, Broken(), Mode())
    assert failure is not None and "while writing its learned rules" in str(failure)
    assert "a learned rule is a non-empty string, got 5" in str(failure)
    text = learned.read_text()
    assert "mode: strict" in text and "json" in text, text  # the other families' rules
    assert "broken" not in text


def test_a_single_value_section_is_learned_as_a_scalar_the_next_run_reads(
    tmp_path: Path,
) -> None:
    learned, _, failure = _finish(tmp_path, Mode())
    assert failure is None
    assert "mode: strict" in learned.read_text(), learned.read_text()
    schema = ProfileSchema()
    Mode().pysb_add_profile_keys(schema)
    policy = load_policy(str(learned), cwd=str(tmp_path), environ={}, schema=schema)
    assert policy.extra["mode"] == "strict"
