"""Partial mode end to end, with real worker processes (subprocess provider).

Each test writes the sandboxed functions into a fresh importable module (they must be
found by ``module:qualname`` in the worker) and a profile into its temporary directory.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import stat
import sys
import tempfile
import threading
import traceback
from pathlib import Path

import pytest

import pysb_core
from pysb_core import (
    RestrictedResultError,
    SandboxBaseExceptionError,
    SandboxError,
    SandboxProtocolError,
    SandboxTimeoutError,
    is_in_sandbox,
    sandbox,
    sandboxes,
)
from pysb_core.testing import trust_profile
from pysb_core.testing.partial import profile_text, wait_for_file, write_module

FUNCTIONS = """
import asyncio, os, sys, time
from pysb_core import sandbox, is_in_sandbox

@sandbox
def double(x):
    return x * 2

@sandbox
def whoami():
    return os.getpid(), is_in_sandbox()

@sandbox
def talk(tag, n):
    for i in range(n):
        print(f"{tag} out {i}")
        print(f"{tag} err {i}", file=sys.stderr)
        time.sleep(0.001)
    return tag

@sandbox
def fail():
    helper_that_raises()

def helper_that_raises():
    raise KeyError("missing-key")

@sandbox
def exit_like_a_script(code):
    sys.exit(code)

@sandbox
def echo(value):
    return value

@sandbox
def sleep_then(seconds, value):
    time.sleep(seconds)
    return value

@sandbox(timeout=0.5)
def too_slow():
    time.sleep(60)

class Point:
    def __init__(self, x):
        self.x = x

@sandbox
def point(x):
    return Point(x)

class Gadget:
    def __reduce__(self):
        return (os.system, ("touch " + os.environ.get("MARKER_PATH", "/nonexistent/x"),))

@sandbox
def hostile(marker):
    class G:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    return [1, G()]

@sandbox
def forge_huge_frame():
    # the header of a 1 TiB result, on every socket and pipe it can write: the answer
    # pipe among them (the started pipe's copy is junk the host must survive too)
    import stat, struct
    for fd in range(3, 256):
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
                os.write(fd, struct.pack("<QQB", 1 << 40, 1, 14))
        except OSError:
            pass
    time.sleep(30)

@sandbox
async def adouble(x):
    await asyncio.sleep(0.01)
    print("async says", x)
    return x * 2

@sandbox
def note_start_then_sleep(path, seconds, value):
    with open(path, "w") as f:
        f.write("started")
    time.sleep(seconds)
    return value

history = {}

@sandbox
def record(tag, i):
    history.setdefault(tag, []).append(i)

@sandbox
def recorded(tag):
    return history.get(tag, [])

@sandbox(timeout=0.5)
async def atoo_slow():
    await asyncio.sleep(60)

calls = []

def init():
    calls.append("init")
    print("init ran")

@sandbox
def init_calls():
    return list(calls)

def not_decorated(x):
    return x + 1
"""


@pytest.fixture
def mod(tmp_path: Path):
    return write_module(tmp_path, FUNCTIONS)


@pytest.fixture
def box(tmp_path: Path):
    """Keyword arguments for a subprocess-provider sandbox rooted in tmp_path."""
    profile = tmp_path / ".pysb.yaml"
    profile.write_text(profile_text("subprocess", tmp_path, tmp_path))
    return {"profile": str(profile), "cwd": str(tmp_path)}


def test_call_runs_in_a_separate_sandboxed_process(mod, box):
    with sandboxes(**box) as s:
        pid, inside = mod.whoami()
        assert mod.double(21) == 42
        assert pid == s.pid and pid != os.getpid()
        assert inside is True
    assert not is_in_sandbox()


def test_calling_without_a_sandbox_says_how_to_start_one(mod):
    with pytest.raises(SandboxError, match=r"with pysb_core\.sandboxes\(\)"):
        mod.double(1)


def test_public_names_are_reexported():
    assert pysb_core.sandbox is sandbox and pysb_core.sandboxes is sandboxes
    assert callable(pysb_core.run) and pysb_core.is_in_sandbox() is False


def test_output_streams_per_call_in_order(mod, box, capsys):
    with sandboxes(**box):
        assert mod.talk("a", 3) == "a"
    out, err = capsys.readouterr()
    assert out.splitlines() == ["a out 0", "a out 1", "a out 2"]
    assert err.splitlines() == ["a err 0", "a err 1", "a err 2"]


def test_output_of_concurrent_calls_is_not_mixed_into_other_callers(mod, box):
    """Each thread redirects its own writes: a call's output reaches only its caller."""
    seen: dict[str, list[str]] = {}

    class PerThread:
        def write(self, text):
            seen.setdefault(threading.current_thread().name, []).append(text)

        def flush(self):
            pass

    old = sys.stdout
    sys.stdout = PerThread()
    try:
        with sandboxes(**box):

            def run(tag):
                threading.current_thread().name = tag
                return mod.talk(tag, 20)

            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                assert sorted(pool.map(run, ["t0", "t1", "t2", "t3"])) == ["t0", "t1", "t2", "t3"]
    finally:
        sys.stdout = old
    for tag in ("t0", "t1", "t2", "t3"):
        lines = "".join(seen[tag]).splitlines()
        assert lines == [f"{tag} out {i}" for i in range(20)]


