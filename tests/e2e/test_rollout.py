"""Fleet upgrades in waves (issue 28 item 2) on the real stack: ten Ready Tenants, the stand-in
chart published to the test bed's registry as a new version and install and resync restarted with
``VCLUSTER_CHART_VERSION`` set to it (the ConfigMap edited and the Services rolled), at most two
upgrades at a time (``ROLLOUT_MAX_PARALLEL=2``, read from helm's release records and the Tenants'
Ready times), one Tenant whose new revision never comes up halts the rest, ``rollout resume``
after its fix finishes; the status fields after.

resync starts each wave; this module sends its ticks itself (the PingSource's schedule is held),
so a wave starts when the test says, never at a wall-clock tick.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from datetime import datetime
from pathlib import Path

import pytest
import requests
import yaml

from shared import cli
from shared.adapters.kube import Kube
from shared.model.tenant import Tenant, parse_time
from testbed.local.stack import TENANT_NAMESPACE, Stack, StackOptions, start_stack
from testbed.project import CHART_DIR
from testbed.registry import push_chart
from testbed.toolchain import Toolchain

from .support import exists, phase_of, tenant_yaml, wait_for

COUNT = 10  # the fleet
PARALLEL = 2
NEW_VERSION = "0.21.3"
OLD_VERSION = "0.21.2"
TIMEOUT_SECONDS = 40  # the failing Tenant's new revision is given this long
FAILING = "ro-02"  # in the second wave (the waves go by name)
NOT_READY = "standin.kubeopera.io/control-plane"  # testbed/standins/vcluster.py


@pytest.fixture(scope="module")
def pipeline(toolchain: Toolchain) -> Iterator[Stack]:
    options = StackOptions(
        api_token="rollout-token",
        vcluster_boot_seconds=2,
        ready_poll_seconds=1,
        provision_timeout_seconds=TIMEOUT_SECONDS,
        function_env={"ROLLOUT_MAX_PARALLEL": str(PARALLEL)},
    )
    with start_stack(options) as stack:
        assert stack.resync_schedule_held()
        yield stack


def names() -> list[str]:
    return [f"ro-{i:02d}" for i in range(COUNT)]


def cs(i: int) -> str:
    return f"70110070-0000-4000-8000-{i:012d}"


def tenants(kube: Kube) -> dict[str, Tenant]:
    return {t.name: t for t in kube.list_tenants(TENANT_NAMESPACE, "") if t.name.startswith("ro-")}


def upgraded(pipeline: Stack) -> dict[str, datetime]:
    """Each Tenant whose release has a second revision: when helm wrote its record (helm's Secret
    ``sh.helm.release.v1.vc-<t>.v2``), the upgrade's start."""
    found: dict[str, datetime] = {}
    for name in names():
        record = f"sh.helm.release.v1.vc-{name}.v2"
        out = pipeline.kubectl("get", "secret", record, "-n", f"vcluster-{name}", "--ignore-not-found", "-o", "json")
        if out.strip():
            made = parse_time(json.loads(out)["metadata"]["creationTimestamp"])
            assert made is not None
            found[name] = made
    return found


def settled(kube: Kube, done: AbstractSet[str], failed: AbstractSet[str] = frozenset()) -> dict[str, Tenant] | None:
    """The fleet once exactly ``done`` run the new chart, Ready (``failed``: Failed), the rest Ready."""
    now = tenants(kube)
    for name, tenant in now.items():
        phase = tenant.status.phase.value if tenant.status.phase else "Pending"
        want = "Failed" if name in failed else "Ready"
        if phase != want:
            return None
    on_new = {n for n, t in now.items() if t.status.chart_version == NEW_VERSION}
    return now if on_new == done | failed else None


def wave(
    pipeline: Stack, kube: Kube, done: AbstractSet[str], failed: AbstractSet[str] = frozenset(), timeout: float = 120
) -> None:
    pipeline.resync(settle=False)
    wait_for(f"the rollout to reach {sorted(done | failed)}", lambda: settled(kube, done, failed), timeout=timeout)


def concurrent(started: dict[str, datetime], ready: dict[str, datetime]) -> int:
    """The most upgrades running at once: each from its release record to its Ready (both whole
    seconds; an upgrade that starts in the second another became Ready does not overlap it)."""
    return max(sum(1 for other in started if started[other] <= started[name] < ready[other]) for name in started)


def rollout_status(pipeline: Stack, capsys: pytest.CaptureFixture[str], *command: str) -> str:
    capsys.readouterr()
    assert cli.main(["rollout", *command, "--kubeconfig", str(pipeline.admin_kubeconfig)]) == 0
    return capsys.readouterr().out


