"""shared.adapters.helm against the real helm CLI, the real registry and the real API server."""

from __future__ import annotations

import base64
import gzip
import json
import os
import secrets
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.helm import Helm
from shared.adapters.release import ReleaseRecords
from shared.errors import PermanentError, TemporaryError
from testbed.toolchain import Toolchain

from .conftest import MakeHelm

pytestmark = pytest.mark.integration


def released_values(toolchain: Toolchain, kubeconfig: Path, namespace: str, release: str) -> Any:
    """The user-supplied values of the release's current revision, as the helm CLI reports them."""
    argv = [str(toolchain.helm), f"--kubeconfig={kubeconfig}", "-n", namespace, "get", "values", release, "-o", "json"]
    return json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)


def test_same_values_make_no_new_revision_and_new_values_upgrade(
    helm: Helm, toolchain: Toolchain, kube_admin_kubeconfig: Path, test_namespace: str, tmp_path: Path
) -> None:
    assert helm.release("vc-a", test_namespace) is None
    values = {"controlPlane": {"statefulSet": {"resources": {"limits": {"cpu": "1"}}}}}
    first = helm.install_or_upgrade("vc-a", test_namespace, values)
    assert (first.revision, first.status, first.chart_version) == (1, "deployed", "0.21.2")
    again = helm.install_or_upgrade("vc-a", test_namespace, values)
    assert again.revision == 1
    values["controlPlane"]["statefulSet"]["resources"]["limits"]["cpu"] = "2"
    upgraded = helm.install_or_upgrade("vc-a", test_namespace, values)
    assert (upgraded.revision, upgraded.status) == (2, "deployed")
    assert released_values(toolchain, kube_admin_kubeconfig, test_namespace, "vc-a") == values
    # The chart was pulled once into the cache folder and is installed from there.
    assert (tmp_path / "charts" / "vcluster-0.21.2" / "Chart.yaml").is_file()


def test_values_the_chart_rejects_are_permanent(helm: Helm, test_namespace: str, tmp_path: Path) -> None:
    with pytest.raises(PermanentError, match="rejected the values"):
        helm.install_or_upgrade("vc-b", test_namespace, {"exportKubeConfig": {"enabled": True}, "bogus": 1})


def test_missing_chart_version_is_permanent(make_helm: MakeHelm, tmp_path: Path) -> None:
    """And a failed pull leaves nothing behind but its one folder in the cache: pyhelm3 removes
    the folder it pulls into only after a pull that worked, and every delivery tries again."""
    helm = make_helm(version="9.9.9", cache=tmp_path / "cache")
    for _ in range(3):
        with pytest.raises(PermanentError, match="not found"):
            helm.chart()
    pulls = tmp_path / "cache" / ".pulls"
    assert [p.name for p in pulls.iterdir()] == [str(os.getpid())], "this process's folder"
    assert len(list((pulls / str(os.getpid())).iterdir())) == 1, "the last try's, the others removed"


def test_an_object_in_the_way_that_helm_will_not_adopt_is_permanent(
    helm: Helm, toolchain: Toolchain, kube_admin_kubeconfig: Path, test_namespace: str
) -> None:
    """An object of the chart's made by someone else (no ownership labels for this release): the
    real helm refuses to adopt it, and no re-delivery changes that; the error names it."""
    kubectl = [str(toolchain.kubectl), f"--kubeconfig={kube_admin_kubeconfig}", "-n", test_namespace]
    subprocess.run([*kubectl, "create", "serviceaccount", "vc-vc-d"], check=True, capture_output=True)
    with pytest.raises(PermanentError, match="not this release's") as err:
        helm.install_or_upgrade("vc-d", test_namespace, {})
    assert 'ServiceAccount "vc-vc-d"' in str(err.value) and "retry the Tenant" in str(err.value)
    assert helm.release("vc-d", test_namespace) is None, "helm refused before it recorded a release"


