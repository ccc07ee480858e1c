"""Fleet upgrades in waves (issue 28 item 2) on the real stack: ten Ready Tenants, the stand-in
chart published to the test bed's registry as a new version and install and resync restarted with
``VCLUSTER_CHART_VERSION`` set to it (the ConfigMap edited and the Services rolled), at most two
upgrades at a time (``ROLLOUT_MAX_PARALLEL=2``, read from helm's release records and the Tenants'
Ready times), one Tenant whose upgrade helm refuses (its schema's error, from a wrapper of helm)
halts the rest, ``rollout resume`` after its fix finishes; the status fields after.

resync starts the rollout and notify-api's replies carry it on, each Ready after an upgrade asking
install for the next Tenant; this module sends resync's ticks itself (the PingSource's schedule is
held), as the schedule would, so that a slot two replies left to one Tenant is filled too.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from datetime import datetime
from pathlib import Path
from typing import TypeVar

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

T = TypeVar("T")

COUNT = 10  # the fleet
PARALLEL = 2
NEW_VERSION = "0.21.3"
OLD_VERSION = "0.21.2"
FAILING = "ro-02"  # in the second wave (the waves go by name)


def helm_that_refuses(folder: Path, real: Path) -> Path:
    """The stack's HELM_EXECUTABLE: helm, except that while ``folder/refuse`` exists an upgrade of
    ``vc-ro-02`` fails as helm does when the chart's schema refuses a value (install: Failed at once)."""
    script = folder / "helm-that-refuses"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1 $2" = "upgrade vc-{FAILING}" ] && [ -e "{folder}/refuse" ]; then\n'
        '  echo "Error: values don\'t meet the specifications of the schema(s) in the following chart(s):" >&2\n'
        '  echo "vcluster:" >&2\n'
        '  echo "- controlPlane.statefulSet.resources: refused for this test" >&2\n'
        "  exit 1\n"
        "fi\n"
        f'exec {real} "$@"\n'
    )
    script.chmod(0o755)
    return script


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm")


