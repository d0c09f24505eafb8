"""The descriptors of a wrapper's command line, for the command ``pysb run`` starts ahead.

A provider that starts a tool of its own (bwrap) hands it descriptors: copies of host files
in memory files, directories opened without following links, a pipe holding its seccomp
filter, a pipe it reports its progress on. Their numbers are on the tool's command line, and
they differ from run to run, so a command started ahead cannot be compared with the launch's
by its text alone. The provider says what each one holds (``LaunchSpec.ahead``, kit 1.7);
here the command line becomes *items* -- its words, with each descriptor's number replaced by
what it holds -- which is what the prestart entry remembers and what the launch compares,
together with what the descriptors really hold on both sides (a copy's bytes, a directory's
device and inode), read at the comparison.

Kinds (``LaunchSpec.ahead``'s values):

- ``("copy", HOST_PATH)``: a memory file holding the host file's bytes (made anew from the
  host file when started ahead; the launch compares the bytes of both);
- ``("dir", PATH)``: an ``O_PATH`` descriptor of the directory, every component opened
  without following a link (compared by device and inode: a directory swapped since is
  another one);
- ``("bytes", DATA)``: a pipe's read end that yields ``DATA`` and then end of file;
- ``("report", READ_FD)``: a pipe's write end whose read end ``READ_FD`` an ``on_started``
  hook reads: the launch moves the read end of the command started ahead onto ``READ_FD``
  (``dup2``), so the hook reads what that command's tool reports.

Imports nothing beyond ``os`` until a descriptor is made: ``pysb run`` loads it before the
rest of pysb.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # imported by `pysb run` before the rest of pysb: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    Item = str | tuple[str, Any]

#: The kinds of descriptor a command started ahead may hold.
KINDS = frozenset({"copy", "dir", "bytes", "report"})
#: At most this many words before the interpreter's own command line.
MAX_ITEMS = 4096
#: The largest host file a ``copy`` holds (bwrap's provider binds larger ones instead).
MAX_COPY = 1 << 20
#: The most a ``bytes`` pipe holds: it is filled before the start, so it must fit a pipe.
MAX_BYTES = 60_000


def valid_items(items: object) -> bool:
    """Whether ``items`` (read from an entry: data) is a prefix this module can start."""
    if type(items) is not tuple or len(items) > MAX_ITEMS:
        return False
    for item in items:
        if type(item) is str:
            if "\0" in item:
                return False
            continue
        if type(item) is not tuple or len(item) != 2 or item[0] not in KINDS:
            return False
        kind, value = item
        if kind in ("copy", "dir"):
            if type(value) is not str or not value.startswith("/") or "\0" in value:
                return False
        elif kind == "bytes":
            if type(value) is not bytes or len(value) > MAX_BYTES:
                return False
        elif value is not None:  # report: nothing of the last run's is kept
            return False
    return True


class Started:
    """The descriptors made for a command started ahead: its words, what to compare, the
    descriptors it was given (closed once it started) and the report ends pysb keeps."""

    def __init__(self) -> None:
        self.argv: list[str] = []
        #: one per descriptor, in command-line order: ("copy", bytes), ("dir", (dev, ino)),
        #: ("bytes", None), ("report", read end)
        self.checks: list[tuple[str, Any]] = []
        self.child_fds: list[int] = []

    def close_child_fds(self) -> None:
        for fd in self.child_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.child_fds = []

    def close_reports(self) -> None:
        for kind, value in self.checks:
            if kind == "report" and value is not None:
                try:
                    os.close(value)
                except OSError:
                    pass
        self.checks = [(k, None if k == "report" else v) for k, v in self.checks]

    def close(self) -> None:
        self.close_child_fds()
        self.close_reports()


def start(items: Sequence[Item]) -> Started:
    """Make the descriptors ``items`` name, and the words to run with them. Raises
    ``OSError`` (nothing left open) when one cannot be made as the last run made it."""
    made = Started()
    try:
        for item in items:
            if type(item) is str:
                made.argv.append(item)
                continue
            kind, value = item
            if kind == "copy":
                with open(value, "rb") as f:
                    data = f.read(MAX_COPY + 1)
                if len(data) > MAX_COPY:
                    raise OSError(f"{value} is larger than a copy holds")
                fd = os.memfd_create("pysb-ahead", os.MFD_CLOEXEC)
                made.child_fds.append(fd)
                write_all(fd, data)
                os.lseek(fd, 0, os.SEEK_SET)
                made.checks.append(("copy", data))
            elif kind == "dir":
                from pysb_core.linux.nofollow import open_dir_nofollow

                fd = open_dir_nofollow(value)
                made.child_fds.append(fd)
                st = os.fstat(fd)
                made.checks.append(("dir", (st.st_dev, st.st_ino)))
            elif kind == "bytes":
                fd, write_end = os.pipe()
                made.child_fds.append(fd)
                try:
                    write_all(write_end, value)  # at most MAX_BYTES: the pipe holds it
                finally:
                    os.close(write_end)
                made.checks.append(("bytes", None))
            else:
                read_end, fd = os.pipe()
                made.checks.append(("report", read_end))
                made.child_fds.append(fd)
            made.argv.append(str(fd))
    except BaseException:
        made.close()
        raise
    return made


def describe(
    argv: Sequence[str], ahead: Mapping[int, tuple[str, Any]], tail: int
) -> tuple[list[Item], list[int]] | str:
    """The items of ``argv`` without its last ``tail`` words (the interpreter's own command
    line), and the descriptor behind each ``(kind, value)`` item, in order; or why this
    command cannot be remembered or compared. Each descriptor of ``ahead`` must be named
    exactly once (a number that is also a word of the tool's own would be ambiguous)."""
    numbers = {str(fd): fd for fd in ahead}
    items: list[Item] = []
    fds: list[int] = []
    for word in argv[: len(argv) - tail]:
        fd = numbers.get(word)
        if fd is None:
            items.append(word)
            continue
        if fd in fds:
            return "a descriptor named twice"
        kind, value = ahead[fd]
        if kind not in KINDS:
            return f"a descriptor of an unknown kind ({kind!r})"
        items.append((kind, None if kind == "report" else value))
        fds.append(fd)
    if len(fds) != len(ahead):
        return "a descriptor the command line does not name"
    if not valid_items(tuple(items)):
        return "a command line too long or a descriptor too large to remember"
    return items, fds


def differs(
    started: Started, ahead: Mapping[int, tuple[str, Any]], fds: Sequence[int]
) -> str | None:
    """What the launch's descriptors ``fds`` (in command-line order, as :func:`describe`
    returned them) hold that the command started ahead was not given; None when each holds
    the same: a copy's bytes, a directory's identity (``bytes`` items are compared as items)."""
    if len(fds) != len(started.checks):
        return "other descriptors"
    for fd, (kind, expected) in zip(fds, started.checks, strict=True):
        if kind == "copy":
            if os.pread(fd, MAX_COPY + 1, 0) != expected:
                return f"a copy of {ahead[fd][1]} that changed"
        elif kind == "dir":
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != expected:
                return f"the directory {ahead[fd][1]} is another one"
    return None


def take_reports(
    started: Started, ahead: Mapping[int, tuple[str, Any]], fds: Sequence[int]
) -> list[tuple[int, int]]:
    """Move the read end of each report pipe of the command started ahead onto the launch's
    own read end's number (the number its ``on_started`` hook reads); returns what undoes it
    (:func:`give_back`) should the command started ahead not be taken after all."""
    saved: list[tuple[int, int]] = []
    try:
        for fd, (kind, read_end) in zip(fds, started.checks, strict=True):
            if kind != "report":
                continue
            target = ahead[fd][1]
            saved.append((target, os.dup(target)))
            os.dup2(read_end, target, inheritable=False)
    except BaseException:
        give_back(saved)
        raise
    return saved


def give_back(saved: Sequence[tuple[int, int]]) -> None:
    """Undo :func:`take_reports`: the launch's own read ends back on their numbers."""
    for target, copy in reversed(saved):
        os.dup2(copy, target, inheritable=False)
        os.close(copy)


def forget(saved: Sequence[tuple[int, int]]) -> None:
    """The launch's own read ends, no longer needed once the command started ahead is taken."""
    for _target, copy in saved:
        os.close(copy)


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` onto ``fd`` (a pipe may take less than one ``write``)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
