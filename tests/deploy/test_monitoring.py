"""deploy/monitoring: the alert rules pass ``promtool check rules`` and their unit tests
(deploy/monitoring/tests/alerts.test.yaml, ``promtool test rules``), every PromQL expression of
the Grafana dashboard parses, and every metric the alerts and the dashboard read is one that
shared/observability/metrics.py defines.

The promtool checks are marked ``integration`` (promtool is a built tool, from
``testbed.toolchain``); the metric-name checks need nothing. The files as data are in
tests/deploy/monitoring.py, which the end-to-end tests use too (the names really scraped)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from testbed import toolchain

from .monitoring import (
    ALERTS_TEST,
    DASHBOARD,
    RULE_FILE,
    alert_rule_file,
    alert_rules,
    dashboard_exprs,
    defined_metric_names,
    metric_names,
    monitored_metric_names,
    without_grafana_variables,
)

EXPECTED_ALERTS = {
    "KubeoperaTenantProvisioningTooLong",
    "KubeoperaTenantFailed",
    "KubeoperaTenantCallbackFailures",
    "KubeoperaTenantFunctionErrors",
    "KubeoperaTenantDeadLetters",
    "KubeoperaTenantKubeconfigExpiring",
    "KubeoperaTenantVClusterUnavailable",
    "KubeoperaTenantRolloutHalted",
    "KubeoperaTenantResyncSlow",
    "KubeoperaTenantVClusterWatchDown",
    "KubeoperaTenantVClusterHintsLost",
}
SEVERITIES = {"info", "warning", "critical"}

# --- promtool -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def promtool() -> Path:
    return toolchain.ensure_all().promtool


def run_promtool(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def output(result: subprocess.CompletedProcess[str]) -> str:
    return f"promtool exited {result.returncode}\n{result.stdout}{result.stderr}"


def write_rule_file(folder: Path) -> Path:
    path = folder / RULE_FILE
    path.write_text(yaml.safe_dump(alert_rule_file(), sort_keys=False, width=1000), encoding="utf-8")
    return path


def check_recording_rules(promtool: Path, exprs: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    """``promtool check rules`` on a rule file of one recording rule per expression."""
    rules = [{"record": f"dashboard:expr_{i}", "expr": expr} for i, expr in enumerate(exprs)]
    path = folder / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    return run_promtool(promtool, "check", "rules", path.name, cwd=folder)


@pytest.mark.integration
def test_alert_rules_pass_promtool_check(promtool: Path, tmp_path: Path) -> None:
    path = write_rule_file(tmp_path)
    result = run_promtool(promtool, "check", "rules", path.name, cwd=tmp_path)
    assert result.returncode == 0, output(result)
    assert f"SUCCESS: {len(EXPECTED_ALERTS)} rules found" in result.stdout, output(result)


@pytest.mark.integration
def test_alert_unit_tests_pass(promtool: Path, tmp_path: Path) -> None:
    """deploy/monitoring/tests/alerts.test.yaml: each alert fired by a synthetic series and quiet
    on a healthy one, the scale-to-zero cases included."""
    write_rule_file(tmp_path)
    (tmp_path / ALERTS_TEST.name).write_text(ALERTS_TEST.read_text(encoding="utf-8"), encoding="utf-8")
    result = run_promtool(promtool, "test", "rules", ALERTS_TEST.name, cwd=tmp_path)
    assert result.returncode == 0, output(result)
    assert "SUCCESS" in result.stdout and "FAILED" not in result.stdout, output(result)


@pytest.mark.integration
def test_every_dashboard_expression_parses(promtool: Path, tmp_path: Path) -> None:
    exprs = dashboard_exprs()
    assert exprs, f"{DASHBOARD} has no PromQL target"
    result = check_recording_rules(promtool, [without_grafana_variables(e) for e in exprs.values()], tmp_path)
    numbered = "\n".join(f"dashboard:expr_{i}: {where}" for i, where in enumerate(exprs))
    assert result.returncode == 0, f"{output(result)}\n{numbered}"
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout, output(result)


@pytest.mark.integration
def test_the_dashboard_check_catches_a_typo(promtool: Path, tmp_path: Path) -> None:
    """The check above fails on a broken expression (it is not vacuous)."""
    result = check_recording_rules(promtool, ["sum(rate(kubeopera_tenant_ready_polls_total[5m])"], tmp_path)
    assert result.returncode != 0, output(result)


# --- no tool needed -------------------------------------------------------------------------


def test_the_expected_alerts_with_severity_and_annotations() -> None:
    rules = alert_rules()
    assert set(rules) == EXPECTED_ALERTS
    for name, rule in rules.items():
        assert rule.get("labels", {}).get("severity") in SEVERITIES, f"{name}: no severity label"
        annotations = rule.get("annotations", {})
        for key in ("summary", "description"):
            assert str(annotations.get(key, "")).strip(), f"{name}: no {key} annotation"


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    tests = yaml.safe_load(ALERTS_TEST.read_text(encoding="utf-8"))
    assert tests["rule_files"] == [RULE_FILE]
    firing: set[str] = set()
    quiet: set[str] = set()
    for group in tests["tests"]:
        for case in group.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert firing == EXPECTED_ALERTS, f"no firing case for {EXPECTED_ALERTS - firing}"
    assert quiet == EXPECTED_ALERTS, f"no quiet case for {EXPECTED_ALERTS - quiet}"


def test_metric_names_finds_the_names_in_an_expression() -> None:
    expr = (
        'sum(rate(kubeopera_tenant_callbacks_total{outcome="failed", controller="kubeopera_tenant_x"}[5m]))'
        " / on() max(kubeopera_tenants) + controller_runtime_reconcile_total offset 5m"
        " + other_kubeopera_tenant_metric"
    )
    assert metric_names(expr) == {
        "kubeopera_tenant_callbacks_total",
        "kubeopera_tenants",
        "controller_runtime_reconcile_total",
    }


def test_the_monitoring_reads_only_metrics_the_functions_export() -> None:
    used = monitored_metric_names()
    defined = defined_metric_names()
    assert "kubeopera_tenants" in defined and "controller_runtime_reconcile_time_seconds_bucket" in defined
    assert used, "the alerts and the dashboard read no metric of ours"
    unknown = {metric: sorted(where) for metric, where in used.items() if metric not in defined}
    assert not unknown, f"read but not defined in shared/observability/metrics.py: {unknown}"
    for name in EXPECTED_ALERTS:
        assert any(f"alerts.yaml: {name}" in where for where in used.values()), f"{name} reads no metric of ours"