def test_exception_keeps_its_class_and_the_child_frames(mod, box):
    with sandboxes(**box), pytest.raises(KeyError) as info:
        mod.fail()
    assert info.value.args == ("missing-key",)
    text = "".join(traceback.format_exception(info.value))
    assert "helper_that_raises" in text and mod.__file__ in text
    assert 'raise KeyError("missing-key")' in text


def test_system_exit_becomes_sandbox_base_exception_and_the_worker_keeps_serving(mod, box):
    with sandboxes(**box) as s:
        pid = s.pid
        with pytest.raises(SandboxBaseExceptionError, match="SystemExit: 3") as info:
            mod.exit_like_a_script(3)
        assert info.value.code == 3
        assert mod.double(2) == 4
        assert s.pid == pid


def test_plain_data_results_come_back(mod, box):
    import datetime
    import decimal

    value = {"when": datetime.date(2020, 1, 2), "n": decimal.Decimal("2.5"), "t": (1, [b"x"])}
    with sandboxes(**box):
        assert mod.echo(value) == value


def test_results_of_other_classes_are_refused_unless_allowed(mod, box):
    with sandboxes(**box), pytest.raises(RestrictedResultError, match="Point"):
        mod.point(1)
    with sandboxes(**box, result_classes=[mod.Point]):
        p = mod.point(7)
        assert type(p) is mod.Point and p.x == 7


def test_a_hostile_result_never_executes_in_the_host(mod, box, tmp_path):
    marker = tmp_path / "host-was-owned"
    with sandboxes(**box), pytest.raises(RestrictedResultError, match="system"):
        mod.hostile(str(marker))
    assert not marker.exists()


def test_a_worker_that_forges_a_huge_frame_is_killed_not_obeyed(mod, box):
    with sandboxes(**box) as s:
        pid = s.pid
        with pytest.raises(SandboxProtocolError, match="breaking the protocol"):
            mod.forge_huge_frame()
        assert mod.double(4) == 8  # restarted
        assert s.pid != pid


def test_large_arguments_and_results(mod, box):
    blob = os.urandom(10 << 20)
    with sandboxes(**box):
        assert mod.echo(blob) == blob


def test_functions_the_worker_cannot_find_get_a_clear_error(mod, box):
    def nested():
        return 1

    with sandboxes(**box):
        with pytest.raises(SandboxError, match="top level of a module"):
            sandbox(nested)()
        with pytest.raises(SandboxError, match="lambda"):
            sandbox(lambda: 1)()
        replaced = sandbox(mod.not_decorated)  # the module still names the undecorated one
        assert replaced(1) == 2


def test_functions_of_a_main_script_get_a_clear_error(tmp_path, box):
    script = tmp_path / "script.py"
    script.write_text(
        "from pysb_core import sandbox, sandboxes, SandboxError\n"
        "@sandbox\n"
        "def f():\n    return 1\n"
        f"with sandboxes(profile={box['profile']!r}):\n"
        "    try:\n        f()\n"
        "    except SandboxError as e:\n        print('ERROR:', e)\n"
    )
    import subprocess

    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert "ERROR:" in out.stdout, out.stderr
    assert "__main__" in out.stdout and "Move the function into a module" in out.stdout


