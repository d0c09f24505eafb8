"""One Ray benchmark run, in a fresh interpreter: ``python _ray_worker.py --provider NAME``.

Runs in the benchmark's working directory. Times N trivial calls (``noop(i) -> i``):

- ``local_1``, ``local_8``: through local partial mode (``with sandboxes()``), from one
  thread, then from eight;
- ``ray_plain_{1,2}``: plain Ray tasks (no sandbox) on a cluster of one, then two nodes;
- ``ray_sandboxed_{1,2}``: ``@pysb_ray.sandboxed`` tasks on the same clusters;
- ``pool_2``: a ``SandboxPool`` of two actors (``map``) on the two-node cluster.

The Ray figures submit every call, then wait for all of them (``ray.get`` of the list),
after one warm-up round that starts the Ray workers and their sandboxes. Every Ray
service binds 127.0.0.1. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback only (see the tests)
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

TOOLS = """
import os
import pysb_ray

PROFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raybench.pysb.yaml")
PROVIDER = "%(provider)s"


@pysb_ray.sandboxed(profile=PROFILE, provider=PROVIDER, num_cpus=1)
def noop(i):
    return i
"""

PROFILE = 'version: 1\nimports: [os]\nfiles:\n  expose-ro: ["${PROFILE_DIR}"]\n'

MB = 1024 * 1024
NODE = {"num_cpus": 2, "object_store_memory": 100 * MB}


def rate(n: int, seconds: float) -> dict[str, float]:
    return {"calls": n, "seconds": round(seconds, 4), "calls_per_s": round(n / seconds, 1)}


def timed(fn: Any, n: int) -> dict[str, float]:
    began = time.perf_counter()
    fn()
    return rate(n, time.perf_counter() - began)


def local(tools: Any, n: int, provider: str) -> dict[str, Any]:
    from pysb_core import sandboxes

    out: dict[str, Any] = {}
    with sandboxes(profile=tools.PROFILE, provider=provider):
        for i in range(100):
            tools.noop(i)
        out["local_1"] = timed(lambda: [tools.noop(i) for i in range(n)], n)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(tools.noop, range(100)))
            out["local_8"] = timed(lambda: list(pool.map(tools.noop, range(n))), n)
    return out


def cluster(nodes: int) -> Any:
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args={**NODE, "include_dashboard": False, "node_ip_address": "127.0.0.1"},
    )
    for _ in range(1, nodes):
        c.add_node(**NODE, node_ip_address="127.0.0.1")
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    return c


def on_ray(tools: Any, n: int, nodes: int) -> dict[str, Any]:
    import pysb_ray
    import ray

    @ray.remote(num_cpus=1, max_retries=0)
    def plain(i: int) -> int:
        return i

    out: dict[str, Any] = {}
    c = cluster(nodes)
    try:
        warm = 4 * nodes * NODE["num_cpus"]
        ray.get([plain.remote(i) for i in range(warm)])
        out[f"ray_plain_{nodes}"] = timed(lambda: ray.get([plain.remote(i) for i in range(n)]), n)
        ray.get([tools.noop.remote(i) for i in range(warm)])  # Ray workers + their sandboxes
        out[f"ray_sandboxed_{nodes}"] = timed(
            lambda: ray.get([tools.noop.remote(i) for i in range(n)]), n
        )
        if nodes == 2:
            with pysb_ray.SandboxPool(2, profile=tools.PROFILE, provider=tools.PROVIDER) as pool:
                list(pool.map(tools.noop, range(20)))
                out["pool_2"] = timed(lambda: list(pool.map(tools.noop, range(n))), n)
    finally:
        ray.shutdown()
        c.shutdown()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--provider", default="landlock")
    parser.add_argument("--calls", type=int, default=2000)
    ns = parser.parse_args()
    here = Path.cwd()
    (here / "raybench_tools.py").write_text(TOOLS % {"provider": ns.provider})
    (here / "raybench.pysb.yaml").write_text(PROFILE)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(here), os.environ.get("PYTHONPATH")) if p
    )
    sys.path.insert(0, str(here))
    import raybench_tools  # the nodes import it through PYTHONPATH

    result: dict[str, Any] = {"provider": ns.provider, "calls": ns.calls}
    result.update(local(raybench_tools, ns.calls, ns.provider))
    for nodes in (1, 2):
        result.update(on_ray(raybench_tools, ns.calls, nodes))
    import ray

    result["ray_version"] = ray.__version__
    result["node"] = {k: v for k, v in NODE.items() if k == "num_cpus"}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