@pytest.fixture(scope="module")
def pipeline(toolchain: Toolchain, refusing: Path) -> Iterator[Stack]:
    options = StackOptions(
        api_token="rollout-token",
        vcluster_boot_seconds=2,
        ready_poll_seconds=1,
        function_env={
            "ROLLOUT_MAX_PARALLEL": str(PARALLEL),
            "HELM_EXECUTABLE": str(helm_that_refuses(refusing, toolchain.helm)),
        },
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


def at_rest(kube: Kube, failed: AbstractSet[str] = frozenset()) -> dict[str, Tenant] | None:
    """The fleet when nothing moves: ``failed`` Failed, every other Tenant Ready."""
    now = tenants(kube)
    for name, tenant in now.items():
        phase = tenant.status.phase.value
        if phase != ("Failed" if name in failed else "Ready"):
            return None
    return now


def on_new(fleet: dict[str, Tenant]) -> set[str]:
    return {n for n, t in fleet.items() if t.status.chart_version == NEW_VERSION}


def until(pipeline: Stack, what: str, probe: Callable[[], T | None], timeout: float = 240) -> T:
    """``probe`` true, with a resync pass now and then as the PingSource's ticks would send: the
    waves go on from notify-api's replies; a pass fills a slot two replies left to one Tenant."""
    deadline = time.monotonic() + timeout
    while True:
        pipeline.resync(settle=False)
        try:
            return wait_for(what, probe, timeout=min(20.0, max(1.0, deadline - time.monotonic())))
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def concurrent(started: dict[str, datetime], ready: dict[str, datetime]) -> int:
    """The most upgrades running at once: each from its release record to its Ready (both whole
    seconds; an upgrade that starts in the second another became Ready does not overlap it)."""
    return max(sum(1 for other in started if started[other] <= started[name] < ready[other]) for name in started)


def rollout_command(pipeline: Stack, capsys: pytest.CaptureFixture[str], *command: str) -> str:
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
    pipeline: Stack, kube: Kube, refusing: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    begun = time.monotonic()
    for i, name in enumerate(names()):
        pipeline.kubectl("apply", "-f", "-", input=tenant_yaml(name, cs(i)))
    first = wait_for("ten Tenants Ready", lambda: at_rest(kube), timeout=240)
    print(f"{COUNT} Tenants Ready in {time.monotonic() - begun:.0f}s")
    assert {t.status.chart_version for t in first.values()} == {OLD_VERSION}
    digests = {n: t.status.values_digest for n, t in first.items()}
    assert all(digests.values())
    wide = pipeline.kubectl("get", "kt", "-n", TENANT_NAMESPACE, "-o", "wide")
    assert wide.splitlines()[0].split()[6:9] == ["CHART", "VALUES", "ROLLOUT"], wide

    publish(pipeline, tmp_path, NEW_VERSION)
    for service in ("tenant-install", "tenant-resync"):
        pipeline.restart_function(service, {"VCLUSTER_CHART_VERSION": NEW_VERSION})
    (refusing / "refuse").touch()  # from now on helm refuses ro-02's upgrade

    # the first waves; ro-02's upgrade fails and halts the rollout: nothing after it is touched
    halted = until(
        pipeline,
        "the rollout halted at ro-02",
        lambda: (
            fleet
            if (fleet := at_rest(kube, {FAILING})) is not None
            and exists(pipeline, "lease", "rollout-halted", "-n", TENANT_NAMESPACE)
            else None
        ),
    )
    assert {"ro-00", "ro-01"} <= on_new(halted) <= {"ro-00", "ro-01", "ro-03"}, on_new(halted)
    for _ in range(2):  # each pass, and all it sent, answered: nothing is
        pipeline.resync()
    # ro-03 may have taken its slot beside ro-02 before the halt was recorded: its upgrade goes on
    # (perhaps after the snapshot above) and its status says so; nothing after it starts
    done = on_new(wait_for("the fleet at rest", lambda: at_rest(kube, {FAILING}), timeout=60))
    assert {"ro-00", "ro-01"} <= done <= {"ro-00", "ro-01", "ro-03"}, done
    assert set(upgraded(pipeline)) == done, "every release upgraded says so in its status; no further Tenant is touched"
    halted_events = [
        e
        for e in json.loads(pipeline.kubectl("get", "events", "-n", TENANT_NAMESPACE, "-o", "json"))["items"]
        if e["reason"] == "RolloutHalted"
    ]
    assert [e["involvedObject"]["name"] for e in halted_events] == [FAILING]
    metrics = requests.get(f"{pipeline.function_urls['tenant-resync']}metrics", timeout=10).text
    assert f'kubeopera_tenant_rollout_halted{{tenant="{FAILING}"}} 1.0' in metrics
    table = rollout_command(pipeline, capsys, "status")
    assert f"{len(done)} done, {COUNT - 1 - len(done)} waiting, 0 in progress, 1 halted" in table, table
    assert f"HALTED at Tenant {FAILING}: " in table and "the chart rejected the values" in table, table

    # fixed and retried, it is Ready on the new chart; the halt lasts until resumed
    (refusing / "refuse").unlink()
    assert cli.main(["retry", FAILING, "--kubeconfig", str(pipeline.admin_kubeconfig)]) == 0
    wait_for(f"{FAILING} Ready again", lambda: phase_of(kube, FAILING, "Ready"), timeout=120)
    pipeline.resync()
    assert set(upgraded(pipeline)) == done | {FAILING}, "still halted"
    assert "removed the halt at Tenant ro-02" in rollout_command(pipeline, capsys, "resume")

    after = until(
        pipeline,
        "every Tenant on the new chart",
        lambda: fleet if (fleet := at_rest(kube)) is not None and on_new(fleet) == set(names()) else None,
    )
    started = upgraded(pipeline)
    assert sorted(started) == names()
    ready = {n: parse_time(t.status.last_synced_at) for n, t in after.items()}
    assert concurrent(started, {n: r for n, r in ready.items() if r is not None}) <= PARALLEL
    origin = min(started.values())
    lines = ["the rollout (s after the first upgrade; helm's v2 record, then the Tenant's last write at Ready):"]
    for n in sorted(started, key=started.__getitem__):
        at = ready[n]
        span = f"{(at - origin).total_seconds():4.0f}" if at is not None else "   ?"
        lines.append(f"  {n}  upgrade {(started[n] - origin).total_seconds():4.0f}  ready {span}")
    with capsys.disabled():  # the report's, not the CLI output the test reads
        print("\n" + "\n".join(lines))
    assert {n: t.status.values_digest for n, t in after.items()} == digests, "the values did not change"
    assert {t.status.rollout for t in after.values()} == {""}
    wide = pipeline.kubectl("get", "kt", "-n", TENANT_NAMESPACE, "-o", "wide", "--no-headers")
    assert all(NEW_VERSION in line for line in wide.splitlines() if line.startswith("ro-")), wide
    assert "10 done, 0 waiting, 0 in progress, 0 halted" in rollout_command(pipeline, capsys, "status")
    assert not exists(pipeline, "lease", "rollout-halted", "-n", TENANT_NAMESPACE)
