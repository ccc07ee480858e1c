"""The benchmarks, by name: each prints its tables and appends them to bench/RESULTS.md.

``python -m bench`` (``make bench``) runs the issue's set: ``burst``, ``coldstart`` and
``resync``. ``python -m bench NAME [options]`` runs one (``python -m bench burst --help``):

============  ===================================================================================
name          measures
============  ===================================================================================
burst         N Tenants at once against sequential and parallel ``helm upgrade --install``
              floors; where the time goes; per-hop latency; API requests and helm calls per
              Tenant; poll accuracy; worker memory (``bench.burst``)
coldstart     process start to first event answered per function; import cost per dependency
              (``bench.coldstart``)
resync        one resync pass over 1,000 settled Tenants: time, API requests, writes (``bench.resync``)
resync-memory what a resync pass holds in memory at once, by the page size of its LISTs
              (``bench.resync_memory``)
helm          one Tenant at a time: raw helm against the install function and the whole pipeline
              (``bench.helm``)
readiness     what proving Ready costs: check-ready's probe of a vCluster's API through its
              kubeconfig (``bench.readiness``)
ready-after   from vcluster's Secret written to the Tenant Ready, with the vCluster watch's hints
              and with the poll alone (``bench.ready_after``)
sources       what one more Tenant namespace costs the vCluster watch with N namespaces there:
              requests, CPU, memory, time to hear it (``bench.sources``)
admission     what the product's admission policies cost every other write of the cluster:
              kube-apiserver's CPU per 1,000 writes with and without them (``bench.admission``)
============  ===================================================================================

``python -m bench.startup`` (the stack's own start), ``python -m bench.tracing`` (what tracing
costs) and ``python -m bench.cluster`` (the cluster tier) run on their own and print only.
Figures are wall-clock on this machine; no test asserts them.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence

from .report import Table, code, record

Benchmark = Callable[[Sequence[str]], list[Table]]


def benchmarks() -> dict[str, Benchmark]:
    from . import admission, burst, coldstart, helm, readiness, ready_after, resync, resync_memory, sources

    return {
        "burst": burst.main,
        "coldstart": coldstart.main,
        "resync": resync.main,
        "resync-memory": resync_memory.main,
        "helm": helm.main,
        "readiness": readiness.main,
        "ready-after": ready_after.main,
        "sources": sources.main,
        "admission": admission.main,
    }


DEFAULT = ("burst", "coldstart", "resync")


def main(argv: Sequence[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for quiet in ("werkzeug", "testbed.standins.kubelet"):
        logging.getLogger(quiet).setLevel(logging.ERROR)
    known = benchmarks()
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    ran = code()  # the commit as the benchmark starts: the tree may move while it runs
    if argv and argv[0] in known:
        record(argv[0], known[argv[0]](argv[1:]), argv, ran)
        return 0
    if argv:
        print(f"unknown benchmark {argv[0]!r}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    for name in DEFAULT:
        record(name, known[name]([]), [name], ran)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
