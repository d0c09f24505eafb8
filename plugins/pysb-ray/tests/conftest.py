"""A real two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``), for the
whole test module: a head node and a worker node, each with its own raylet and Ray worker
processes, all bound to 127.0.0.1.

Ray must be importable: under ``scripts/test.sh`` (and so in CI) ``PYSB_REQUIRE_RAY=1``
turns a missing Ray into a failure (an error loading this file); a plain ``pytest`` run
skips the tests that need a cluster (``importorskip`` in their modules).
"""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
import time
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
    ray = None  # the cluster tests skip themselves (importorskip)

from pysb_core.linux.proctree import descendants, running
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
def add_one(a):
    return a + 1


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
        f.write(f"{os.getpid()}\\n")
    time.sleep(seconds)
    return seconds


@pysb_ray.sandboxed(profile=PROFILE, provider="bwrap", num_cpus=0.5)
def add_under_bwrap(a, b):
    return a + b


@pysb_ray.sandboxed(profile=os.path.join(HERE, "broken.pysb.yaml"), provider="%(provider)s")
def broken():
    return 1
'''

PROFILE = """\
version: 1
imports: [os, time, raytools]
files:
  expose-ro: ["${PROFILE_DIR}"]
  expose-rw: ["${PROFILE_DIR}/out"]
"""

MORE_TOOLS = '''
"""A second module of sandboxed functions under the same profile."""
import pysb_ray
import raytools


@pysb_ray.sandboxed(**raytools.OPTIONS)
def double(a):
    return 2 * a
'''

HOSTILE_TOOLS = '''
"""A hostile sandboxed program: it forges the answers its worker sends to the Ray worker.

Every node's Ray workers import ``workeronly`` with this module (``PYSB_RAY_TEST_NODE``
is set on the nodes, not on the driver): a module that a Ray worker has loaded and the
driver has not, as Ray's own modules or a node image's are.
"""
import contextvars
import gc
import os
import _pickle

import pysb_ray
from pysb_core import is_in_sandbox

if os.environ.get("PYSB_RAY_TEST_NODE") == "1" and not is_in_sandbox():
    import workeronly  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
OPTIONS = {"profile": os.path.join(HERE, "hostile.pysb.yaml"), "provider": "%(provider)s",
           "num_cpus": 0.5}


def _writer_and_call():
    writer = next(o for o in gc.get_objects() if type(o).__name__ == "FrameWriter")
    ctx = contextvars.copy_context()
    return writer, next(v for k, v in ctx.items() if k.name == "pysb_call")


@pysb_ray.sandboxed(**OPTIONS)
def forge_result(payload):
    """Send our own RESULT frame for this call, as hostile code in the worker can."""
    writer, cid = _writer_and_call()
    writer.send(14, cid, payload)
    return "sent"


@pysb_ray.sandboxed(**OPTIONS)
def forge_exception(module, qualname, frames):
    writer, cid = _writer_and_call()
    link = {"pickled": None, "state": {}, "module": module, "qualname": qualname,
            "message": "forged", "frames": frames, "relation": "context", "suppress": False}
    writer.send(15, cid, _pickle.dumps([link], protocol=5))
    return "sent"
