"""Knative's own defaulting and validation (knative.dev/eventing and knative.dev/serving, at the
versions pinned in testbed/toolchain/versions.py) accept every Knative object we ship, through
tools/knative-check; and the checker really rejects broken objects, so a pass means something."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from shared.model import lifecycle

from .manifests import (
    CONFIG_FEATURES_PATCH,
    DEPLOY,
    EVENTING,
    KAFKA_BROKER,
    OVERLAYS,
    SERVICES,
    TRIGGERS,
    WITHOUT_RETRYAFTER,
    WITHOUT_SENDER_IDENTITY,
    documents,
    file_documents,
    render_prod_with,
    run_checker,
)

# Broker, its EventPolicy, the ApiServerSource, PingSource, two SinkBindings, and a Trigger per step
# and per step's hint Trigger
TRIGGER_COUNT = len(lifecycle.STEPS) + sum(bool(step.hints) for step in lifecycle.STEPS)
EVENTING_OBJECTS = 6 + TRIGGER_COUNT
RENDERED_OBJECTS = (
    EVENTING_OBJECTS + len(lifecycle.STEPS) + 2
)  # the above, a Service per step, dead-letter's and the vCluster watch's


def _ok_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("OK")]


def test_eventing_folder_passes(knative_check: Path) -> None:
    proc = run_checker(knative_check, EVENTING)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(_ok_lines(proc.stdout)) == EVENTING_OBJECTS, proc.stdout
    assert "FAIL" not in proc.stdout


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_overlay_passes(knative_check: Path, rendered: Mapping[str, str], overlay: str) -> None:
    proc = run_checker(knative_check, "-", CONFIG_FEATURES_PATCH, stdin=rendered[overlay])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(_ok_lines(proc.stdout)) == RENDERED_OBJECTS, proc.stdout
    assert f"{RENDERED_OBJECTS} Knative objects checked, 0 failed" in proc.stdout


def test_check_ready_trigger_needs_the_retryafter_feature(knative_check: Path) -> None:
    """Without eventing/config-features-patch.yaml, Knative's webhook refuses retryAfterMax."""
    proc = run_checker(knative_check, TRIGGERS / "tenant-check-ready.yaml")
    assert proc.returncode == 1, proc.stdout
    assert "must not set the field(s): spec.delivery.retryAfterMax" in proc.stdout
    proc = run_checker(knative_check, TRIGGERS / "tenant-check-ready.yaml", CONFIG_FEATURES_PATCH)
    assert proc.returncode == 0, proc.stdout


def test_fallbacks_without_the_features_pass_without_them(knative_check: Path, kubectl: Path, tmp_path: Path) -> None:
    """A cluster with neither feature flag: both Components, no config-features patch."""
    rendered = render_prod_with(kubectl, tmp_path / "overlay", WITHOUT_RETRYAFTER, WITHOUT_SENDER_IDENTITY)
    proc = run_checker(knative_check, "-", stdin=rendered)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(_ok_lines(proc.stdout)) == RENDERED_OBJECTS - 1  # no EventPolicy


def test_the_eventpolicy_needs_the_oidc_feature(knative_check: Path) -> None:
    proc = run_checker(knative_check, EVENTING / "broker-eventpolicy.yaml")
    assert proc.returncode == 1, proc.stdout
    assert "oidc-authentication feature not enabled" in proc.stdout
    assert run_checker(knative_check, EVENTING / "broker-eventpolicy.yaml", CONFIG_FEATURES_PATCH).returncode == 0


def test_the_kafka_broker_component_selects_the_kafka_class(knative_check: Path, kubectl: Path, tmp_path: Path) -> None:
    rendered = render_prod_with(kubectl, tmp_path / "overlay", KAFKA_BROKER)
    proc = run_checker(knative_check, CONFIG_FEATURES_PATCH, "-", stdin=rendered)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (broker,) = [d for d in documents(rendered) if d["kind"] == "Broker"]
    assert broker["metadata"]["annotations"]["eventing.knative.dev/broker.class"] == "Kafka"
    assert broker["spec"]["config"] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "kafka-broker-config",
        "namespace": "knative-eventing",
    }
    assert broker["spec"]["delivery"]["deadLetterSink"]["ref"]["name"] == "tenant-dead-letter"
    # The Kafka broker honours no Retry-After: the polling Triggers come with a backoff of their own
    triggers = {d["metadata"]["name"]: d for d in documents(rendered) if d["kind"] == "Trigger"}
    for polling in ("tenant-check-ready", "tenant-cleanup"):
        delivery = triggers[polling]["spec"]["delivery"]
        assert "retryAfterMax" not in delivery, polling
        step = "PT10S" if polling == "tenant-check-ready" else "PT5S"
        assert (delivery["backoffPolicy"], delivery["backoffDelay"]) == ("linear", step), polling
    assert [name for name, t in triggers.items() if "retryAfterMax" in t["spec"]["delivery"]] == []


