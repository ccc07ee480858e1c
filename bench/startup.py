"""How long the local stack takes to come up, and what each of its processes holds in memory.

``python -m bench.startup --runs 3`` starts the whole stack (``testbed.local.stack``: control plane,
registry, Knative Eventing's processes, the functions, the sources' adapters) N times and prints a
table: the time from ``start_stack`` to everything Ready (median, min, max), and the resident
memory of each process once up (median over the runs; a function counts its gunicorn master and
workers). No test asserts these numbers.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections import defaultdict

from testbed.local.stack import StackOptions, start_stack
from testbed.processes.procfs import children, rss_mib


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("testbed.standins.kubelet").setLevel(logging.ERROR)
    ups: list[float] = []
    memory: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.runs):
        started = time.monotonic()
        with start_stack(StackOptions(vcluster_boot_seconds=0, ready_poll_seconds=1, log_level="WARNING")) as stack:
            ups.append(time.monotonic() - started)
            for process in stack.supervisor.processes:
                name = "pod-" + process.name.split("-", 2)[1] if process.name.startswith("pod-") else process.name
                memory[name].append(sum(rss_mib(pid) for pid in (process.pid, *children(process.pid))))
    print(f"\n| stack up ({args.runs} runs) | median s | min s | max s |")
    print("|---|---:|---:|---:|")
    print(f"| start_stack -> everything Ready | {statistics.median(ups):.1f} | {min(ups):.1f} | {max(ups):.1f} |")
    print("\n| process | RSS MiB (median) |")
    print("|---|---:|")
    for name, samples in sorted(memory.items()):
        print(f"| {name} | {statistics.median(samples):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