def test_release_busy_in_another_operation_is_temporary(
    helm: Helm, records: ReleaseRecords, toolchain: Toolchain, kube_admin_kubeconfig: Path, test_namespace: str
) -> None:
    """A helm killed mid-upgrade leaves the release pending-upgrade; we must not pile on."""
    helm.install_or_upgrade("vc-c", test_namespace, {})
    secret = "sh.helm.release.v1.vc-c.v1"
    kubectl = [str(toolchain.kubectl), f"--kubeconfig={kube_admin_kubeconfig}", "-n", test_namespace]
    # What a helm killed mid-upgrade leaves behind: the release record says pending-upgrade.
    obj = json.loads(
        subprocess.run(
            [*kubectl, "get", "secret", secret, "-o", "json"], check=True, capture_output=True, text=True
        ).stdout
    )
    record = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(obj["data"]["release"]))))
    record["info"]["status"] = "pending-upgrade"
    packed = base64.b64encode(base64.b64encode(gzip.compress(json.dumps(record).encode()))).decode()
    obj["data"]["release"] = packed
    obj["metadata"]["labels"]["status"] = "pending-upgrade"
    subprocess.run([*kubectl, "replace", "-f", "-"], input=json.dumps(obj), check=True, capture_output=True, text=True)
    state = helm.release("vc-c", test_namespace)
    assert state is not None and state.pending
    recorded = records.release("vc-c", test_namespace)
    assert recorded is not None and (recorded.revision, recorded.status) == (1, "pending-upgrade")
    with pytest.raises(TemporaryError, match="another helm operation"):
        helm.install_or_upgrade("vc-c", test_namespace, {"exportKubeConfig": {"server": "https://x:443"}})
    listed = json.loads(
        subprocess.run(
            [*kubectl, "get", "secrets", "-l", "owner=helm", "-o", "json"], check=True, capture_output=True, text=True
        ).stdout
    )
    assert [s["metadata"]["name"] for s in listed["items"]] == [secret]


def test_the_record_read_from_the_api_is_what_helm_status_reports(
    helm: Helm, records: ReleaseRecords, test_namespace: str
) -> None:
    """At each step of a release's life, ReleaseRecords and the real ``helm status`` agree on
    the current revision and its status; a release of another name beside it is never seen."""

    def agree(name: str) -> tuple[int, str] | None:
        from_helm, from_records = helm.release(name, test_namespace), records.release(name, test_namespace)
        if from_helm is None or from_records is None:
            assert from_helm is None and from_records is None, (from_helm, from_records)
            return None
        assert (from_records.revision, from_records.status) == (from_helm.revision, from_helm.status)
        assert from_records.updated is not None
        return from_records.revision, from_records.status

    assert agree("vc-d") is None
    helm.install_or_upgrade("vc-d", test_namespace, {})
    assert agree("vc-d") == (1, "deployed")
    helm.install_or_upgrade("vc-d2", test_namespace, {})  # its neighbour, with a name that begins the same
    helm.install_or_upgrade("vc-d", test_namespace, {"exportKubeConfig": {"server": "https://vc-d.x:443"}})
    assert agree("vc-d") == (2, "deployed")  # revision 1 is now superseded: the highest one counts
    helm.install_or_upgrade("vc-d", test_namespace, {"exportKubeConfig": {"server": "https://vc-d.y:443"}})
    assert agree("vc-d") == (3, "deployed")
    assert helm.uninstall("vc-d", test_namespace)
    assert agree("vc-d") is None
    assert agree("vc-d2") == (1, "deployed")


def hung_helm(folder: Path, real: Path, marker: int, ignores_term: bool) -> Path:
    """A helm that answers ``helm version`` (pyhelm3 asks it once, when its client is made) and pulls
    and reads the chart, and then hangs in every operation on a release (a ``sleep`` with a number
    no other process uses; the release itself is read from helm's record, with no helm process);
    with ``ignores_term`` it shrugs off TERM too, so only KILL ends it."""
    script = folder / "hung-helm"
    trap = "trap '' TERM\n" if ignores_term else ""
    real_ones = f'case "$1" in version|pull|show) exec {real} "$@";; esac\n'
    script.write_text(f"#!/bin/sh\n{real_ones}{trap}exec sleep {marker}\n")
    script.chmod(0o755)
    return script