def publish(pipeline: Stack, folder: Path, version: str) -> None:
    """The stand-in chart as ``version``, pushed to the registry the stack's chart is in."""
    chart = folder / "vcluster"
    shutil.copytree(CHART_DIR, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = version
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    host = pipeline.chart_ref.removeprefix("oci://").split("/", 1)[0]
    assert push_chart(pipeline.tools, f"http://{host}", chart, folder / "push") == pipeline.chart_ref


def test_a_new_chart_version_rolls_out_in_waves_halts_at_a_failure_and_resumes(
    pipeline: Stack, kube: Kube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    begun = time.monotonic()
    for i, name in enumerate(names()):
        pipeline.kubectl("apply", "-f", "-", input=tenant_yaml(name, cs(i)))
    first = wait_for("ten Tenants Ready", lambda: settled(kube, set()), timeout=240)
    print(f"{COUNT} Tenants Ready in {time.monotonic() - begun:.0f}s")
    assert {t.status.chart_version for t in first.values()} == {OLD_VERSION}
    digests = {n: t.status.values_digest for n, t in first.items()}
    assert all(digests.values())

    publish(pipeline, tmp_path, NEW_VERSION)
    for service in ("tenant-install", "tenant-resync"):
        pipeline.restart_function(service, {"VCLUSTER_CHART_VERSION": NEW_VERSION})
    # the failing Tenant's new revision will never have a ready pod
    pipeline.kubectl("annotate", "statefulset", f"vc-{FAILING}", "-n", f"vcluster-{FAILING}", f"{NOT_READY}=not-ready")

    wave(pipeline, kube, {"ro-00", "ro-01"})
    waiting = tenants(kube)
    assert {n for n, t in waiting.items() if t.status.rollout == "Waiting"} == set(names()[2:])
    wide = pipeline.kubectl("get", "kt", "-n", TENANT_NAMESPACE, "-o", "wide")
    assert wide.splitlines()[0].split()[6:9] == ["CHART", "VALUES", "ROLLOUT"], wide

    # the second wave: ro-03 goes through, ro-02 fails at its timeout and halts the rollout
    wave(pipeline, kube, {"ro-00", "ro-01", "ro-03"}, {FAILING}, timeout=TIMEOUT_SECONDS + 120)
    pipeline.resync(settle=False)  # sees the Failed slot: records the halt, sends nothing
    wait_for("the halt record", lambda: exists(pipeline, "lease", "rollout-halted", "-n", TENANT_NAMESPACE))
    for _ in range(2):  # each pass, and all it sent, answered: nothing is
        pipeline.resync()
    assert sorted(upgraded(pipeline)) == ["ro-00", "ro-01", "ro-02", "ro-03"], "no further Tenant is touched"
    halted_events = [
        e
        for e in json.loads(pipeline.kubectl("get", "events", "-n", TENANT_NAMESPACE, "-o", "json"))["items"]
        if e["reason"] == "RolloutHalted"
    ]
    assert [e["involvedObject"]["name"] for e in halted_events] == [FAILING]
    metrics = requests.get(f"{pipeline.function_urls['tenant-resync']}metrics", timeout=10).text
    assert f'kubeopera_tenant_rollout_halted{{tenant="{FAILING}"}} 1.0' in metrics
    table = rollout_status(pipeline, capsys, "status")
    assert "3 done, 6 waiting, 0 in progress, 1 halted" in table, table
    assert f"HALTED at Tenant {FAILING}" in table

    # fixed and retried, it is Ready again; the halt lasts until resumed
    pipeline.kubectl("annotate", "statefulset", f"vc-{FAILING}", "-n", f"vcluster-{FAILING}", f"{NOT_READY}-")
    assert cli.main(["retry", FAILING, "--kubeconfig", str(pipeline.admin_kubeconfig)]) == 0
    wait_for(f"{FAILING} Ready again", lambda: phase_of(kube, FAILING, "Ready"), timeout=120)
    pipeline.resync()
    assert len(upgraded(pipeline)) == 4, "still halted"
    assert "removed the halt at Tenant ro-02" in rollout_status(pipeline, capsys, "resume")

    done = {"ro-00", "ro-01", "ro-02", "ro-03"}
    for more in (("ro-04", "ro-05"), ("ro-06", "ro-07"), ("ro-08", "ro-09")):
        done |= set(more)
        wave(pipeline, kube, done)

    started = upgraded(pipeline)
    assert sorted(started) == names()
    after = tenants(kube)
    ready = {n: parse_time(t.status.last_synced_at) for n, t in after.items()}
    assert concurrent(started, {n: r for n, r in ready.items() if r is not None}) <= PARALLEL
    assert {t.status.chart_version for t in after.values()} == {NEW_VERSION}
    assert {n: t.status.values_digest for n, t in after.items()} == digests, "the values did not change"
    assert {t.status.rollout for t in after.values()} == {""}
    wide = pipeline.kubectl("get", "kt", "-n", TENANT_NAMESPACE, "-o", "wide", "--no-headers")
    assert all(NEW_VERSION in line for line in wide.splitlines() if line.startswith("ro-")), wide
    assert "10 done, 0 waiting, 0 in progress, 0 halted" in rollout_status(pipeline, capsys, "status")
