"""What tracing costs a delivery: the same Tenants provisioned with tracing off and on.

``python -m bench.tracing --tenants 6 --rounds 2`` starts the local stack alternately as shipped
(no ``OTEL_*``, tracing off) and with the functions sending their spans to the test bed's Jaeger
(``OTEL_EXPORTER_OTLP_ENDPOINT``), ``rounds`` times each. Each time it provisions N Tenants
(vCluster boot 2 s, poll 1 s) and reads every delivery the broker made off the wire (the
service proxy: request sent to answer received). It prints, per function, the median delivery
time off and on and the difference. No test asserts these numbers.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from shared.adapters.kube import Kube
from testbed.jaeger import start_jaeger
from testbed.local.runner import tracing_env
from testbed.local.stack import StackOptions, start_stack
from testbed.processes import Supervisor
from testbed.toolchain import ensure_all

from .workload import provision

FUNCTIONS = ("tenant-install", "tenant-check-ready", "tenant-store-kubeconfig", "tenant-notify-api")


@contextmanager
def _maybe_jaeger(on: bool) -> Iterator[dict[str, str]]:
    if not on:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="bench-jaeger-") as folder:
        run_dir = Path(folder)
        with Supervisor(run_dir / "logs") as supervisor, start_jaeger(ensure_all(), supervisor, run_dir) as jaeger:
            yield tracing_env(jaeger)


def measure(tracing: bool, tenants: int) -> dict[str, list[float]]:
    """Delivery times (seconds) per function, for ``tenants`` Tenants provisioned one by one."""
    with _maybe_jaeger(tracing) as env:
        options = StackOptions(vcluster_boot_seconds=2.0, ready_poll_seconds=1, resync_at_start=False, function_env=env)
        with start_stack(options) as stack:
            kube = Kube.connect(stack.admin_kubeconfig)
            try:
                for i in range(tenants):
                    provision(stack, kube, f"bench-{'on' if tracing else 'off'}-{i}", poll=0.2)
                stack.watch.wait_idle(timeout=30)
            finally:
                kube.close()
            times: dict[str, list[float]] = defaultdict(list)
            for delivery in stack.watch.deliveries():
                times[delivery.service].append(delivery.finished - delivery.time)
            return times


def table(off: Mapping[str, list[float]], on: Mapping[str, list[float]]) -> str:
    rows = [("function", "deliveries", "p50 off (ms)", "p50 on (ms)", "difference (ms)")]
    for service in FUNCTIONS:
        a, b = off.get(service, []), on.get(service, [])
        if not a or not b:
            continue
        p50_off, p50_on = statistics.median(a) * 1000, statistics.median(b) * 1000
        rows.append((service, f"{len(a)}/{len(b)}", f"{p50_off:.1f}", f"{p50_on:.1f}", f"{p50_on - p50_off:+.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)) for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tenants", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2, help="stacks started each way, alternating (default 2)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    off: dict[str, list[float]] = defaultdict(list)
    on: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.rounds):
        for tracing, into in ((False, off), (True, on)):
            for service, times in measure(tracing, args.tenants).items():
                into[service].extend(times)
    print(
        f"Delivery time, event sent by the broker to answer received: {args.tenants} Tenants per stack, "
        f"{args.rounds} stack(s) each way, alternating"
    )
    print(table(off, on))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