def _write(path: Path, doc: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def test_trigger_with_two_filter_dialects_in_one_entry_is_rejected(knative_check: Path, tmp_path: Path) -> None:
    (trigger,) = file_documents(TRIGGERS / "tenant-install.yaml")
    broken = copy.deepcopy(trigger)
    broken["spec"]["filters"] = [{"exact": {"type": "dev.knative.apiserver.resource.add"}, "prefix": {"kind": "Ten"}}]
    # With the features the Trigger ships for (its retryAfterMax needs delivery-retryafter).
    proc = run_checker(knative_check, CONFIG_FEATURES_PATCH, _write(tmp_path / "trigger.yaml", broken))
    assert proc.returncode == 1, proc.stdout
    assert "FAIL" in proc.stdout and "Trigger kubeopera-system/tenant-install" in proc.stdout
    assert "multiple dialects found, filters can have only one dialect set" in proc.stdout
    # The same Trigger with the filter as shipped passes: the dialects are the only difference.
    ok = run_checker(knative_check, CONFIG_FEATURES_PATCH, _write(tmp_path / "ok.yaml", trigger))
    assert ok.returncode == 0, ok.stdout


def test_service_with_container_concurrency_over_1000_is_rejected(knative_check: Path, tmp_path: Path) -> None:
    (service,) = file_documents(SERVICES / "tenant-install.yaml")
    broken = copy.deepcopy(service)
    broken["spec"]["template"]["spec"]["containerConcurrency"] = 1001
    proc = run_checker(knative_check, _write(tmp_path / "service.yaml", broken))
    assert proc.returncode == 1, proc.stdout
    assert "expected 0 <= 1001 <= 1000: spec.template.spec.containerConcurrency" in proc.stdout


def test_unknown_fields_are_rejected_like_the_webhook_does(knative_check: Path, tmp_path: Path) -> None:
    (service,) = file_documents(SERVICES / "tenant-check-ready.yaml")
    broken = copy.deepcopy(service)
    broken["spec"]["template"]["spec"]["containerConcurency"] = 10  # sic
    proc = run_checker(knative_check, _write(tmp_path / "service.yaml", broken))
    assert proc.returncode == 1, proc.stdout
    assert 'unknown field "containerConcurency"' in proc.stdout


def test_knative_kinds_it_does_not_know_fail_and_others_are_skipped(knative_check: Path, tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain, namespace: x}\n---\n"
        "apiVersion: sources.knative.dev/v1beta2\nkind: PingSource\nmetadata: {name: old, namespace: x}\n"
    )
    proc = run_checker(knative_check, path)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("SKIP") and "ConfigMap x/plain" in lines[0]
    assert lines[1].startswith("FAIL") and "does not know" in lines[1]


def test_every_knative_object_in_the_repo_is_checked(rendered: Mapping[str, str]) -> None:
    """The rendered overlays hold every Knative object of eventing/ and deploy/: none escapes."""
    knative = {
        (doc["kind"], doc["metadata"]["name"])
        for doc in documents(rendered["prod"])
        if doc["apiVersion"].split("/")[0].endswith(".knative.dev")
    }
    in_files = {
        (doc["kind"], doc["metadata"]["name"])
        for folder in (EVENTING, DEPLOY)
        for path in folder.rglob("*.yaml")
        for doc in file_documents(path)
        if str(doc.get("apiVersion", "")).split("/")[0].endswith(".knative.dev")
    }
    assert in_files == knative
    assert len(knative) == RENDERED_OBJECTS
