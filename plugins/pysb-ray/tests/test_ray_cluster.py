"""pysb-ray on a real two-node Ray cluster: every call below runs in a pysb sandbox
(landlock) inside a Ray worker process of one of the nodes."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import ray

from pysb_core import DeniedError, FileDeniedError, ProfileError, sandbox_denials

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