'''

#: Imported by a Ray worker (never by the driver): if anything imports it or builds its
#: exception, it leaves a marker naming the process that did.
WORKER_ONLY = """
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
with open(os.path.join(OUT, f"imported-{os.getpid()}"), "w"):
    pass


class Trap(Exception):
    def __init__(self, *args):
        with open(os.path.join(OUT, f"constructed-{os.getpid()}"), "w"):
            pass
        super().__init__(*args)
"""

PLANTED = """
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
with open(os.path.join(OUT, f"planted-{os.getpid()}"), "w"):
    pass


class X:
    pass
"""

HOSTILE_PROFILE = """\
version: 1
imports: ["*"]
api: {allow: ["*"]}
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
    (where / "moretools.py").write_text(MORE_TOOLS)
    (where / "tools.pysb.yaml").write_text(PROFILE)
    (where / "broken.pysb.yaml").write_text(BROKEN)
    (where / "hostiletools.py").write_text(HOSTILE_TOOLS % {"provider": PROVIDER})
    (where / "workeronly.py").write_text(WORKER_ONLY)
    (where / "plantedmod.py").write_text(PLANTED)
    (where / "hostile.pysb.yaml").write_text(HOSTILE_PROFILE)
    return where


@pytest.fixture(scope="session")
def tools(tools_dir: Path) -> ModuleType:
    require_provider(PROVIDER)
    sys.path.insert(0, str(tools_dir))
    import raytools  # type: ignore[import-not-found]

    return raytools


def path_without(binary: str, where: Path) -> str:
    """A ``PATH`` with every program of this machine's but ``binary``: the node image of
    a node that lacks it (symbolic links to the others, in ``where``)."""
    where.mkdir(parents=True, exist_ok=True)
    for directory in ("/usr/local/bin", "/usr/bin"):
        for entry in os.scandir(directory):
            if entry.name != binary and not (where / entry.name).exists():
                (where / entry.name).symlink_to(entry.path)
    return os.pathsep.join([str(where), "/usr/local/sbin", "/usr/sbin", "/sbin"])


@contextlib.contextmanager
def environment(**changes: str) -> Iterator[None]:
    """``os.environ`` changed while node processes start (they inherit it)."""
    saved = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def start_cluster(tools_dir: Path, nodes: int, node_env: dict[int, dict[str, str]]) -> Any:
    """A ``Cluster`` of ``nodes`` nodes (the head included), the driver connected to it.

    The nodes find the tools through ``PYTHONPATH`` (they share this file system here; on a
    real cluster the module is in the image); ``node_env`` changes the environment of some
    nodes (every node has ``PYSB_RAY_TEST_NODE=1``, the driver not). Each node has a custom
    resource naming it (``node0``, ``node1``...), so that a test can send a task to one node.
    """
    from ray.cluster_utils import Cluster

    pythonpath = os.pathsep.join(p for p in (str(tools_dir), os.environ.get("PYTHONPATH")) if p)
    node_env = {i: {"PYSB_RAY_TEST_NODE": "1", **node_env.get(i, {})} for i in range(nodes)}
    with environment(PYTHONPATH=pythonpath, **node_env.get(0, {})):
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
        with environment(PYTHONPATH=pythonpath, **node_env.get(index, {})):
            cluster.add_node(**NODE, node_ip_address="127.0.0.1", resources={f"node{index}": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    return cluster


@pytest.fixture(scope="module")
def cluster(tools: ModuleType, tools_dir: Path) -> Iterator[Any]:
    """Two nodes; the second one's image has no bubblewrap (``bwrap`` is not on its PATH)."""
    require_provider("bwrap")
    no_bwrap = path_without("bwrap", tools_dir.parent / "node1-bin")
    before = set(descendants(os.getpid()))
    cluster = start_cluster(tools_dir, nodes=2, node_env={1: {"PATH": no_bwrap}})
    try:
        yield cluster
    finally:
        started = set(descendants(os.getpid())) - before
        ray.shutdown()
        cluster.shutdown()
        wait_gone(started)


def wait_gone(pids: set[int], timeout: float = 30.0) -> None:
    """Let the cluster's processes finish exiting before the next tests run (their own
    process checks must not see them); test_ray_cleanup.py asserts that they do exit."""
    deadline = time.monotonic() + timeout
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.fixture
def cluster_factory(tools: ModuleType, tools_dir: Path) -> Any:
    """``start_cluster`` for a test that starts (and shuts down) a cluster of its own."""
    return lambda nodes, node_env: start_cluster(tools_dir, nodes=nodes, node_env=node_env)
