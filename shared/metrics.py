"""Prometheus metrics with the original operator's names (spec: Monitoring).

controller-runtime exported ``controller_runtime_reconcile_total{controller,result}``,
``controller_runtime_reconcile_errors_total{controller}`` and
``controller_runtime_reconcile_time_seconds{controller}``; each function counts its own event
deliveries under the same names, ``controller`` being the function's name, so existing
dashboards and alerts keep working. ``result`` is ``success``, ``requeue`` (a temporary answer
that the broker re-delivers) or ``error``.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller",
    ["controller", "result"],
)
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller",
    ["controller"],
)
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    ["controller"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 60),
)