def test_generators_are_refused_at_decoration():
    with pytest.raises(TypeError, match="generator"):

        @sandbox
        def gen():
            yield 1


def test_async_calls_share_the_worker_with_sync_calls(mod, box, capsys):
    async def main():
        async with sandboxes(**box) as s:
            results = await asyncio.gather(*(mod.adouble(i) for i in range(10)))
            sync_pid = await asyncio.to_thread(lambda: mod.whoami()[0])
            return results, sync_pid, s.pid

    results, sync_pid, pid = asyncio.run(main())
    assert results == [i * 2 for i in range(10)]
    assert sync_pid == pid
    out = capsys.readouterr().out
    assert sorted(out.splitlines()) == sorted(f"async says {i}" for i in range(10))


def test_run_is_asyncio_run_with_a_sandbox(mod, box):
    async def main():
        return await mod.adouble(5), mod.double(4)

    assert pysb_core.run(main(), **box) == (10, 8)
    with pytest.raises(ValueError, match="coroutine"):
        pysb_core.run(main, **box)


def test_sandboxes_nest_and_only_the_last_exit_stops_the_worker(mod, box):
    with sandboxes(**box) as outer:
        pid = outer.pid
        with sandboxes(**box) as inner:
            assert inner.pid == pid
            assert mod.double(1) == 2
        assert outer.pid == pid and mod.double(2) == 4
    assert outer.pid is None
    with pytest.raises(SandboxError):
        mod.double(3)


def test_thread_pool_callers_are_served_concurrently(mod, box):
    with sandboxes(**box), concurrent.futures.ThreadPoolExecutor(8) as pool:
        # 8 calls of 0.5 s each: served one after the other this would take 4 s
        futures = [pool.submit(mod.sleep_then, 0.5, i) for i in range(8)]
        done, _ = concurrent.futures.wait(futures, timeout=3.5)
        assert len(done) == 8
        assert sorted(f.result() for f in futures) == list(range(8))


def test_init_fn_runs_in_the_worker_before_calls(mod, box, capfd):
    with sandboxes(**box, init_fn=mod.init):
        assert mod.init_calls() == ["init"]
    assert mod.calls == []  # never in the host
    assert "init ran" in capfd.readouterr().out


def test_failing_init_fn_fails_the_start(mod, box, tmp_path):
    bad = write_module(tmp_path, "def init():\n    raise RuntimeError('no init for you')\n")
    with pytest.raises(SandboxError, match="no init for you"), sandboxes(**box, init_fn=bad.init):
        pass


def test_timeout_kills_and_restarts_the_worker(mod, box):
    with sandboxes(**box) as s:
        pid = s.pid
        with pytest.raises(SandboxTimeoutError) as info:
            mod.too_slow()
        assert isinstance(info.value, TimeoutError)
        assert mod.double(5) == 10
        assert s.pid != pid


