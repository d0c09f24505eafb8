"""``sandboxes(workers=N)`` (issue 30): N sandboxed worker processes, calls spread across
them, ``init_fn`` in each, crash rules per worker; under subprocess, landlock and bwrap.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time
from pathlib import Path

import pytest

from pysb_core import SandboxProtocolError, sandboxes
from pysb_core.remote import api
from pysb_core.testing import require_provider
from pysb_core.testing.partial import (
    is_descendant,
    profile_text,
    wait_for_file,
    worker_host_pid,
    write_module,
)

PROVIDERS = ["subprocess", "landlock", "bwrap"]

FUNCTIONS = """
import os, time
from pysb_core import sandbox

TOKEN = os.urandom(8).hex()  # one per worker process (PIDs repeat across PID namespaces)
state = []

def init():
    state.append(TOKEN)

@sandbox
def who(seconds=0.0):
    time.sleep(seconds)
    return TOKEN, list(state)

@sandbox
def hang(pid_file):
    with open(pid_file, "w") as f:
        f.write(TOKEN)
    time.sleep(60)
    return "finished"
"""


@pytest.fixture(params=PROVIDERS)
def env(request, tmp_path: Path):
    if request.param != "subprocess":
        require_provider(request.param)
    rw = tmp_path / "rw"
    rw.mkdir()
    mod = write_module(tmp_path, FUNCTIONS)
    profile = tmp_path / ".pysb.yaml"
    profile.write_text(profile_text(request.param, tmp_path, rw))
    return mod, rw, {"profile": str(profile), "cwd": str(tmp_path)}


def test_calls_spread_across_the_workers_and_init_fn_runs_in_each(env):
    mod, _, kwargs = env
    with sandboxes(**kwargs, workers=2, init_fn=mod.init) as box:
        pids = box.pids
        assert len(pids) == 2 and len(set(pids)) == 2 and None not in pids
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: mod.who(0.3), range(4)))
        tokens = {token for token, _ in answers}
        assert len(tokens) == 2  # both workers served calls
        for token, state in answers:
            assert state == [token]  # init_fn ran once in each worker, before its calls
        # each worker talks over two pipes of its own, as a lone one (issue 30 item 2)
        conns = [client._conn for client in api._client._clients]
        assert all(conn.sock is None and len(conn.fds) == 2 for conn in conns)


def test_a_worker_that_dies_is_restarted_alone_and_its_call_is_not_run_again(env):
    mod, rw, kwargs = env
    pid_file = rw / "pid"
    with sandboxes(**kwargs, workers=2, init_fn=mod.init) as box:
        before = box.pids
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            running = pool.submit(mod.hang, str(pid_file))
            hung = wait_for_file(pid_file)
            # the other worker serves on meanwhile
            others = {mod.who()[0] for _ in range(4)}
            assert hung not in others and len(others) == 1
            # kill the worker running hang(): the one with a call in flight
            busy = [c for c in api._client._clients if c._pending]
            assert len(busy) == 1
            victim = worker_host_pid(busy[0].pid)
            assert victim != os.getpid() and victim > 1 and is_descendant(victim)
            os.kill(victim, signal.SIGKILL)
            with pytest.raises(SandboxProtocolError, match="not run again"):
                running.result(timeout=60)
        deadline = time.monotonic() + 60
        while None in box.pids or set(box.pids) == set(before):
            assert time.monotonic() < deadline, "the worker was not restarted"
            time.sleep(0.01)
        assert len(set(box.pids) - set(before)) == 1  # one worker restarted, the other kept
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: mod.who(0.3), range(4)))
        assert len({token for token, _ in answers}) == 2  # the new worker serves too
        assert all(state == [token] for token, state in answers)  # init_fn in the new one
        assert hung not in {token for token, _ in answers}


def test_workers_must_be_a_positive_count(env):
    _, _, kwargs = env
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="workers must be a positive number"):
            sandboxes(**kwargs, workers=bad)
