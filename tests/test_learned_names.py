"""A learned name is data (SPEC §4 "Learning writes...", issue 26 item 4).

What a learning run records comes from the sandbox: a directory name holding ``${X:-..}``
was written as ``expose-rw: ["./${X:-..}"]`` and the next run read it as ``./..`` (read
and write of the parent). Every recorded name must come back exactly: learn -> write ->
load gives the recorded path and no more, whatever ``${``, YAML, comment, glob or
non-UTF-8 bytes it holds; and a record no access could have made (a host ``*``, an
environment name that is a glob) is dropped, not written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pysb_guards.env import hooks as env_hooks
from pysb_guards.files import hooks as files_hooks
from pysb_guards.imports import hooks as imports_hooks
from pysb_guards.network import hooks as network_hooks

from pysb_core.events import Event
from pysb_core.profile import load_policy
from pysb_core.profile.learning import LearnedProfile
from pysb_core.profile.writer import merge_learned
from pysb_core.testing import Project

HOSTILE = [
    "${X:-..}",
    "${",
    "$${HOME}",
    "${HOME}",
    "#",
    "a #b",
    "line\nbreak",
    "carriage\rreturn",
    "'single'",
    '"double"',
    "key: value",
    "- leading dash",
    "-x",
    "*",
    "*_API_KEY",
    "[a]",
    "{a}",
    "~",
    "~root",
    "a:b",
    "&anchor",
    "!tag",
    "%percent",
    "@at",
    "`tick`",
    "null",
    "~",
    "yes",
    "1e3",
    "tab\there",
    "next\x85line",
    "sep\u2028ar",
    "\ufeffbom",
    "bell\x07",
    "é😀",
    os.fsdecode(b"non-utf8-\xff\xfe"),
    "x" * 255,
]


def _learn_write_load(root: Path, name: str) -> tuple[set[tuple[str, bool]], str]:
    """A write into ``root/name/`` learned, written, loaded: ``({(path, rw)}, text)``."""
    directory = root / name
    directory.mkdir()
    record = Event(
        layer="python",
        guard="files",
        action="learn",
        target=os.path.join(str(directory), "f.txt"),
        detail="open",
        data={"write": True, "exists": True},
    )
    profile = LearnedProfile(cwd=str(root), environ={"HOME": "/nonexistent", "X": "Q"})
    files_hooks.pysb_learned(records=[record], profile=profile)
    path = root / ".pysb.yaml"
    merge_learned(str(path), profile)
    policy = load_policy(
        str(path), cwd=str(root), environ={"HOME": "/nonexistent", "X": "Q"}, learn=False
    )
    got = {(e.path, e.writable) for e in policy.exposures if not e.implicit}
    text = path.read_text(encoding="utf-8")
    path.unlink()
    return got, text


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pysb-names-"))
    try:
        yield Path(os.path.realpath(path))
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("name", HOSTILE, ids=repr)
def test_a_hostile_directory_name_loads_back_as_itself(root: Path, name: str) -> None:
    got, text = _learn_write_load(root, name)
    assert got == {(os.path.join(str(root), name), True)}, text


def _file_names() -> st.SearchStrategy[str]:
    """Any one path component: bytes but ``/`` and NUL, at most NAME_MAX, not . or ..."""
    return (
        st.binary(min_size=1, max_size=255)
        .map(lambda b: b.replace(b"/", b"_").replace(b"\0", b"_"))
        .filter(lambda b: b not in (b".", b".."))
        .map(os.fsdecode)
    )


_SPECIAL = st.sampled_from(["${", "}", "$", ":-", "#", " ", "\n", '"', "'", ":", "-", "*", "["])
_NAMES = st.one_of(
    _file_names(),
    st.lists(st.one_of(_SPECIAL, st.text(min_size=1, max_size=4)), min_size=1, max_size=8)
    .map("".join)
    .map(lambda s: s.replace("/", "_").replace("\0", "_"))
    .filter(lambda s: s not in (".", "..") and len(os.fsencode(s)) <= 255),
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=_NAMES)
def test_every_recorded_name_loads_back_exactly(root: Path, name: str) -> None:
    try:
        got, text = _learn_write_load(root, name)
    finally:
        shutil.rmtree(root / name, ignore_errors=True)
    assert got == {(os.path.join(str(root), name), True)}, text


def test_a_learning_run_of_a_directory_named_like_a_variable_grants_only_it(
    project: Project,
) -> None:
    """The report's case, end to end: the learned profile must not grant the parent."""
    program = (
        "import os\nos.makedirs('${X:-..}', exist_ok=True)\nopen('${X:-..}/f', 'w').write('x')\n"
    )
    project.file("prog.py", program)
    r = project.run("run", "--learn", "prog.py")
    assert r.returncode == 0, r.stderr
    text = (project.root / ".pysb.yaml").read_text()
    policy = load_policy(
        str(project.root / ".pysb.yaml"), cwd=str(project.root), environ=dict(os.environ)
    )
    writable = {e.path for e in policy.exposures if e.writable and not e.implicit}
    assert writable == {os.path.realpath(project.root / "${X:-..}")}, text
    # enforced: writing into the parent (what `./..` would have allowed) is refused
    project.file("escape.py", "open('${X:-..}/../../planted', 'w').write('x')\n")
    r = project.run("run", "--provider", "subprocess", "escape.py")
    assert r.returncode != 0
    assert not (project.root.parent / "planted").exists()


