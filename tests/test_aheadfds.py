"""What a wrapper's descriptors hold, for the command ``pysb run`` starts ahead
(pysb_core.launch.aheadfds): made from an entry, described from a launch, compared.

Real files, directories and pipes throughout: the comparison is what keeps a command
started ahead from standing for a launch that would have given the sandbox something else
(a copy of a host file that changed since, a directory swapped for another).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pysb_core.launch import aheadfds
from pysb_core.linux.nofollow import open_dir_nofollow


def _memcopy(path: Path) -> int:
    fd = os.memfd_create("test", os.MFD_CLOEXEC)
    os.write(fd, path.read_bytes())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@pytest.fixture
def opened():
    fds: list[int] = []
    yield fds
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def test_what_is_started_holds_what_the_items_say(tmp_path, opened):
    copy = tmp_path / "hosts"
    copy.write_bytes(b"127.0.0.1 localhost\n")
    made = aheadfds.start(
        ("tool", "--file", ("copy", str(copy)), "--dir", ("dir", str(tmp_path)),
         "--bytes", ("bytes", b"filter"), "--status", ("report", None))
    )  # fmt: skip
    try:
        words = made.argv
        assert len(words) == 9
        assert words[:2] == ["tool", "--file"] and words[3] == "--dir" and words[5] == "--bytes"
        copy_fd, dir_fd, bytes_fd, status_w = (int(words[i]) for i in (2, 4, 6, 8))
        assert os.read(copy_fd, 100) == copy.read_bytes()
        assert os.fstat(dir_fd).st_ino == os.stat(tmp_path).st_ino
        assert os.read(bytes_fd, 100) == b"filter" and os.read(bytes_fd, 100) == b""
        os.write(status_w, b"reported")
        kind, status_r = made.checks[3]
        assert kind == "report" and os.read(status_r, 100) == b"reported"
        assert sorted(made.child_fds) == sorted([copy_fd, dir_fd, bytes_fd, status_w])
    finally:
        made.close()
    assert made.child_fds == []


def _launch(tmp_path: Path, opened: list[int]) -> tuple[list[str], dict[int, tuple]]:
    """A launch's own descriptors and command line, as bwrap's provider makes them."""
    copy = tmp_path / "hosts"
    copy_fd = _memcopy(copy)
    dir_fd = open_dir_nofollow(str(tmp_path / "exposed"))
    bytes_r, bytes_w = os.pipe()
    os.write(bytes_w, b"filter")
    os.close(bytes_w)
    status_r, status_w = os.pipe()
    opened += [copy_fd, dir_fd, bytes_r, status_r, status_w]
    argv = ["tool", "--file", str(copy_fd), "/etc/hosts", "--ro-bind-fd", str(dir_fd), "/x",
            "--seccomp", str(bytes_r), "--json-status-fd", str(status_w),
            "--", "python", "3"]  # fmt: skip
    ahead = {
        copy_fd: ("copy", str(copy)),
        dir_fd: ("dir", str(tmp_path / "exposed")),
        bytes_r: ("bytes", b"filter"),
        status_w: ("report", status_r),
    }
    return argv, ahead


@pytest.fixture
def host(tmp_path: Path) -> Path:
    (tmp_path / "hosts").write_bytes(b"127.0.0.1 localhost\n")
    (tmp_path / "exposed").mkdir()
    return tmp_path


def test_a_launch_is_described_and_its_twin_compares_equal(host, opened):
    argv, ahead = _launch(host, opened)
    described = aheadfds.describe(argv, ahead, tail=3)
    assert not isinstance(described, str), described
    items, fds = described
    assert items == ["tool", "--file", ("copy", str(host / "hosts")), "/etc/hosts",
                     "--ro-bind-fd", ("dir", str(host / "exposed")), "/x",
                     "--seccomp", ("bytes", b"filter"),
                     "--json-status-fd", ("report", None)]  # fmt: skip
    assert aheadfds.valid_items(tuple(items))
    made = aheadfds.start(tuple(items))
    try:
        assert aheadfds.differs(made, ahead, fds) is None
    finally:
        made.close()


def test_a_copy_that_changed_since_the_start_differs(host, opened):
    argv, ahead = _launch(host, opened)
    items, _fds = aheadfds.describe(argv, ahead, tail=3)
    made = aheadfds.start(tuple(items))  # started ahead: the file as it was then
    try:
        (host / "hosts").write_bytes(b"127.0.0.1 localhost\n10.0.0.1 other\n")
        argv2, ahead2 = _launch(host, opened)  # the launch: a copy of the file as it is now
        items2, fds2 = aheadfds.describe(argv2, ahead2, tail=3)
        assert items2 == items  # the words alone do not tell
        assert aheadfds.differs(made, ahead2, fds2) == f"a copy of {host / 'hosts'} that changed"
    finally:
        made.close()


def test_a_directory_swapped_since_the_start_differs(host, opened):
    argv, ahead = _launch(host, opened)
    items, _fds = aheadfds.describe(argv, ahead, tail=3)
    made = aheadfds.start(tuple(items))
    try:
        (host / "exposed").rename(host / "old")
        (host / "exposed").mkdir()  # the same path, another directory
        argv2, ahead2 = _launch(host, opened)
        _items2, fds2 = aheadfds.describe(argv2, ahead2, tail=3)
        assert aheadfds.differs(made, ahead2, fds2) == (
            f"the directory {host / 'exposed'} is another one"
        )
    finally:
        made.close()


def test_a_directory_turned_into_a_link_cannot_be_started(host):
    (host / "real").mkdir()
    (host / "exposed").rmdir()
    (host / "exposed").symlink_to(host / "real")
    with pytest.raises(OSError):
        aheadfds.start((("dir", str(host / "exposed")),))


def test_the_report_of_the_command_ahead_is_read_where_the_launch_reads_its_own(host, opened):
    argv, ahead = _launch(host, opened)
    items, fds = aheadfds.describe(argv, ahead, tail=3)
    made = aheadfds.start(tuple(items))
    try:
        status_w_ahead = int(made.argv[-1])
        (launch_status_r,) = [v[1] for v in ahead.values() if v[0] == "report"]
        saved = aheadfds.take_reports(made, ahead, fds)
        os.write(status_w_ahead, b"ahead")
        assert os.read(launch_status_r, 100) == b"ahead"  # the hook's number, the ahead's pipe
        aheadfds.give_back(saved)  # not taken after all: the launch's own pipe again
        (launch_status_w,) = [fd for fd, v in ahead.items() if v[0] == "report"]
        os.write(launch_status_w, b"own")
        assert os.read(launch_status_r, 100) == b"own"
    finally:
        made.close()


@pytest.mark.parametrize(
    ("argv", "ahead", "why"),
    [
        (["t", "5", "5", "py"], {5: ("bytes", b"")}, "a descriptor named twice"),
        (["t", "py"], {5: ("bytes", b"")}, "a descriptor the command line does not name"),
        (["t", "5", "py"], {5: ("exec", "/bin/sh")}, "a descriptor of an unknown kind ('exec')"),
        (["t", "5", "py"], {5: ("copy", "relative")}, "a command line too long"),
        (["t", "5", "py"], {5: ("bytes", b"x" * 70_000)}, "a command line too long"),
    ],
)
def test_what_cannot_be_described(argv, ahead, why):
    found = aheadfds.describe(argv, ahead, tail=1)
    assert isinstance(found, str) and found.startswith(why)


_word = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
_item = st.one_of(
    _word,
    st.tuples(st.sampled_from(["copy", "dir"]), _word),
    st.tuples(st.just("bytes"), st.binary(max_size=16)),
    st.tuples(st.just("report"), st.one_of(st.none(), st.integers(0, 9))),
    st.tuples(st.text(max_size=6), st.none()),
    st.lists(_word, max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.tuples(), st.lists(_item, max_size=6).map(tuple), st.lists(_item, max_size=4)))
def test_an_entry_prefix_is_valid_only_in_the_shape_describe_writes(items):
    """Whatever an entry holds, it is valid only when each word is a string without NUL and
    each descriptor one of the four kinds with an absolute path, bytes within the bound,
    or no value (a report): what describe() itself produces."""

    def ok(item) -> bool:
        if type(item) is str:
            return "\0" not in item
        if type(item) is not tuple or len(item) != 2:
            return False
        kind, value = item
        if kind in ("copy", "dir"):
            return type(value) is str and value.startswith("/") and "\0" not in value
        if kind == "bytes":
            return type(value) is bytes and len(value) <= aheadfds.MAX_BYTES
        return kind == "report" and value is None

    expected = type(items) is tuple and all(ok(i) for i in items)
    assert aheadfds.valid_items(items) is expected
