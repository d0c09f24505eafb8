"""Partial mode stays Python under every provider (issue 17, item 4): exceptions arrive
with their attributes, printed lines arrive whole, and a worker that exits with a status
is reported with that status."""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest

from pysb_core import SandboxError, sandboxes
from pysb_core.testing import BASE_ENV, EVERY_PROVIDER, require_provider
from pysb_core.testing.partial import profile_text, write_module

PROVIDERS = EVERY_PROVIDER

FUNCTIONS = """
import json, os, subprocess, sys, threading
from pysb_core import sandbox


class Refused(Exception):
    def __init__(self, message, *, code):
        super().__init__(message)
        self.code = code


@sandbox
def bad_json():
    return json.loads('{"a": 1,\\n "b": }')


@sandbox
def missing(path):
    return open(path).read()


@sandbox
def failing_command():
    raise subprocess.CalledProcessError(3, ["tool", "--flag"], output=b"partial", stderr=b"bad")


@sandbox
def keyword_only():
    raise Refused("no", code=42)


@sandbox
def chatter(threads, lines):
    def talk(n):
        for i in range(lines):
            print(f"call {n} line {i} " + "x" * 40)
    workers = [threading.Thread(target=talk, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return True


@sandbox
def leave(status):
    sys.stdout.flush()
    os._exit(status)
"""


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    if request.param != "subprocess":
        require_provider(request.param)
    return request.param


@pytest.fixture
def setup(tmp_path: Path, provider: str):
    project = tmp_path / "project"
    project.mkdir()
    mod = write_module(project, FUNCTIONS)
    profile = project / ".pysb.yaml"
    profile.write_text(profile_text(provider, project))
    kwargs = {"profile": str(profile), "cwd": str(project), "start_timeout": 180.0}
    return mod, project, kwargs


def test_exceptions_keep_their_attributes(setup) -> None:
    mod, project, kwargs = setup
    with sandboxes(**kwargs):
        with pytest.raises(json.JSONDecodeError) as decode:
            mod.bad_json()
        e = decode.value
        assert (e.msg, e.pos, e.lineno, e.colno) == ("Expecting value", 15, 2, 7), vars(e)
        assert e.doc == '{"a": 1,\n "b": }'
        assert str(e) == "Expecting value: line 2 column 7 (char 15)"
        missing = str(project / "nope.txt")
        with pytest.raises(FileNotFoundError) as fnf:
            mod.missing(missing)
        assert (fnf.value.errno, fnf.value.filename) == (errno.ENOENT, missing)
        with pytest.raises(subprocess.CalledProcessError) as cpe:
            mod.failing_command()
        c = cpe.value
        assert (c.returncode, c.cmd) == (3, ["tool", "--flag"])
        assert (c.output, c.stderr) == (b"partial", b"bad")
        with pytest.raises(Exception) as user:
            mod.keyword_only()
        u = user.value
        assert type(u).__name__ == "Refused", repr(u)
        assert str(u) == "no" and getattr(u, "code", None) == 42, vars(u)


def test_printed_lines_never_interleave(setup, capfd) -> None:
    mod, _, kwargs = setup
    with sandboxes(**kwargs):
        assert mod.chatter(8, 30) is True
    out = capfd.readouterr().out
    lines = [line for line in out.splitlines() if line]
    expected = {f"call {n} line {i} " + "x" * 40 for n in range(8) for i in range(30)}
    assert set(lines) == expected, sorted(set(lines) - expected)[:5]
    assert len(lines) == len(expected)


def test_an_exit_status_is_reported_as_such(setup) -> None:
    mod, _, kwargs = setup
    with sandboxes(**kwargs), pytest.raises(SandboxError) as exited:
        mod.leave(3)
    message = str(exited.value)
    assert "status 3" in message, message
    assert "SIGKILL" not in message and "signal" not in message, message


CALLER = """\
import json, sys, traceback
import {module}
from pysb_core import sandboxes

with sandboxes(profile=".pysb.yaml", start_timeout=180.0):
    try:
        {module}.missing({path!r})
    except OSError as exc:
        frames = [(f.filename, f.name) for f in traceback.extract_tb(exc.__traceback__)]
        print(json.dumps([type(exc).__name__, exc.errno, exc.filename, frames]))
"""


@pytest.mark.parametrize("provider", ["subprocess", "landlock", "bwrap"])
def test_a_refusal_reaches_the_caller_without_the_clients_frames(
    tmp_path: Path, provider: str, pysb_python: str
) -> None:
    """The caller's traceback goes from its own line to the decorated function's wrapper
    and on to the sandbox's frames, as for any decorator: the client's own entries (its
    call, the decoding of the answer: ``_on_frame``) were in it; the refusal keeps its
    errno and file name (on 3.11 to 3.13)."""
    if provider != "subprocess":
        require_provider(provider)
    project = tmp_path / "project"
    project.mkdir()
    (project / "refusing.py").write_text(FUNCTIONS)
    (project / ".pysb.yaml").write_text(profile_text(provider, project))
    secret = str(tmp_path / "secret.txt")
    (project / "caller.py").write_text(CALLER.format(module="refusing", path=secret))
    done = subprocess.run(
        [pysb_python, "caller.py"],
        cwd=project,
        env=BASE_ENV,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    name, number, filename, frames = json.loads(done.stdout.splitlines()[-1])
    # under bwrap the path is simply not in the sandbox: the kernel's own ENOENT
    assert name in ("FileDeniedError", "FileNotFoundError"), name
    assert (number, filename) == (errno.ENOENT, secret)
    import pysb_core.remote.api

    assert [tuple(f) for f in frames] == [
        (str(project / "caller.py"), "<module>"),
        (pysb_core.remote.api.__file__, "wrapper"),
        # The child's frame, named so that the host never opens the path (issue 26 #2).
        (f"<sandbox: {project / 'refusing.py'}>", "missing"),
    ], frames
