"""What a resync pass holds in memory at once, by the page size of its LISTs.

``python -m bench resync-memory --tenants 1000 --pages 500,100`` makes the settled fleet as
``bench resync`` does, then runs resync's pass in this process, as tenant-resync (its
kubeconfig, its RBAC), with ``tracemalloc`` on: for each page size (``PAGE``, items per LIST
request), twice, the peak of Python objects during a whole pass and during its LISTs alone (the
Tenants, then the fleet's reads), what is left after it, and the pass time (slower than in the
function: tracemalloc traces every allocation). A gunicorn worker keeps the memory it once held,
so the peak is what its resident size follows. Then, at the product's page size, what a pass
holds at its fullest moment (the fleet's reads, its last page of Tenants, what it keeps of the
pages before), by the line that allocated it.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import tracemalloc
from collections import Counter
from collections.abc import Sequence
from typing import Any
from unittest import mock

from cloudevents.core.base import BaseCloudEvent

from functions import resync
from shared.adapters.kube import Kube, calls
from shared.adapters.vcluster_api import VClusterApi
from shared.settings import Settings
from testbed.local.stack import StackOptions, start_stack

from .report import Table, spread, table
from .resync import settled_fleet


class _Settled:
    """The pass's sink: a settled fleet re-drives nothing."""

    def send(self, event: BaseCloudEvent) -> None:
        raise RuntimeError(f"the pass re-drove {event.get_type()}: the copies are not settled")


def _passes(kube: Kube, settings: Settings, api: VClusterApi) -> tuple[str, ...]:
    """Two passes at the current page size: the peak of a whole pass, of its LISTs alone, what is
    left after it (MiB), and the pass time."""
    whole, lists, left, seconds = [], [], [], []
    for _ in range(2):
        gc.collect()
        tracemalloc.reset_peak()
        began = time.perf_counter()
        resync.resync(kube, _Settled(), settings, vcluster=api)
        seconds.append(time.perf_counter() - began)
        whole.append(tracemalloc.get_traced_memory()[1])
        gc.collect()
        left.append(tracemalloc.get_traced_memory()[0])
        tracemalloc.reset_peak()
        for page in kube.tenant_pages(settings.tenant_namespace):  # as the pass reads them
            del page
        fleet = resync.FleetReads.read(kube, settings)
        lists.append(tracemalloc.get_traced_memory()[1])
        del fleet
    mib = [spread(x, scale=2**-20, digits=1) for x in (whole, lists, left)]
    return (*mib, spread(seconds, digits=2))


def _held(kube: Kube, settings: Settings, api: VClusterApi, fleet_size: int, top: int = 12) -> Table:
    """What a pass holds at its fullest moment, by the line that allocated it: the fleet's reads,
    its last page of Tenants with their ``Drift``s (the probes done), and what it keeps of the
    pages before (``resync.Tally``), as the last page is about to be re-driven."""
    fullest: list[tracemalloc.Snapshot] = []
    converge = resync.converge_all

    def converging(*args: Any, **kwargs: Any) -> Counter[str]:
        fullest.clear()
        gc.collect()
        fullest.append(tracemalloc.take_snapshot())
        return converge(*args, **kwargs)

    gc.collect()
    before = tracemalloc.take_snapshot()
    with mock.patch.object(resync, "converge_all", converging):
        resync.resync(kube, _Settled(), settings, vcluster=api)
    ours = (tracemalloc.Filter(False, tracemalloc.__file__),)
    held = fullest[-1].filter_traces(ours).compare_to(before.filter_traces(ours), "lineno")
    total = sum(d.size_diff for d in held)
    rows = [
        (f"{os.path.relpath(d.traceback[0].filename)}:{d.traceback[0].lineno}", f"{d.size_diff / 2**20:.2f}",
         f"{d.count_diff}", f"{d.size_diff / max(1, fleet_size):.0f}")
        for d in sorted(held, key=lambda d: d.size_diff, reverse=True)[:top]
    ]  # fmt: skip
    fullest.clear()
    return table(
        "What a pass holds at its fullest moment, by the line that allocated it (the largest; tracemalloc)",
        ("line", "MiB", "objects", "bytes per Tenant"),
        rows,
        (
            f"{total / 2**20:.1f} MiB in all: the fleet's reads, the last page of Tenants and their Drifts, and "
            f"what the pass keeps of each Tenant before it (Tally), with PAGE = {calls.PAGE}.",
        ),
    )


def main(argv: Sequence[str]) -> list[Table]:
    parser = argparse.ArgumentParser(prog="python -m bench resync-memory", description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--pages", default="500,100", help="page sizes to compare, comma-separated")
    args = parser.parse_args(argv)
    pages = [int(p) for p in args.pages.split(",")]
    options = StackOptions(vcluster_boot_seconds=0, ready_poll_seconds=1, resync_at_start=False, log_level="WARNING")
    rows = []
    with start_stack(options) as stack:
        settings, _ = settled_fleet(stack, args.tenants)
        cluster_network = {"HTTPS_PROXY": stack.proxy.url, "NO_PROXY": "127.0.0.1,localhost"}
        kube = Kube.connect(stack.function_kubeconfigs["tenant-resync"])
        try:
            with mock.patch.dict(os.environ, cluster_network):
                api = VClusterApi()
                resync.resync(kube, _Settled(), settings, vcluster=api)  # warm: imports, connections, caches
                tracemalloc.start(1)
                for page in pages:
                    with mock.patch.object(calls, "PAGE", page):
                        rows.append((str(page), *_passes(kube, settings, api)))
                held = _held(kube, settings, api, args.tenants + 1)
        finally:
            tracemalloc.stop()
            kube.close()
    return [
        held,
        table(
            f"resync's pass over {args.tenants + 1} settled Tenants: Python objects held at once, by page size "
            "(2 passes each: median (min-max))",
            (
                "items per LIST page",
                "peak, whole pass (MiB)",
                "peak, its LISTs alone (MiB)",
                "left after (MiB)",
                "pass (s), traced",
            ),  # fmt: skip
            rows,
            (
                "tracemalloc in this process, which runs resync's pass as tenant-resync (its kubeconfig); the LISTs "
                "alone: the Tenants a page at a time, then FleetReads (StatefulSets, stored kubeconfigs, the chart's "
                "policies).",
                f"The product ships PAGE = {calls.PAGE} (shared/adapters/kube/calls.py).",
            ),
        ),
    ]
