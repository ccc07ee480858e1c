"""The monitoring files of deploy/monitoring as data: the alert rules (the PrometheusRule's
``spec``), the dashboard's expressions, and the metric names they read, against what
shared/observability/metrics.py defines. Used by tests/deploy/test_monitoring.py (promtool, definitions) and
the end-to-end tests (the names really scraped)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import yaml
from prometheus_client.metrics import MetricWrapperBase

from shared.observability import metrics

from .manifests import DEPLOY

MONITORING = DEPLOY / "monitoring"
ALERTS = MONITORING / "alerts.yaml"
ALERTS_TEST = MONITORING / "tests" / "alerts.test.yaml"
DASHBOARD = MONITORING / "dashboard.json"
RULE_FILE = "alerts.rules.yaml"  # what alerts.test.yaml's rule_files names

# Grafana's interval variables, which PromQL does not know; any duration parses the same.
GRAFANA_INTERVALS = re.compile(r"\$\{?(?:__rate_interval|__interval|__range)(?!\w)\}?")
METRIC_NAME = re.compile(r"(?<![\w:])(?:controller_runtime_|kubeopera_tenant)[\w:]*")
# The samples Prometheus stores for each kind of prometheus_client metric, by suffix.
SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("", "_count", "_sum"),
}


# --- the files ------------------------------------------------------------------------------


def alert_rule_file() -> dict[str, Any]:
    """The PrometheusRule's ``spec``: a plain Prometheus rule file."""
    (doc,) = yaml.safe_load_all(ALERTS.read_text(encoding="utf-8"))
    assert doc["kind"] == "PrometheusRule", f"{ALERTS}: not a PrometheusRule"
    spec: dict[str, Any] = doc["spec"]
    return spec


def alert_rules() -> dict[str, dict[str, Any]]:
    """Alert name -> its rule."""
    rules = [rule for group in alert_rule_file()["groups"] for rule in group["rules"]]
    by_name = {rule["alert"]: rule for rule in rules if "alert" in rule}
    assert len(by_name) == len(rules), "alerts.yaml holds a recording rule or an alert twice"
    return by_name


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # a collapsed row holds its panels


def dashboard_exprs() -> dict[str, str]:
    """``panel title / refId`` -> the PromQL expression of each target of the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            if "expr" in target:
                found[f"{panel.get('title', panel.get('id'))} / {target.get('refId', '?')}"] = target["expr"]
    return found


def without_grafana_variables(expr: str) -> str:
    return GRAFANA_INTERVALS.sub("5m", expr)


# --- metric names ---------------------------------------------------------------------------


def metric_names(expr: str) -> set[str]:
    """The metric names of this project (``controller_runtime_*``, ``kubeopera_tenant*``) that a
    PromQL expression reads. Label values and template text do not count: they are quoted or
    not part of a name (``controller="dead-letter"``)."""
    return set(METRIC_NAME.findall(_without_strings(expr)))


def _without_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def monitored_metric_names() -> dict[str, set[str]]:
    """Metric name -> where it is read (``alerts.yaml: <alert>``, ``dashboard.json: <panel>``)."""
    used: dict[str, set[str]] = {}
    for name, rule in alert_rules().items():
        for metric in metric_names(rule["expr"]):
            used.setdefault(metric, set()).add(f"alerts.yaml: {name}")
    for where, expr in dashboard_exprs().items():
        for metric in metric_names(expr):
            used.setdefault(metric, set()).add(f"dashboard.json: {where}")
    return used


def defined_metric_names() -> set[str]:
    """The sample names of every metric shared/observability/metrics.py defines, as Prometheus stores them
    (a counter ``x`` as ``x_total``, a histogram as ``x_bucket``, ``x_count``, ``x_sum``)."""
    names: set[str] = set()
    for collector in vars(metrics).values():
        if isinstance(collector, MetricWrapperBase):
            for family in collector.describe():
                names.update(family.name + suffix for suffix in SAMPLE_SUFFIXES[family.type])
    return names
