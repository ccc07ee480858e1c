"""The report an end-to-end failure carries (testbed.local.diagnosis): what it picks from the
functions' logs and the broker's deliveries, in what order, and that a section that cannot be
read says so instead of hiding the others."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from testbed.knative.broker_watch import Delivery
from testbed.local import diagnosis
from testbed.local.stack import Stack


def line(at: float, **fields: Any) -> str:
    stamp = datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    return json.dumps({"time": stamp, "level": "INFO", "logger": "x", **fields})


def delivery(at: float, status: int, **fields: Any) -> Delivery:
    values: dict[str, Any] = {
        "time": at,
        "finished": at + 0.25,
        "trigger": "tenant-check-ready",
        "target": "subscriber",
        "service": "tenant-check-ready",
        "event_id": "0123456789abcdef",
        "type": "io.kubeopera.tenant.provisioning",
        "subject": "kubeopera-system/alice",
        "status": status,
        "retry_after": "15" if status == 503 else None,
        "reply_type": "io.kubeopera.tenant.ready" if status == 200 else None,
    }
    return Delivery(**(values | fields))


def test_function_lines_are_the_tenants_and_the_answered_ones_since_the_start_in_time_order(tmp_path: Path) -> None:
    since = 1_800_000_000.0
    (tmp_path / "tenant-install.log").write_text(
        "\n".join(
            [
                line(since - 5, message="answered", status=200, type="old"),  # before the test
                "[2026-12-02 05:00:00 +0000] [1] [INFO] Booting worker with pid: 7",  # gunicorn's own
                line(since + 2, message="helm upgrade --install vc-alice", tenant="kubeopera-system/alice"),
                line(since + 1, message="metrics served"),  # about no Tenant
                line(
                    since + 3, message="answered", status=200, result="replied", type="add", id="abcdef0123", seconds=1
                ),
            ]
        )
    )
    (tmp_path / "tenant-check-ready.log").write_text(
        line(since + 2.5, message="waiting for the StatefulSet", tenant="kubeopera-system/alice", level="INFO")
    )
    pods = tmp_path / "tenant-notify-api"  # the cluster tier: one file per pod (testbed.cluster.podlogs)
    pods.mkdir()
    (pods / "tenant-notify-api-00001-deployment-a.log").write_text(
        line(since + 4, message="kubeopera-api answered 200", tenant="kubeopera-system/alice")
    )
    (pods / "tenant-notify-api-00001-deployment-b.log").write_text(
        line(since + 3.5, message="answered", status=200, result="replied", type="stored", id="1234567890", seconds=0)
    )
    services = ["tenant-install", "tenant-check-ready", "tenant-notify-api", "tenant-gone"]
    lines = diagnosis.function_log_lines(tmp_path, services, since)
    assert [entry.split(" ", 1)[1] for entry in lines] == [
        "tenant-install: INFO kubeopera-system/alice: helm upgrade --install vc-alice",
        "tenant-check-ready: INFO kubeopera-system/alice: waiting for the StatefulSet",
        "tenant-install: answered 200 replied add id=abcdef01 1s",
        "tenant-notify-api: answered 200 replied stored id=12345678 0s",
        "tenant-notify-api: INFO kubeopera-system/alice: kubeopera-api answered 200",
    ]


def test_deliveries_say_what_was_answered_since_the_start() -> None:
    since = 1_800_000_000.0
    lines = diagnosis.delivery_lines(
        [delivery(since - 10, 200), delivery(since + 1, 503), delivery(since + 16, 200)], since
    )
    assert len(lines) == 2
    assert lines[0].endswith(
        "tenant-check-ready -> tenant-check-ready (subscriber) kubeopera-system/alice "
        "io.kubeopera.tenant.provisioning id=01234567: 503 retrying retry-after=15"
    )
    assert lines[1].endswith(": 200 replied reply=io.kubeopera.tenant.ready")


def test_a_section_that_cannot_be_read_says_why_and_the_others_still_come(tmp_path: Path) -> None:
    def kubectl(*args: str) -> str:
        raise RuntimeError("connection refused\nmore")

    watch = SimpleNamespace(deliveries=lambda: [delivery(5.0, 503)])
    stack = cast(Stack, SimpleNamespace(kubectl=kubectl, watch=watch, log_dir=lambda: tmp_path, functions={}))
    report = diagnosis.explain(stack, since=0.0, max_lines=1).splitlines()
    assert report[0] == "--- Tenants now"
    assert report[1] == "(not available: RuntimeError: connection refused)"
    assert report[4] == "--- broker deliveries since the test started"
    assert report[5].endswith("503 retrying retry-after=15")
    assert report[-2:] == ["--- function log lines since the test started", "(none)"]