def still_running(marker: int) -> bool:
    return subprocess.run(["pgrep", "-f", f"^sleep {marker}$"], capture_output=True).returncode == 0


@pytest.mark.parametrize("ignores_term", [False, True], ids=["stops-on-term", "ignores-term"])
def test_a_helm_past_its_deadline_is_stopped_and_that_is_temporary(
    make_helm: MakeHelm, toolchain: Toolchain, test_namespace: str, tmp_path: Path, ignores_term: bool
) -> None:
    """HELM_DEADLINE_SECONDS: helm gets TERM at the deadline and KILL 2 s later; the caller gets a
    temporary error that says so, and no process of that helm is left."""
    marker = 86000 + secrets.randbelow(399)
    hung = hung_helm(tmp_path, toolchain.helm, marker, ignores_term)
    helm = make_helm(str(hung), deadline=1)
    with pytest.raises(TemporaryError) as err:
        helm.install_or_upgrade("vc-hung", test_namespace, {})
    said = str(err.value)
    assert said.startswith(f"helm upgrade --install {test_namespace}/vc-hung: helm did not finish within "), said
    assert "HELM_DEADLINE_SECONDS and was stopped" in said and "recovered after STUCK_RELEASE_SECONDS" in said
    assert not still_running(marker)


def test_the_real_helm_runs_through_its_deadline_wrapper(
    make_helm: MakeHelm, toolchain: Toolchain, test_namespace: str, tmp_path: Path
) -> None:
    helm = make_helm(cache=tmp_path / "cache" / "charts", deadline=60)
    state = helm.install_or_upgrade("vc-w", test_namespace, {})
    assert (state.revision, state.status) == (1, "deployed")
    wrapper = tmp_path / "cache" / "bin" / "helm-with-deadline"
    assert wrapper.read_text().splitlines()[-1] == (f'exec timeout --verbose --kill-after=2 60 {toolchain.helm} "$@"')


def helm_says(toolchain: Toolchain, kubeconfig: Path, namespace: str, release: str) -> dict[str, Any]:
    """What the real helm CLI reports of a release's current revision: status, values, metadata."""
    base = [str(toolchain.helm), f"--kubeconfig={kubeconfig}", "-n", namespace]

    def asked(*argv: str) -> Any:
        return json.loads(subprocess.run([*base, *argv, "-o", "json"], check=True, capture_output=True).stdout)

    status, metadata = asked("status", release), asked("get", "metadata", release)
    return {
        "revision": status["version"],
        "status": status["info"]["status"],
        "updated": datetime.fromisoformat(status["info"]["last_deployed"]),
        "values": asked("get", "values", release) or {},
        "chart_version": metadata["version"],
        "metadata": (metadata["revision"], metadata["status"]),
    }


def decoded(records: ReleaseRecords, namespace: str, release: str) -> dict[str, Any]:
    found = records.current(release, namespace)
    assert found is not None
    state = found.state
    return {
        "revision": state.revision,
        "status": state.status,
        "updated": state.updated,
        "values": found.values,
        "chart_version": state.chart_version,
        "metadata": (state.revision, state.status),
    }


