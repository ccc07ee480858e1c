"""A tampered helm history on the real API server, with releases the real helm CLI installed
(through ``shared.adapters.helm``), and no admission policy in the way (the test's namespace is not
vcluster-*; the check must hold without tenant-helm-records.yaml).

The forgery of issue 23: a copy of a release's record, made as admin, labelled owner=helm,
name=<release>, version=99, under a name of its own. ``ReleaseRecords`` (check-ready's reader, and
what the helm guard and cleanup ask) refuses that history with ``ReleaseTampered``, naming the
forged Secret, its type and labels and not its data; a neighbour release in the same namespace is
read as before, in agreement with ``helm status``, and its records are byte-identical.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.helm import Helm
from shared.adapters.release import RECORD_TYPE, ReleaseRecords
from shared.errors import ReleaseTampered
from testbed.toolchain import Toolchain

pytestmark = pytest.mark.integration


def kubectl(toolchain: Toolchain, kubeconfig: Path, namespace: str, *args: str, stdin: str | None = None) -> str:
    argv = [str(toolchain.kubectl), f"--kubeconfig={kubeconfig}", "-n", namespace, *args]
    return subprocess.run(argv, input=stdin, check=True, capture_output=True, text=True).stdout


def secrets_of(toolchain: Toolchain, kubeconfig: Path, namespace: str, release: str) -> list[dict[str, Any]]:
    selector = f"owner=helm,name={release}"
    listed = json.loads(kubectl(toolchain, kubeconfig, namespace, "get", "secrets", "-l", selector, "-o", "json"))
    return sorted(listed["items"], key=lambda s: s["metadata"]["name"])


def test_a_forged_record_makes_the_history_tampered_and_leaves_the_neighbour_alone(
    helm: Helm, records: ReleaseRecords, toolchain: Toolchain, kube_admin_kubeconfig: Path, test_namespace: str
) -> None:
    ns = test_namespace
    helm.install_or_upgrade("vc-e", ns, {})
    helm.install_or_upgrade("vc-f", ns, {})
    helm.install_or_upgrade("vc-f", ns, {"exportKubeConfig": {"server": "https://vc-f:443"}})  # revision 2
    neighbour = secrets_of(toolchain, kube_admin_kubeconfig, ns, "vc-f")
    assert [s["metadata"]["name"] for s in neighbour] == ["sh.helm.release.v1.vc-f.v1", "sh.helm.release.v1.vc-f.v2"]
    before = records.release("vc-e", ns)
    assert before is not None and (before.revision, before.status) == (1, "deployed")

    # The forgery: the release's own record, copied, version 99, another name.
    (original,) = secrets_of(toolchain, kube_admin_kubeconfig, ns, "vc-e")
    copied = original["metadata"]["labels"] | {"version": "99"}
    forged = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": original["type"],
        "metadata": {"name": "vc-e-history", "namespace": ns, "labels": copied},
        "data": original["data"],
    }
    assert forged["type"] == RECORD_TYPE
    kubectl(toolchain, kube_admin_kubeconfig, ns, "create", "-f", "-", stdin=json.dumps(forged))

    with pytest.raises(ReleaseTampered) as raised:
        records.release("vc-e", ns)
    message = str(raised.value)
    labels = ",".join(f"{k}={v}" for k, v in sorted(copied.items()))
    assert message.startswith(
        f"the history of helm release {ns}/vc-e was tampered with: "
        f"Secret vc-e-history (type helm.sh/release.v1, labels {labels}): "
        "its name is not sh.helm.release.v1.vc-e.v<revision>"
    ), message
    assert "version=99" in labels and "sh.helm.release.v1.vc-e.v1" not in message
    assert original["data"]["release"][:40] not in message  # the record's body is never shown
    assert raised.value.reason == "ReleaseTampered"
    # install's and cleanup's helm step read that history themselves, before any helm process
    for step in (lambda: helm.install_or_upgrade("vc-e", ns, {"x": 1}), lambda: helm.uninstall("vc-e", ns)):
        with pytest.raises(ReleaseTampered):
            step()
    assert [s["metadata"]["name"] for s in secrets_of(toolchain, kube_admin_kubeconfig, ns, "vc-e")] == [
        "sh.helm.release.v1.vc-e.v1",
        "vc-e-history",
    ]

    # The neighbour: read as before, as helm status reports it, and not a byte changed.
    state, from_helm = records.release("vc-f", ns), helm.release("vc-f", ns)
    assert state is not None and from_helm is not None
    assert (state.revision, state.status) == (from_helm.revision, from_helm.status) == (2, "deployed")
    assert secrets_of(toolchain, kube_admin_kubeconfig, ns, "vc-f") == neighbour

    # Once the forgery is gone, the history is helm's again.
    kubectl(toolchain, kube_admin_kubeconfig, ns, "delete", "secret", "vc-e-history")
    after = records.release("vc-e", ns)
    assert after is not None and (after.revision, after.status) == (1, "deployed")
