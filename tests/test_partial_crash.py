"""Partial mode when the worker dies, under the subprocess provider and every OS provider
available here (the others are skipped, with the reason).

The worker is killed from the outside with SIGKILL by its own host PID (checked to be our
descendant first); executions are counted with a marker file to prove nothing runs twice.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from pysb_core import SandboxProtocolError, sandboxes
from pysb_core.testing import require_provider
from pysb_core.testing.partial import (
    is_descendant,
    profile_text,
    wait_for_file,
    worker_host_pid,
    write_module,
)

PROVIDERS = [
    "subprocess",
    "landlock",
    "bwrap",
    "unshare",
    "firejail",
    pytest.param("qemu", marks=pytest.mark.slow),  # each restart boots a VM
]

FUNCTIONS = """
import os, time
from pysb_core import sandbox

def _mark(path, pid_file):
    with open(path, "a") as f:
        f.write("run\\n")
    if pid_file:
        with open(pid_file, "w") as f:
            f.write(str(os.getpid()))

@sandbox
def mark_and_wait(path, pid_file, seconds):
    _mark(path, pid_file)
    time.sleep(seconds)
    return "finished"

@sandbox(retry_on_crash=True)
def mark_and_wait_retried(path, pid_file, seconds):
    with open(path, "a") as f:
        f.write("run\\n")
    with open(path) as f:
        first = f.read().count("run") == 1
    if first:
        with open(pid_file, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(seconds)
    return "finished"

@sandbox
async def amark_and_wait(path, pid_file, seconds):
    import asyncio
    _mark(path, pid_file)
    await asyncio.sleep(seconds)
    return "finished"

@sandbox
def mark(path):
    _mark(path, None)
    return "marked"

@sandbox
def ping():
    return "pong"

state = []

def init():
    state.append(os.getpid())

@sandbox
def init_state():
    return list(state)
"""


@pytest.fixture(params=PROVIDERS)
def provider(request) -> str:
    if request.param != "subprocess":
        require_provider(request.param)
    return request.param


@pytest.fixture
def env(tmp_path: Path, provider: str):
    rw = tmp_path / "rw"
    rw.mkdir()
    mod = write_module(tmp_path, FUNCTIONS)
    profile = tmp_path / ".pysb.yaml"
    profile.write_text(profile_text(provider, tmp_path, rw))
    kwargs = {"profile": str(profile), "cwd": str(tmp_path), "start_timeout": 180.0}
    return mod, rw, kwargs


def _kill_worker(box) -> int:
    """SIGKILL the worker by its own host PID, after checking it is our descendant.

    Under qemu the worker lives in a VM and has no host PID: the VM's process is killed.
    """
    pid = box.pid if box.provider_name == "qemu" else worker_host_pid(box.pid)
    assert pid != os.getpid() and pid > 1 and is_descendant(pid)
    os.kill(pid, signal.SIGKILL)
    return pid


def _wait_new_worker(box, old_launcher_pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while box.pid in (None, old_launcher_pid):
        assert time.monotonic() < deadline, "the worker was not restarted"
        time.sleep(0.01)


def test_a_call_running_when_the_worker_dies_fails_and_is_not_run_again(env):
    mod, rw, kwargs = env
    marker, pid_file = rw / "runs", rw / "pid"
    pool = concurrent.futures.ThreadPoolExecutor(1)
    with sandboxes(**kwargs, init_fn=mod.init) as box, pool:
        old = box.pid
        future = pool.submit(mod.mark_and_wait, str(marker), str(pid_file), 60)
        wait_for_file(pid_file)
        _kill_worker(box)
        with pytest.raises(SandboxProtocolError, match=r"SIGKILL.*not run again"):
            future.result(timeout=60)
        assert mod.ping() == "pong"  # restarted
        assert box.pid != old
        assert len(mod.init_state()) == 1  # init_fn ran again in the new worker
    assert marker.read_text().count("run") == 1


def _channel_links(box) -> tuple[Any, set[str], set[str] | None]:
    """The worker's channel as the host holds it, the ``pipe:[inode]`` links of the host's
    ends, and the worker's own fd links (its host PID, checked to be our descendant)."""
    from pysb_core.remote import api

    conn = api._client._conn
    ours = {f"pipe:[{os.fstat(fd).st_ino}]" for fd in conn.fds}
    pid = worker_host_pid(box.pid)
    assert is_descendant(pid)
    links: set[str] | None = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                links.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except FileNotFoundError:
                continue
    except PermissionError:
        # set-uid firejail run by a normal user: its sandboxed processes are not dumpable,
        # so their /proc/PID/fd is the kernel's to read, not ours
        assert os.geteuid() != 0
        links = None
    return conn, ours, links


@pytest.mark.parametrize("provider", PROVIDERS[:-1], indirect=True)
def test_a_local_worker_talks_over_two_pipes_and_their_end_is_its_death(env):
    """Issue 30 item 2: a local worker's channel is two pipes -- the worker holds the other
    ends of the host's very pipes, no socketpair -- and its death still reaches the host
    through them: a running call fails (EOF on the answer pipe), an idle worker's death
    wakes the watcher (POLLHUP on the answer pipe's read end), and each restarted worker
    gets pipes of its own."""
    mod, rw, kwargs = env
    marker, pid_file = rw / "runs", rw / "pid"
    with sandboxes(**kwargs) as box, concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert mod.ping() == "pong"
        conn, first, links = _channel_links(box)
        assert conn.sock is None, "a local worker's channel is two pipes, not a socketpair"
        assert all(stat.S_ISFIFO(os.fstat(fd).st_mode) for fd in conn.fds)
        assert len(first) == 2, "two pipes"
        if links is not None:
            assert first <= links, "the worker holds both pipes' other ends"
        future = pool.submit(mod.mark_and_wait, str(marker), str(pid_file), 60)
        wait_for_file(pid_file)
        _kill_worker(box)
        with pytest.raises(SandboxProtocolError, match="SIGKILL"):
            future.result(timeout=120)  # a bound against a hang, not a timing assert
        assert mod.ping() == "pong"
        conn, second, links = _channel_links(box)
        assert conn.sock is None and len(second) == 2
        if links is not None:
            assert second <= links
        assert not first & second
        old = box.pid
        _kill_worker(box)  # idle: only the watcher's poll on the answer pipe sees it
        _wait_new_worker(box, old, timeout=120)
        assert mod.ping() == "pong"
    assert marker.read_text().count("run") == 1


def test_calls_that_had_not_started_go_to_the_restarted_worker(env):
    mod, rw, kwargs = env
    marker, pid_file, queued = rw / "runs", rw / "pid", rw / "queued"
    # one worker thread: the second call waits behind the first, unstarted
    with sandboxes(**kwargs, threads=1) as box, concurrent.futures.ThreadPoolExecutor(2) as pool:
        running = pool.submit(mod.mark_and_wait, str(marker), str(pid_file), 60)
        wait_for_file(pid_file)
        waiting = pool.submit(mod.mark, str(queued))
        time.sleep(0.3)  # let it reach the socket
        assert not waiting.done()
        _kill_worker(box)
        with pytest.raises(SandboxProtocolError):
            running.result(timeout=60)
        assert waiting.result(timeout=60) == "marked"
    assert marker.read_text().count("run") == 1
    assert queued.read_text().count("run") == 1


def test_retry_on_crash_runs_the_call_again(env):
    mod, rw, kwargs = env
    marker, pid_file = rw / "runs", rw / "pid"
    with sandboxes(**kwargs) as box, concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(mod.mark_and_wait_retried, str(marker), str(pid_file), 60)
        wait_for_file(pid_file)
        _kill_worker(box)
        assert future.result(timeout=60) == "finished"
    assert marker.read_text().count("run") == 2


def test_five_deaths_within_180_s_fail_closed_and_the_host_lives_on(env):
    mod, _, kwargs = env
    with sandboxes(**kwargs) as box:
        for death in range(1, 6):
            assert mod.ping() == "pong"
            old = box.pid
            _kill_worker(box)
            if death < 5:
                _wait_new_worker(box, old)
        deadline = time.monotonic() + 30
        while box.pid is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(2):
            with pytest.raises(SandboxProtocolError, match="failed closed"):
                mod.ping()
    assert os.getpid() > 0  # still here: the host is never terminated


def test_async_calls_follow_the_same_crash_rules(env):
    import asyncio

    mod, rw, kwargs = env
    marker, pid_file = rw / "runs", rw / "pid"

    async def main():
        async with sandboxes(**kwargs) as box:
            task = asyncio.ensure_future(mod.amark_and_wait(str(marker), str(pid_file), 60))
            await asyncio.to_thread(wait_for_file, pid_file)
            _kill_worker(box)
            with pytest.raises(SandboxProtocolError):
                await task
            return await mod.amark_and_wait(str(rw / "after"), "", 0)

    assert asyncio.run(main()) == "finished"
    assert marker.read_text().count("run") == 1


def test_ctrl_c_in_the_host_stops_waiting_and_leaves_nothing_running(tmp_path: Path):
    import subprocess
    import sys

    project = tmp_path / "project"
    project.mkdir()
    write_module(project, FUNCTIONS, prefix="ctrlc")
    name = next(p.stem for p in project.glob("ctrlc_*.py"))
    profile = project / ".pysb.yaml"
    profile.write_text(profile_text("subprocess", project, project))
    pid_file = project / "pid"
    (project / "app.py").write_text(
        f"import sys\nsys.path.insert(0, {str(project)!r})\n"
        f"import {name} as m\nfrom pysb_core import sandboxes\n"
        f"with sandboxes(profile={str(profile)!r}) as s:\n"
        f"    m.mark_and_wait({str(project / 'runs')!r}, {str(pid_file)!r}, 60)\n"
    )
    app = subprocess.Popen([sys.executable, str(project / "app.py")], stderr=subprocess.DEVNULL)
    try:
        worker = int(wait_for_file(pid_file, timeout=60))
        assert is_descendant(worker, app.pid)
        app.send_signal(signal.SIGINT)  # our own child, by its PID
        app.wait(timeout=30)  # no waiting for the 60 s call
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
    assert app.returncode == -signal.SIGINT
    assert not Path(f"/proc/{worker}").exists()


def test_a_host_killed_outright_leaves_no_worker_behind(tmp_path: Path):
    import subprocess
    import sys

    project = tmp_path / "project"
    project.mkdir()
    write_module(project, FUNCTIONS, prefix="hostkill")
    name = next(p.stem for p in project.glob("hostkill_*.py"))
    profile = project / ".pysb.yaml"
    profile.write_text(profile_text("subprocess", project, project))
    pid_file = project / "pid"
    (project / "app.py").write_text(
        f"import sys, time\nsys.path.insert(0, {str(project)!r})\n"
        f"import {name} as m\nfrom pysb_core import sandboxes\n"
        f"with sandboxes(profile={str(profile)!r}) as s:\n"
        f"    m.mark({str(project / 'runs')!r})\n"
        f"    open({str(pid_file)!r}, 'w').write(str(s.pid))\n"
        "    time.sleep(60)\n"
    )
    app = subprocess.Popen([sys.executable, str(project / "app.py")], stderr=subprocess.DEVNULL)
    try:
        worker = int(wait_for_file(pid_file, timeout=60))
        assert is_descendant(worker, app.pid)
        app.kill()  # our own child, by its PID: no clean-up code runs in it
        app.wait(timeout=30)
        assert _gone(worker), "the worker outlived its host"
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()


def _gone(pid: int, within: float = 30.0) -> bool:
    """True once ``pid`` has exited (gone, or a zombie waiting for its parent)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False