def _event(guard: str, target: str, **data: object) -> Event:
    return Event(layer="python", guard=guard, action="learn", target=target, data=data)


def _inet(**fields: object) -> tuple[Event, object]:
    """A network record: one good connection with ``fields`` replaced."""
    data = {"kind": "inet", "proto": "tcp", "host": "127.0.0.1", "port": 80, "direction": "out"}
    return _event("network", "x", **{**data, **fields}), network_hooks


HOSTILE_RECORDS = [
    _inet(host="*"),
    _inet(host="0.0.0.0/0"),
    _inet(host="a.example 1-65535 any"),
    _inet(host="127.1"),
    _inet(host="fe80::1%lo"),
    _inet(proto="any"),
    _inet(port="1-65535"),
    _inet(port=True),
    _inet(port=70000),
    _inet(direction="any"),
    (_event("network", "x", kind="unix", path="/tmp/a\0b"), network_hooks),
    (_event("env", "*_API_KEY"), env_hooks),
    (_event("env", "A}${B"), env_hooks),
    (_event("env", "é"), env_hooks),
    (_event("imports", "*"), imports_hooks),
    (_event("imports", "json, os"), imports_hooks),
    (_event("files", "/etc/a\0b", write=True), files_hooks),
    (_event("files", "relative/path", write=True), files_hooks),
    (_event("files", "/" + "x" * 5000, write=True), files_hooks),
]


@pytest.mark.parametrize(
    ("record", "family"),
    HOSTILE_RECORDS,
    ids=[
        f"{r.guard}:{(r.target if r.target != 'x' else r.data)!r:.40}" for r, _ in HOSTILE_RECORDS
    ],
)
def test_a_record_no_access_makes_is_dropped_and_said(
    tmp_path: Path, record: Event, family: object
) -> None:
    profile = LearnedProfile(
        cwd=str(tmp_path), environ={"HOME": "/nonexistent", "*_API_KEY": "1", "é": "1"}
    )
    family.pysb_learned(records=[record], profile=profile)  # type: ignore[attr-defined]
    assert list(profile) == []
    assert profile.dropped, "a dropped record is said in the summary"
    summary = merge_learned(str(tmp_path / ".pysb.yaml"), profile)
    assert "were not written" in summary
    assert all(ch.isprintable() or ch == "\n" for ch in summary)


def test_a_record_that_is_not_an_event_is_refused_by_its_shape() -> None:
    for line in (
        b"[]",
        b'{"layer":"python","guard":"files","action":"learn","target":["/a"]}',
        b'{"layer":"python","guard":"files","action":"learn","target":"/a","data":[]}',
        b'{"layer":"python","guard":"files","action":"learn","target":"/a","pid":"1"}',
        b'{"layer":"python","guard":"files","action":"grant","target":"/a"}',
        b'{"layer":"python","guard":"files","action":"learn","target":"' + b"a" * 9000 + b'"}',
        b'{"layer":"python","guard":"files","action":"learn","target":"/a",'
        b'"data":{"x":[[[[[1]]]]]}}',
    ):
        with pytest.raises((ValueError, TypeError)):
            Event.from_json(line)
    ok = Event.from_json(
        b'{"layer":"python","guard":"files","action":"learn","target":"/a\\udcff",'
        b'"data":{"write":true}}'
    )
    assert ok.target == "/a\udcff"


def test_the_summary_shows_a_hostile_name_escaped(root: Path) -> None:
    """The summary goes to the user's terminal: no escape sequence of the name reaches it."""
    name = "evil\x1b]0;owned\x07\x1b[2J"
    (root / name).mkdir()
    profile = LearnedProfile(cwd=str(root), environ={"HOME": "/nonexistent"})
    files_hooks.pysb_learned(
        records=[_event("files", str(root / name / "f"), write=True, exists=True)],
        profile=profile,
    )
    summary = merge_learned(str(root / ".pysb.yaml"), profile)
    assert "\x1b" not in summary and "\\x1b" in summary
    assert yaml.safe_load((root / ".pysb.yaml").read_text())["files"]["expose-rw"] == ["./" + name]
