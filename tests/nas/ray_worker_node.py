"""One Ray worker node on 127.0.0.1, joined to a running head, until killed: `python ray_worker_node.py SPEC`.

`ray start --address ... --block` without the CLI's rewrite of 127.0.0.1 (see test_cluster.py), as
`ray.cluster_utils.Cluster.add_node` does. SPEC is JSON: the head's `gcs_address`, a `temp_dir` and the node's
ports. It imports no test module, so it runs from any folder and puts nothing of tests/ on the node's path.
"""

from __future__ import annotations

import json
import signal
import sys
import time


def serve_worker_node(spec: dict) -> None:
    from ray._private import services
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    params = RayParams(node_ip_address="127.0.0.1", num_cpus=1, num_gpus=0, object_store_memory=100 * 2**20, **spec)
    node = Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)
    services.wait_for_node(spec["gcs_address"], node.plasma_store_socket_name)
    print("worker node ready", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # exit through atexit: the node stops its processes
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    serve_worker_node(json.loads(sys.argv[1]))
