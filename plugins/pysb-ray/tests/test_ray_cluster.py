"""pysb-ray on a real two-node Ray cluster: every call below runs in a pysb sandbox
(landlock) inside a Ray worker process of one of the nodes."""

from __future__ import annotations

import errno
import os
import re
import signal
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pysb_ray
import pytest

from pysb_core import (
    DeniedError,
    FileDeniedError,
    ProfileError,
    ProviderUnavailableError,
    SandboxProtocolError,
    SandboxTimeoutError,
    sandbox_denials,
)
from pysb_core.linux.proctree import descendants, running

ray = pytest.importorskip("ray", reason="Ray is not installed (PYSB_REQUIRE_RAY=1: a failure)")
pytestmark = pytest.mark.slow


def on_node(index: int) -> dict[str, Any]:
    """Ray options that place a task on node ``index`` (0: the head)."""
    return {"resources": {f"node{index}": 0.01}}


def raylet_pid(cluster: Any, index: int) -> int:
    node = cluster.list_all_nodes()[index]
    return node.all_processes["raylet"][0].process.pid


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_results_round_trip_on_both_nodes(cluster: Any, tools: ModuleType) -> None:
    refs = [tools.add.options(**on_node(i % 2)).remote(i, 1) for i in range(20)]
    assert isinstance(refs[0], ray.ObjectRef)
    assert ray.get(refs) == [i + 1 for i in range(20)]


def test_the_users_exception_arrives_as_its_class_with_the_remote_traceback(
    cluster: Any, tools: ModuleType
) -> None:
    with pytest.raises(tools.ToolError) as info:
        ray.get(tools.fail.options(**on_node(1)).remote("no such tool"))
    text = str(info.value)
    assert "no such tool" in text
    assert "raytools.py" in text and "raise ToolError(message)" in text  # the sandbox's frame


