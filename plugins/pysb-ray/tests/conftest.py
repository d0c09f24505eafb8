"""A real two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``), for the
whole test module: a head node and a worker node, each with its own raylet and Ray worker
processes, all bound to 127.0.0.1.

Ray must be importable: under ``scripts/test.sh`` (and so in CI) ``PYSB_REQUIRE_RAY=1``
turns a missing Ray into a failure; a plain ``pytest`` run skips these tests.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

# Ray reads these when it is imported, and every node process inherits them: bind every
# Ray service to the loopback address (Ray otherwise picks the machine's outward address,
# which it finds by routing towards a public one) and send no usage statistics anywhere.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

try:
    import ray
except ImportError as exc:  # pragma: no cover - depends on the installation
    if os.environ.get("PYSB_REQUIRE_RAY") == "1":
        raise ImportError(
            f"pysb-ray's tests need Ray ({exc}); PYSB_REQUIRE_RAY=1 makes its absence a "
            "failure: pip install ray (make dev installs it)"
        ) from exc
    pytest.skip(f"Ray is not installed ({exc})", allow_module_level=True)

from pysb_core.testing import require_provider

MB = 1024 * 1024
NODE = {"num_cpus": 1, "object_store_memory": 80 * MB}
PROVIDER = "landlock"

TOOLS = '''
"""Sandboxed functions of the pysb-ray tests (every node imports this module)."""
import os
import time

import pysb_ray

HERE = os.path.dirname(os.path.abspath(__file__))
PROFILE = os.path.join(HERE, "tools.pysb.yaml")
OPTIONS = {"profile": PROFILE, "provider": "%(provider)s", "num_cpus": 0.5}


class ToolError(Exception):
    """The user's own exception class."""


@pysb_ray.sandboxed(**OPTIONS)
def add(a, b):
    return a + b


@pysb_ray.sandboxed(**OPTIONS)
def fail(message):
    raise ToolError(message)


@pysb_ray.sandboxed(**OPTIONS)
def read(path):
    with open(path) as f:
        return f.read()


@pysb_ray.sandboxed(**OPTIONS)
def sandbox_pid():
    return os.getpid()


@pysb_ray.sandboxed(timeout=1.0, **OPTIONS)
def sleep(seconds):
    time.sleep(seconds)
    return seconds


@pysb_ray.sandboxed(**OPTIONS)
def crash(marker):
    with open(marker, "a") as f:
        f.write("ran\\n")
    os._exit(7)


@pysb_ray.sandboxed(**OPTIONS)
def hang(marker, seconds):
    with open(marker, "a") as f:
        f.write("ran\\n")
    time.sleep(seconds)
    return seconds


@pysb_ray.sandboxed(profile=os.path.join(HERE, "broken.pysb.yaml"), provider="%(provider)s")
def broken():
    return 1
'''

PROFILE = """\
version: 1
imports: [os, time]
files:
  expose-ro: ["${PROFILE_DIR}"]
  expose-rw: ["${PROFILE_DIR}/out"]
"""

BROKEN = """\
version: 1
imports: [os]
files:
  expose-ro: 42
"""


@pytest.fixture(scope="session")
def tools_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project directory whose path has a space, holding ``raytools.py`` and profiles."""
    where = tmp_path_factory.mktemp("pysb ray") / "my tools"
    (where / "out").mkdir(parents=True)
    (where / "raytools.py").write_text(textwrap.dedent(TOOLS % {"provider": PROVIDER}))
    (where / "tools.pysb.yaml").write_text(PROFILE)
    (where / "broken.pysb.yaml").write_text(BROKEN)
    return where


@pytest.fixture(scope="session")
def tools(tools_dir: Path) -> ModuleType:
    require_provider(PROVIDER)
    sys.path.insert(0, str(tools_dir))
    import raytools  # type: ignore[import-not-found]

    return raytools


def start_cluster(tools_dir: Path, nodes: int) -> Any:
    """A ``Cluster`` of ``nodes`` nodes (the head included), the driver connected to it.

    The nodes find the tools through ``PYTHONPATH`` (they share this file system here; on a
    real cluster the module is in the image). Each node has a custom resource naming it,
    so that a test can send a task to one node.
    """
    from ray.cluster_utils import Cluster

    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(tools_dir), saved) if p)
    try:
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                **NODE,
                "include_dashboard": False,
                "node_ip_address": "127.0.0.1",
                "resources": {"node0": 1},
            },
        )
        for index in range(1, nodes):
            cluster.add_node(**NODE, node_ip_address="127.0.0.1", resources={f"node{index}": 1})
        cluster.wait_for_nodes()
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    return cluster


@pytest.fixture(scope="module")
def cluster(tools: ModuleType, tools_dir: Path) -> Iterator[Any]:
    cluster = start_cluster(tools_dir, nodes=2)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
