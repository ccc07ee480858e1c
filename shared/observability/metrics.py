"""Prometheus metrics: the original operator's names, and what someone on call needs.

controller-runtime exported ``controller_runtime_reconcile_total{controller,result}``,
``controller_runtime_reconcile_errors_total{controller}`` and
``controller_runtime_reconcile_time_seconds{controller}``; each function counts its own event
deliveries under the same names, ``controller`` being the function's name, so existing
dashboards and alerts keep working. ``result`` is ``success``, ``requeue`` (a temporary answer
that the broker re-delivers) or ``error``.

The rest are this project's (prefix ``kubeopera_tenant``), each answering one question:

=============================================================  ===============================================
metric                                                         answers
=============================================================  ===============================================
``kubeopera_tenant_deliveries_total{function,type,code}``      what the broker delivered, and what we answered
``kubeopera_tenant_helm_operations_total{operation,outcome}``  what helm did (installed, upgraded, unchanged,
                                                               uninstalled, absent, error)
``kubeopera_tenant_helm_operation_seconds{operation}``         how long helm took
``kubeopera_tenant_chart_loads_total{source}``                 chart downloads (``registry``) against reuse of
                                                               the chart cache on disk (``cache``)
``kubeopera_tenant_phase_transitions_total{from_phase,to_phase}``  how Tenants move between phases
``kubeopera_tenant_ready_polls_total``                         check-ready polls that found the vCluster not up
``kubeopera_tenant_time_to_ready_seconds``                     provisioning began -> vCluster ready
``kubeopera_tenant_callbacks_total{outcome}``                  kubeopera-api callbacks delivered or failed
``kubeopera_tenants{phase}``                                   Tenants by phase, counted by resync on each tick
``kubeopera_tenant_kubeconfigs_expiring{within}``              Ready Tenants whose kubeconfig's client
                                                               certificate expires within ``30d`` (resync)
``kubeopera_tenant_kubeconfig_soonest_expiry_seconds``         seconds until the first of them expires (resync)
``kubeopera_tenant_rollout{state}``                            Tenants by rollout state (done, waiting, in
                                                               progress, halted, outside), resync's last tick
``kubeopera_tenant_rollout_halted{tenant}``                    1 for the Tenant where a fleet upgrade halted
``kubeopera_tenant_resync_pass_seconds``                       how long resync's last pass took
``kubeopera_tenant_vcluster_hints_total{outcome}``              vCluster changes the vCluster watch sent to
                                                               check-ready (sent), lost (failed), or ignored
``kubeopera_tenant_vcluster_watch_lists_total``                 the vCluster watch's LISTs (start, and after
                                                               each expired watch)
=============================================================  ===============================================

Under gunicorn with several workers the metrics are kept in ``PROMETHEUS_MULTIPROC_DIR``
(prometheus_client's multiprocess mode; ``functions/gunicorn_conf.py`` sets it to a fresh folder
under ``/tmp``, an emptyDir in every Service, unless the Service does), and ``/metrics`` adds up
every worker's (:func:`exposition`). Without it (a Flask test client) the default registry is used.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
REFUSAL_REASONS = ("no-token", "invalid", "audience", "expired", "subject")  # shared.delivery.senders.Refused
CONTENT_TYPE = CONTENT_TYPE_LATEST

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

DELIVERIES = Counter(
    "kubeopera_tenant_deliveries_total",
    "Events delivered to a function, by CloudEvent type and the HTTP status it answered",
    ["function", "type", "code"],
)
REFUSED = Counter(
    "kubeopera_tenant_deliveries_refused_total",
    "Requests refused before they were read because the sender is not the broker (shared.delivery.senders)",
    ["function", "reason"],
)
HELM_OPERATIONS = Counter(
    "kubeopera_tenant_helm_operations_total",
    "helm operations by kind and outcome",
    ["operation", "outcome"],
)
HELM_SECONDS = Histogram(
    "kubeopera_tenant_helm_operation_seconds",
    "How long a helm operation took",
    ["operation"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
CHART_LOADS = Counter(
    "kubeopera_tenant_chart_loads_total",
    "The pinned chart loaded by a process: downloaded from the registry, or found in the cache on disk",
    ["source"],
)
PHASE_TRANSITIONS = Counter(
    "kubeopera_tenant_phase_transitions_total",
    "Tenant phase changes written by the functions",
    ["from_phase", "to_phase"],
)
READY_POLLS = Counter(
    "kubeopera_tenant_ready_polls_total",
    "check-ready polls that found the vCluster not up yet (each one is a delayed re-delivery)",
)
TIME_TO_READY = Histogram(
    "kubeopera_tenant_time_to_ready_seconds",
    "From the start of provisioning (install's helm release) to the vCluster found ready",
    buckets=(5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900),
)
CALLBACKS = Counter(
    "kubeopera_tenant_callbacks_total",
    "kubeopera-api callbacks by outcome (delivered or failed)",
    ["outcome"],
)
VCLUSTERS = Gauge(
    "kubeopera_tenant_vclusters",
    "Ready Tenants' vClusters by whether they work now (condition VClusterAvailable), as resync's last tick read them",
    ["available"],
    multiprocess_mode="livemostrecent",
)
TENANTS = Gauge(
    "kubeopera_tenants",
    "Tenants by phase, as resync counted them on its last tick",
    ["phase"],
    multiprocess_mode="livemostrecent",
)

KUBECONFIGS_EXPIRING = Gauge(
    "kubeopera_tenant_kubeconfigs_expiring",
    "Ready Tenants whose stored kubeconfig's client certificate expires within the window, as of resync's last tick",
    ["within"],
    multiprocess_mode="livemostrecent",
)
KUBECONFIG_SOONEST_EXPIRY = Gauge(
    "kubeopera_tenant_kubeconfig_soonest_expiry_seconds",
    "Seconds until the first Ready Tenant's kubeconfig client certificate expires, as of resync's last tick",
    multiprocess_mode="livemostrecent",
)
RESYNC_PASS = Gauge(
    "kubeopera_tenant_resync_pass_seconds",
    "How long resync's last pass took (tenant-resync's timeoutSeconds, 600, cuts a longer one)",
    multiprocess_mode="livemostrecent",
)
ORPHANED_NAMESPACES = Gauge(
    "kubeopera_tenant_orphaned_namespaces",
    "vcluster-* namespaces whose owner Tenant no longer exists, as of resync's last tick (each is sent "
    "to cleanup once older than ORPHAN_GRACE_SECONDS)",
    multiprocess_mode="livemostrecent",
)
ROLLOUT = Gauge(
    "kubeopera_tenant_rollout",
    "Tenants by where they are in a fleet upgrade (shared.model.rollout.State), as of resync's last tick",
    ["state"],
    multiprocess_mode="livemostrecent",
)
ROLLOUT_HALTED = Gauge(
    "kubeopera_tenant_rollout_halted",
    "1 for the Tenant where the fleet upgrade halted (0 once resumed), as of resync's last tick",
    ["tenant"],
    multiprocess_mode="livemostrecent",
)
VCLUSTER_HINTS = Counter(
    "kubeopera_tenant_vcluster_hints_total",
    "vCluster StatefulSet changes the vCluster watch heard that may move readiness: sent to check-ready "
    "(sent), lost because the broker did not take them (failed; the poll covers), or naming no Tenant "
    "this installation serves (ignored)",
    ["outcome"],
)
VCLUSTER_WATCH_LISTS = Counter(
    "kubeopera_tenant_vcluster_watch_lists_total",
    "LISTs of the vClusters' StatefulSets by the vCluster watch: one at start, one after each watch the API "
    "server expired (410)",
)
ORPHANS_REMOVED = Counter(
    "kubeopera_tenant_orphans_removed_total",
    "Objects left behind by a Tenant that no longer exists, removed by cleanup",
    ["kind"],
)


def start(function: str) -> None:
    """The series a function's alerts and dashboards read, at zero from the moment it starts, so
    a pod's first error or callback failure is an increase, not a series born at one."""
    for result in ("success", "requeue", "error"):
        RECONCILE_TOTAL.labels(function, result)
    RECONCILE_ERRORS.labels(function)
    RECONCILE_TIME.labels(function)
    for outcome in ("delivered", "failed"):
        CALLBACKS.labels(outcome)
    for reason in REFUSAL_REASONS:
        REFUSED.labels(function, reason)


def exposition() -> bytes:
    """The text of ``/metrics``: every worker's metrics added up in multiprocess mode."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest(REGISTRY)
