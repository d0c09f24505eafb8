"""``os.chdir`` works while other threads run, and cannot redirect a judged call (issue 28,
item 1).

The file guard judges a relative path against the working directory, then the kernel
looks it up against the working directory of *its* moment: another thread's ``chdir`` in
between made the path opened another than the path judged, so ``chdir`` was refused while
other threads ran -- and CPython's http server tests (``chdir`` in ``setUp`` with the
server thread alive) failed with 13 errors and never ended. Now a face judges and calls
with the absolute path, resolved once (the program still sees its own relative names: in
errors, ``f.name``, ``scandir`` entries), and a relative ``scandir`` holds a lock that
``chdir`` takes too. Real programs under ``pysb run`` (subprocess, landlock, bwrap; 3.11 to
3.13).
"""

from __future__ import annotations

import pytest

from pysb_core.testing import Project, require_provider

PROVIDERS = ["subprocess", "landlock", "bwrap"]

SEMANTICS = """\
import os
import threading

stop = threading.Event()
helper = threading.Thread(target=stop.wait, daemon=True)
helper.start()
os.chdir("work")
print("cwd", os.path.basename(os.getcwd()))
with open("sub/a.txt") as f:
    print("name", f.name, f.read().strip())
try:
    open("sub/missing.txt")
except FileNotFoundError as e:
    print("filename", e.filename)
try:
    os.rename("sub/missing", "sub/other")
except FileNotFoundError as e:
    print("rename", e.filename, e.filename2)
print("scandir", [e.path for e in os.scandir("sub")])
print("walk", list(os.walk("sub")))
with open("sub/new.txt", "w") as f:
    f.write("new")
print("listdir", sorted(os.listdir("sub")))
os.chdir("..")
print("back", os.path.basename(os.getcwd()))
stop.set()
helper.join()
"""

RACE = """\
import os
import threading
import time

one, two = os.path.abspath("rw/one"), os.path.abspath("rw/two")
stop = time.monotonic() + 2
errors = []


def flip():
    while time.monotonic() < stop:
        for d in (one, two):
            try:
                os.chdir(d)
            except OSError as e:
                errors.append(type(e).__name__)
                return


t = threading.Thread(target=flip, daemon=True)
t.start()
seen = set()
while time.monotonic() < stop:
    for attempt in (lambda: open("data.txt").read(), lambda: str(os.stat("data.txt").st_size)):
        try:
            seen.add(attempt())
        except OSError as e:
            seen.add(type(e).__name__)
t.join()
print("chdir errors", errors[:1])
print("seen", sorted(seen))
"""


@pytest.mark.parametrize("provider", PROVIDERS)
def test_chdir_with_threads_keeps_the_programs_names(
    project: Project, provider: str, pysb_python: str
) -> None:
    if provider != "subprocess":
        require_provider(provider)
    project.file("work/sub/a.txt", "hello\n")
    project.file("semantics.py", SEMANTICS)
    project.profile(
        "version: 1\nimports: [os, threading]\napi: {allow: [threads]}\n"
        "files: {expose-ro: [.], expose-rw: [./work]}\n"
    )
    res = project.run("run", "--provider", provider, "semantics.py", python=pysb_python)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    for line in (
        "cwd work",
        "name sub/a.txt hello",
        "filename sub/missing.txt",
        "rename sub/missing sub/other",
        "scandir ['sub/a.txt']",
        "walk [('sub', [], ['a.txt'])]",
        "listdir ['a.txt', 'new.txt']",
        "back project",
    ):
        assert line in out, (line, out)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_concurrent_chdir_never_redirects_a_judged_path(
    project: Project, provider: str, pysb_python: str
) -> None:
    """rw/two/data.txt is hidden (``ignore``); rw/one/data.txt is not. While a thread
    flips the working directory between the two, ``data.txt`` is judged and opened in the
    same directory: the hidden file's content (or size) never shows."""
    if provider != "subprocess":
        require_provider(provider)
    project.file("rw/one/data.txt", "one")
    project.file("rw/two/data.txt", "hidden two")
    project.file("race.py", RACE)
    project.profile(
        "version: 1\nimports: [os, threading, time]\napi: {allow: [threads]}\n"
        "files: {expose-rw: [./rw], ignore: [two/data.txt]}\n"
    )
    res = project.run("run", "--provider", provider, "race.py", python=pysb_python)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "chdir errors []" in out, out
    assert "hidden two" not in out and "'10'" not in out, out
    assert "'one'" in out, out