def test_a_denied_access_is_refused_on_the_worker_node(
    cluster: Any, tools: ModuleType, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the driver's secret")
    with pytest.raises(FileDeniedError) as info:
        ray.get(tools.read.options(**on_node(1)).remote(str(secret)))
    error = info.value
    assert isinstance(error, DeniedError) and isinstance(error, PermissionError | OSError)
    assert "expose-ro" in str(error) and str(tmp_path) in str(error)
    assert (error.errno, error.filename) == (errno.ENOENT, str(secret))  # as partial mode's
    assert sandbox_denials(error)
    # it ran in a Ray worker of the worker node (a child of that node's raylet)
    ray_worker = int(re.search(r"\(pid=(\d+), ip=127\.0\.0\.1\)", str(error)).group(1))
    assert parent_of(ray_worker) == raylet_pid(cluster, 1)
    # and the profile's own directory is readable there
    profile = Path(tools.PROFILE).read_text()
    assert ray.get(tools.read.options(**on_node(1)).remote(tools.PROFILE)) == profile


def test_sandboxes_stay_warm_across_tasks(cluster: Any, tools: ModuleType) -> None:
    pids = [ray.get(tools.sandbox_pid.options(**on_node(1)).remote()) for _ in range(8)]
    # sequential tasks reuse idle Ray workers, and each keeps its sandbox running
    assert len(set(pids)) <= 2, pids
    assert all(pid != os.getpid() for pid in pids)


def test_a_profile_that_does_not_validate_fails_on_the_driver(
    cluster: Any, tools: ModuleType
) -> None:
    with pytest.raises(ProfileError) as info:
        tools.broken.remote()
    assert "broken.pysb.yaml:4" in str(info.value)


def test_a_node_without_the_provider_fails_the_task_naming_the_node(
    cluster: Any, tools: ModuleType
) -> None:
    assert ray.get(tools.add_under_bwrap.options(**on_node(0)).remote(2, 3)) == 5
    with pytest.raises(ProviderUnavailableError) as info:
        ray.get(tools.add_under_bwrap.options(**on_node(1)).remote(2, 3))
    message = str(info.value)
    node_id = cluster.list_all_nodes()[1].node_id
    assert f"Ray node 127.0.0.1 (node id {node_id})" in message
    assert "bwrap" in message


def test_a_sandbox_crash_mid_call_is_reported_and_the_call_never_runs_twice(
    cluster: Any, tools: ModuleType
) -> None:
    marker = Path(tools.HERE) / "out" / "crash.txt"
    with pytest.raises(SandboxProtocolError, match=r"exited with status 7.*not run again"):
        ray.get(tools.crash.options(**on_node(1)).remote(str(marker)))
    assert marker.read_text() == "ran\n"
    # the Ray worker restarted its sandbox: the next task is served
    assert ray.get(tools.add.options(**on_node(1)).remote(40, 2)) == 42
    assert marker.read_text() == "ran\n"


def test_a_ray_worker_killed_mid_call_is_not_retried_and_leaves_no_sandbox(
    cluster: Any, tools: ModuleType
) -> None:
    marker = Path(tools.HERE) / "out" / "hang.txt"
    ref = tools.hang.options(**on_node(1)).remote(str(marker), 60)
    deadline = time.monotonic() + 30
    while not marker.exists() or not marker.read_text().strip():
        assert time.monotonic() < deadline, "the call never started"
        time.sleep(0.05)
    sandboxed = int(marker.read_text().split()[0])
    raylet = raylet_pid(cluster, 1)
    ray_worker = sandboxed
    while parent_of(ray_worker) != raylet:  # up the tree to the node's Ray worker
        ray_worker = parent_of(ray_worker)
        assert ray_worker > 1, "the sandbox does not descend from the node's raylet"
    sandbox_processes = descendants(ray_worker)
    assert sandboxed in sandbox_processes
    os.kill(ray_worker, signal.SIGKILL)  # a descendant of our own cluster's raylet
    with pytest.raises(ray.exceptions.RayError) as info:
        ray.get(ref, timeout=60)
    assert not isinstance(info.value, ray.exceptions.GetTimeoutError)
    # the sandbox saw its socket close and went away with everything it started
    deadline = time.monotonic() + 15
    while any(running(pid) for pid in sandbox_processes):
        assert time.monotonic() < deadline, [p for p in sandbox_processes if running(p)]
        time.sleep(0.1)
    time.sleep(1.0)  # Ray would have retried by now
    assert len(marker.read_text().split()) == 1


def test_a_timeout_raises_sandbox_timeout_error_and_the_worker_serves_on(
    cluster: Any, tools: ModuleType
) -> None:
    started = time.monotonic()
    with pytest.raises(SandboxTimeoutError) as info:
        ray.get(tools.sleep.options(**on_node(1)).remote(30))
    assert isinstance(info.value, TimeoutError)
    assert time.monotonic() - started < 20
    assert ray.get(tools.sleep.options(**on_node(1)).remote(0.01)) == 0.01


def test_the_pool_maps_in_order_with_bounded_concurrency(cluster: Any, tools: ModuleType) -> None:
    with pysb_ray.SandboxPool(2, profile=tools.PROFILE, provider="landlock", num_cpus=0.5) as pool:
        assert list(pool.map(tools.add_one, range(10))) == [i + 1 for i in range(10)]
        assert sorted(pool.map_unordered(tools.add_one, range(5))) == [1, 2, 3, 4, 5]
        pool.submit(tools.add, 2, 3)
        pool.submit(tools.fail, "pooled")
        assert pool.get_next() == 5
        with pytest.raises(tools.ToolError, match="pooled"):
            pool.get_next()
        assert not pool.has_next()
        # two actors, two warm sandboxes, whatever the number of calls
        for _ in range(6):
            pool.submit(tools.sandbox_pid)
        pids = {pool.get_next() for _ in range(6)}
        assert 1 <= len(pids) <= 2
        with pytest.raises(TypeError, match="not a sandboxed function"):
            pool.submit(len, [])


def test_a_pool_with_a_bad_profile_fails_on_the_driver(cluster: Any, tools: ModuleType) -> None:
    broken = os.path.join(tools.HERE, "broken.pysb.yaml")
    with pytest.raises(ProfileError, match=r"broken\.pysb\.yaml:4"):
        pysb_ray.SandboxPool(1, profile=broken)


def test_a_warm_sandbox_takes_in_a_second_module_of_functions(
    cluster: Any, tools: ModuleType
) -> None:
    import moretools  # type: ignore[import-not-found]

    assert ray.get(tools.add.options(**on_node(1)).remote(1, 1)) == 2
    assert ray.get(moretools.double.options(**on_node(1)).remote(21)) == 42
    assert ray.get(tools.add.options(**on_node(1)).remote(2, 2)) == 4


def test_a_function_no_node_can_import_fails_with_rays_own_error(
    cluster: Any, tools: ModuleType, tools_dir: Path, tmp_path: Path
) -> None:
    """The driver imports a module that the nodes cannot (here: deleted before the task
    runs, as a module that exists only on the driver's machine)."""
    import importlib
    import shutil
    import sys

    where = tmp_path / "driver only"
    where.mkdir()
    (where / "driveronly.py").write_text(
        "import pysb_ray\n\n"
        f"@pysb_ray.sandboxed(profile={tools.PROFILE!r}, provider='landlock', num_cpus=0.5)\n"
        "def here():\n    return 1\n"
    )
    sys.path.insert(0, str(where))
    try:
        module = importlib.import_module("driveronly")
        shutil.rmtree(where)
        with pytest.raises(ray.exceptions.RayError) as info:
            ray.get(module.here.options(**on_node(1)).remote(), timeout=120)
        assert "driveronly" in str(info.value)
        assert "No module named 'driveronly'" in str(info.value), str(info.value)
    finally:
        sys.path.remove(str(where))
        sys.modules.pop("driveronly", None)


class _System:
    """Pickled as a call of os.system (what a hostile worker's result can name)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (self.command,)


def test_hostile_answers_are_decoded_on_the_driver_and_refused(
    cluster: Any, tools: ModuleType
) -> None:
    """The sandboxed code forges its worker's answers (issue 26, through pysb-ray): the
    Ray worker relays them undecoded and the driver's restricted decoder refuses each --
    no module imported, no constructor run, no command, no allocation of the numbers.

    Before, the Ray worker decoded the answer and Ray pickled the object again: the
    driver's unpickler then imported ``workeronly`` (loaded in the Ray worker only) and ran
    ``Trap.__init__`` for an exception the sandbox merely named."""
    import pickle
    import sys

    import hostiletools  # type: ignore[import-not-found]

    from pysb_core import RestrictedResultError

    out = Path(tools.HERE) / "out"
    mine = os.getpid()
    ran = out / "system-ran"
    before = set(sys.modules)
    node = on_node(1)
    unloaded = b"\x80\x02cplantedmod\nX\n)\x81."  # NEWOBJ of a module the driver has not loaded
    with pytest.raises(RestrictedResultError, match=r"plantedmod\.X"):
        ray.get(hostiletools.forge_result.options(**node).remote(unloaded))
    system = pickle.dumps(_System(f"touch {ran}"), protocol=2)
    with pytest.raises(RestrictedResultError, match=r"system"):
        ray.get(hostiletools.forge_result.options(**node).remote(system))
    huge = [("/etc/shadow", 2**31, "f", "x")]
    with pytest.raises(SandboxProtocolError, match=r"line number 2147483648"):
        ray.get(hostiletools.forge_exception.options(**node).remote("builtins", "ValueError", huge))
    with pytest.raises(SandboxProtocolError, match=r"workeronly\.Trap: forged") as info:
        ray.get(hostiletools.forge_exception.options(**node).remote("workeronly", "Trap", []))
    assert isinstance(info.value, ray.exceptions.RayTaskError)  # as Ray raises a task's error
    # the node's Ray worker did load workeronly (the case is real), the driver never did
    imported = {p.name for p in out.iterdir()}
    assert any(name.startswith("imported-") for name in imported), imported
    assert f"imported-{mine}" not in imported and f"constructed-{mine}" not in imported
    assert f"planted-{mine}" not in imported and not ran.exists()
    assert not {"workeronly", "plantedmod"} & (set(sys.modules) - before)
    # an honest call of the same functions still round-trips
    assert ray.get(hostiletools.forge_result.options(**node).remote(pickle.dumps(7))) == 7