def test_the_record_decoded_is_what_helm_status_get_values_and_get_metadata_say(
    helm: Helm, records: ReleaseRecords, toolchain: Toolchain, kube_admin_kubeconfig: Path, test_namespace: str
) -> None:
    """issue 29: the body of helm 3.16's own record, decoded in Python, against the real helm CLI's
    reading of it: a fresh install, an upgrade with other values, and a release helm left failed."""
    ns = test_namespace

    def agree(expected_revision: int) -> dict[str, Any]:
        ours, theirs = decoded(records, ns, "vc-r"), helm_says(toolchain, kube_admin_kubeconfig, ns, "vc-r")
        assert ours == theirs
        assert ours["revision"] == expected_revision and ours["updated"] is not None
        return ours

    values = {"controlPlane": {"statefulSet": {"resources": {"limits": {"cpu": "1"}}}}, "sync": {}}
    helm.install_or_upgrade("vc-r", ns, values)
    first = agree(1)
    assert (first["status"], first["chart_version"], first["values"]) == ("deployed", "0.21.2", values)
    other = {"exportKubeConfig": {"server": "https://vc-r.example:443"}}
    helm.install_or_upgrade("vc-r", ns, other)
    second = agree(2)
    assert (second["status"], second["values"]) == ("deployed", other)
    # helm upgrade --wait with a deadline the vCluster cannot meet: helm records the revision as it
    # leaves it (failed), and no values at all (config null).
    argv = [str(toolchain.helm), f"--kubeconfig={kube_admin_kubeconfig}", "-n", ns, "upgrade", "vc-r"]
    chart = str(helm.chart().ref)
    subprocess.run([*argv, chart, "--reset-values", "--wait", "--timeout", "1s"], capture_output=True)
    third = agree(3)
    assert third["values"] == {}
    state = helm.release("vc-r", ns)
    assert state is not None and (state.revision, state.status) == (3, third["status"])


def counting_helm(folder: Path, real: Path, log: Path) -> Path:
    """The real helm, writing one line (its first argument) to ``log`` per process it runs."""
    script = folder / "counting-helm"
    script.write_text(f'#!/bin/sh\necho "$1" >> {log}\nexec {real} "$@"\n')
    script.chmod(0o755)
    return script


def test_a_new_release_costs_one_helm_process_and_a_redelivery_none(
    make_helm: MakeHelm, toolchain: Toolchain, records: ReleaseRecords, test_namespace: str, tmp_path: Path
) -> None:
    """issue 29, "helm: 1 process per new Tenant, 0 per re-delivery or settled check": the release is
    read from helm's record, so only the install itself, an upgrade and an uninstall run helm."""
    log = tmp_path / "helm-processes"
    helm = make_helm(str(counting_helm(tmp_path, toolchain.helm, log)))
    helm.chart()  # once per process: the pull into the chart cache
    log.write_text("")

    def processes() -> list[str]:
        ran = log.read_text().split()
        log.write_text("")
        return ran

    values = {"controlPlane": {"statefulSet": {"resources": {"limits": {"cpu": "1"}}}}}
    assert helm.install_or_upgrade("vc-n", test_namespace, values).revision == 1
    assert processes() == ["upgrade"]  # a new release: helm upgrade --install, and nothing else
    for _ in range(3):
        assert helm.install_or_upgrade("vc-n", test_namespace, values).revision == 1
    assert helm.release("vc-n", test_namespace) is not None
    assert processes() == []  # re-deliveries and checks: read from the record
    assert helm.install_or_upgrade("vc-n", test_namespace, {}).revision == 2
    assert processes() == ["upgrade"]
    assert helm.uninstall("vc-n", test_namespace)
    assert processes() == ["uninstall"]
    assert not helm.uninstall("vc-n", test_namespace)
    assert processes() == []


def test_helm_checks_the_objects_against_the_clusters_schema_only_when_asked(
    make_helm: MakeHelm, toolchain: Toolchain, test_namespace: str, tmp_path: Path
) -> None:
    """``helm upgrade`` runs with ``--disable-openapi-validation`` unless HELM_VALIDATE_MANIFESTS
    (shared.adapters.helm), and with the check on, the chart's objects for our values pass the
    real API server's OpenAPI schema."""
    log = tmp_path / "helm-arguments"
    script = tmp_path / "logging-helm"
    script.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {toolchain.helm} "$@"\n')
    script.chmod(0o755)
    values = {"controlPlane": {"statefulSet": {"resources": {"limits": {"cpu": "1"}}}}}
    assert make_helm(str(script)).install_or_upgrade("vc-fast", test_namespace, values).status == "deployed"
    checked = make_helm(str(script), validate_manifests=True)
    assert checked.install_or_upgrade("vc-checked", test_namespace, values).status == "deployed"
    upgrades = [line.split() for line in log.read_text().splitlines() if line.startswith("upgrade")]
    assert [(u[1], "--disable-openapi-validation" in u) for u in upgrades] == [("vc-fast", True), ("vc-checked", False)]
