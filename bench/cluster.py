"""The functions as Knative Services on the cluster tier: set-up time, cold start from zero and
memory per function pod.

``python -m bench.cluster --rounds 3`` (as root: the cluster tier's node) starts the cluster tier,
then ``rounds`` times: waits until Knative has scaled every function to zero, and for each in
turn times one ``GET /healthz`` through Traefik and Knative's activator until the answer (the cold start), and
reads the resident memory of the function container's processes (gunicorn's arbiter and worker)
and of the pod's queue-proxy from ``/proc`` inside the pod. It prints the time to start the tier
and one row per function. No test asserts these numbers.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time

from testbed.cluster.scaling import cold_start, is_ready
from testbed.cluster.stack import NAMESPACE, ClusterOptions, ClusterStack, start_cluster

# Sums VmRSS over every process the container can see (its own PID namespace: gunicorn's arbiter
# and its workers; helm when one runs).
RSS = (
    "import os, json\n"
    "total = 0\n"
    "for p in os.listdir('/proc'):\n"
    "    if p.isdigit():\n"
    "        try:\n"
    "            lines = open(f'/proc/{p}/status').read().splitlines()\n"
    "        except OSError:\n"
    "            continue\n"
    "        total += sum(int(l.split()[1]) for l in lines if l.startswith('VmRSS:'))\n"
    "print(json.dumps(total // 1024))"
)


def _at_zero(cluster: ClusterStack, service: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while cluster.pods(service):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{service} did not scale to zero within {timeout:.0f}s")
        time.sleep(1)


def _memory(cluster: ClusterStack, service: str, timeout: float = 60) -> int:
    """The function container's RSS in a pod of the service (its Ready condition lags the first
    answer a little: the activator forwards as soon as the pod's queue-proxy says ready)."""
    deadline = time.monotonic() + timeout
    while True:
        ready = [p["metadata"]["name"] for p in cluster.pods(service) if is_ready(p)]
        if ready or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if not ready:
        raise TimeoutError(f"no Ready pod of {service} within {timeout:.0f}s")
    out = cluster.kubectl("exec", "-n", NAMESPACE, ready[0], "-c", "function", "--", "python3", "-c", RSS)
    return int(json.loads(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    started = time.monotonic()
    with start_cluster(ClusterOptions()) as cluster:
        up = time.monotonic() - started
        starts: dict[str, list[float]] = {service: [] for service in cluster.functions}
        memory: dict[str, list[int]] = {service: [] for service in cluster.functions}
        for _ in range(args.rounds):
            # every function at zero, then each woken in turn (the others stay at zero until their
            # turn): one scale-to-zero wait per round instead of one per function
            for service in cluster.functions:
                _at_zero(cluster, service)
            for service in cluster.functions:
                _at_zero(cluster, service)  # still: an event (resync's tick) may have woken it meanwhile
                status, seconds = cold_start(cluster.ingress_url, f"{service}.{NAMESPACE}.svc.cluster.local")
                if status != 200:
                    raise RuntimeError(f"{service} answered {status}")
                starts[service].append(seconds)
                memory[service].append(_memory(cluster, service))
        rows = [(service, starts[service], memory[service]) for service in cluster.functions]
    print(f"\ncluster tier up (images built or cached, node, Knative, the functions Ready): {up:.0f} s\n")
    print(f"{'function':26} {'cold start median (s)':>22} {'min-max (s)':>14} {'function container RSS (MiB)':>30}")
    for service, took, rss in rows:
        spread = f"{min(took):.2f}-{max(took):.2f}"
        print(f"{service:26} {statistics.median(took):22.2f} {spread:>14} {statistics.median(rss):30.0f}")


if __name__ == "__main__":
    main()