def test_leaving_leaves_no_process_socket_or_temp_file(mod, box, tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    fds_before = set(os.listdir("/proc/self/fd"))
    threads_before = {t.ident for t in threading.enumerate()}
    with sandboxes(**box) as s:
        pid = s.pid
        assert mod.double(1) == 2
    assert not Path(f"/proc/{pid}").exists()
    leaked = {
        fd: os.readlink(f"/proc/self/fd/{fd}")
        for fd in set(os.listdir("/proc/self/fd")) - fds_before
        if os.path.exists(f"/proc/self/fd/{fd}")
    }
    assert leaked == {}
    assert list(scratch.iterdir()) == []
    lingering = [t for t in threading.enumerate() if t.ident not in threads_before and t.is_alive()]
    assert [t.name for t in lingering if t.name.startswith("pysb")] == []


def test_each_caller_s_calls_arrive_in_order_while_callers_run_concurrently(mod, box):
    tags = [f"caller{i}" for i in range(8)]

    def caller(tag):
        for i in range(200):
            mod.record(tag, i)
        return tag

    with sandboxes(**box):
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            assert sorted(pool.map(caller, tags)) == sorted(tags)
        for tag in tags:
            assert mod.recorded(tag) == list(range(200))


def test_async_timeout_kills_and_restarts_the_worker(mod, box):
    async def main():
        async with sandboxes(**box) as s:
            pid = s.pid
            with pytest.raises(SandboxTimeoutError):
                await mod.atoo_slow()
            return await mod.adouble(2), pid, s.pid

    value, before, after = asyncio.run(main())
    assert value == 4 and before != after


def test_leaving_waits_for_running_calls(mod, box, tmp_path):
    started = tmp_path / "started"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with sandboxes(**box):
            future = pool.submit(mod.note_start_then_sleep, str(started), 0.5, "finished")
            wait_for_file(started)
        # the exit waited for the running call instead of killing it
        assert future.done() and future.result() == "finished"
    with pytest.raises(SandboxError):
        mod.double(1)  # and new calls are refused


def _fd_links(pid: int) -> set[str]:
    links = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            links.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return links


def _inodes_in(table: str) -> set[str]:
    try:
        lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
    except OSError:
        return set()
    return {line.split()[9] for line in lines if len(line.split()) > 9}  # the inode


def test_the_transport_is_two_inherited_pipes_not_a_port(mod, box):
    """The channel is the very pipes the host made (the worker holds their other ends),
    and the worker holds no TCP or UDP socket: no port, no token (issue 30 item 2)."""
    from pysb_core.remote import api

    with sandboxes(**box) as s:
        assert mod.double(1) == 2
        conn = api._client._conn
        assert conn.sock is None, "a local worker's channel is two pipes, not a socketpair"
        ours = {f"pipe:[{os.fstat(fd).st_ino}]" for fd in conn.fds}
        assert len(ours) == 2 and all(stat.S_ISFIFO(os.fstat(fd).st_mode) for fd in conn.fds)
        links = _fd_links(s.pid)
        assert ours <= links, "the worker holds the other ends of both pipes"
        sockets = {link[8:-1] for link in links if link.startswith("socket:[")}
        for table in ("tcp", "tcp6", "udp", "udp6"):
            assert not sockets & _inodes_in(table)


def test_the_default_profile_is_the_one_of_the_calling_module_s_package(tmp_path, monkeypatch):
    import importlib
    import uuid

    pkg = f"pkg_{uuid.uuid4().hex[:8]}"
    root = tmp_path / pkg
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / ".pysb.yaml").write_text(
        profile_text("subprocess", tmp_path) + "env: {WHICH_PROFILE: the-package-one}\n"
    )
    trust_profile(root / ".pysb.yaml")  # found, not named: used once trusted (pysb trust)
    (root / "tools.py").write_text(
        "import os\nfrom pysb_core import sandbox, sandboxes\n"
        "@sandbox\ndef which():\n    return os.environ.get('WHICH_PROFILE')\n"
        "def main():\n    with sandboxes():\n        return which()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)  # no ./.pysb.yaml here: only the package's can be found
    monkeypatch.delenv("PYSB_PROFILE", raising=False)
    tools = importlib.import_module(f"{pkg}.tools")
    assert tools.main() == "the-package-one"


def test_an_untrusted_package_profile_is_refused(tmp_path, monkeypatch):
    """A profile found next to the calling module was not named: it is used only once the
    user trusted it (a sandboxed function that could write the package may have put it
    there), and only as it was trusted."""
    import importlib
    import uuid

    from pysb_core.errors import UntrustedProfileError

    pkg = f"pkg_{uuid.uuid4().hex[:8]}"
    root = tmp_path / pkg
    root.mkdir()
    (root / "__init__.py").write_text("")
    profile = root / ".pysb.yaml"
    profile.write_text(profile_text("subprocess", tmp_path))
    (root / "tools.py").write_text(
        "from pysb_core import sandbox, sandboxes\n"
        "@sandbox\ndef one():\n    return 1\n"
        "def main():\n    with sandboxes():\n        return one()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYSB_PROFILE", raising=False)
    tools = importlib.import_module(f"{pkg}.tools")
    with pytest.raises(UntrustedProfileError, match="pysb trust"):
        tools.main()
    trust_profile(profile)
    assert tools.main() == 1
    profile.write_text(profile.read_text() + "unenv: [PATH]\n")
    with pytest.raises(UntrustedProfileError, match="changed since it was trusted"):
        tools.main()
