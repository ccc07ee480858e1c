"""The stand-in chart renders the isolation objects the real vcluster 0.21.2 chart renders from
the same values, with the real helm CLI (``helm template``, as the real render was made).

``testbed/reference/vcluster-0.21.2/rendered-isolated.yaml`` is the real chart's render of
release ``vc-alice`` in ``vcluster-alice`` with the values install sends plus the three policies
on at the chart's defaults. The stand-in is rendered with ``vcluster_values()`` of a Tenant
``alice`` (the values install sends now, the isolation settings at their defaults) under the
same names, and its NetworkPolicies, ResourceQuota and LimitRange must be the same objects: kinds,
names, namespaces, labels and specs. Only the ``chart`` label differs (the real render was made
from the chart's source, whose Chart.yaml says 0.0.1; the stand-in is 0.21.2).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.model.isolation import Isolation
from shared.model.tenant import Tenant
from shared.model.values import vcluster_values
from testbed.project import CHART_DIR
from testbed.toolchain import Toolchain

from .tenant_objects import tenant_body

pytestmark = pytest.mark.integration

REFERENCE = Path(__file__).resolve().parents[2] / "testbed" / "reference" / "vcluster-0.21.2" / "rendered-isolated.yaml"
RELEASE, NAMESPACE = "vc-alice", "vcluster-alice"  # the names the real render used
ISOLATION_KINDS = ("NetworkPolicy", "ResourceQuota", "LimitRange")


def alice() -> Tenant:
    body = tenant_body("alice", tenant_name="alice", cpu="1", memory="2Gi")
    body["metadata"] |= {"namespace": "kubeopera-system", "uid": "uid-alice", "generation": 1}
    return Tenant.from_object(body)


def render(toolchain: Toolchain, values: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values), encoding="utf-8")
    return subprocess.run(
        [str(toolchain.helm), "template", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--kube-version", "1.34.4",
         "--values", str(values_file)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def isolation_objects(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> the object, its ``chart`` label set aside."""
    found = {}
    for doc in yaml.safe_load_all(text):
        if doc and doc["kind"] in ISOLATION_KINDS:
            doc["metadata"]["labels"].pop("chart")
            found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def test_the_stand_in_renders_the_real_charts_isolation_objects(
    toolchain: Toolchain, helm_env: dict[str, str], tmp_path: Path
) -> None:
    # The real render's values: the chart's own numbers, without the control plane's share that
    # install adds to the quota (shared.model.isolation.quota_with): the stand-in is compared, not them.
    values = vcluster_values(alice(), "development") | {"policies": Isolation().helm_policies()}
    assert alice().spec.names.release == RELEASE and alice().spec.names.namespace == NAMESPACE

    rendered = render(toolchain, values, tmp_path)

    assert rendered.returncode == 0, rendered.stderr
    real = isolation_objects(REFERENCE.read_text(encoding="utf-8"))
    mine = isolation_objects(rendered.stdout)
    assert sorted(real) == [
        ("LimitRange", "vc-vc-alice"),
        ("NetworkPolicy", "vc-cp-vc-alice"),
        ("NetworkPolicy", "vc-work-vc-alice"),
        ("ResourceQuota", "vc-vc-alice"),
    ]
    assert sorted(mine) == sorted(real)
    for key, obj in real.items():
        assert mine[key] == obj, key
    chart_labels = {doc["metadata"]["labels"]["chart"] for doc in yaml.safe_load_all(rendered.stdout) if doc}
    assert chart_labels == {"vcluster-0.21.2"}


@pytest.mark.parametrize(
    ("policies", "kinds"),
    [
        ({}, []),  # the chart's defaults: auto, auto and false render nothing
        ({"resourceQuota": {"enabled": "auto"}, "limitRange": {"enabled": "auto"}}, []),
        ({"resourceQuota": {"enabled": True}}, ["LimitRange", "ResourceQuota"]),  # limitRange auto follows
        ({"limitRange": {"enabled": True}}, ["LimitRange", "ResourceQuota"]),
        ({"resourceQuota": {"enabled": True}, "limitRange": {"enabled": False}}, ["ResourceQuota"]),
        ({"networkPolicy": {"enabled": True}}, ["NetworkPolicy", "NetworkPolicy"]),
    ],
)
def test_the_stand_in_follows_the_real_charts_switches(
    toolchain: Toolchain, helm_env: dict[str, str], tmp_path: Path, policies: dict[str, Any], kinds: list[str]
) -> None:
    rendered = render(toolchain, {"policies": policies}, tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    got = [doc["kind"] for doc in yaml.safe_load_all(rendered.stdout) if doc and doc["kind"] in ISOLATION_KINDS]
    assert sorted(got) == kinds


def test_the_stand_in_refuses_what_the_real_schema_refuses(
    toolchain: Toolchain, helm_env: dict[str, str], tmp_path: Path
) -> None:
    values = vcluster_values(alice(), "development")
    values["policies"]["networkPolicy"]["enabled"] = "yes"
    rendered = render(toolchain, values, tmp_path)
    assert rendered.returncode != 0
    assert "values don't meet the specifications of the schema" in rendered.stderr, rendered.stderr
    assert "policies.networkPolicy.enabled" in rendered.stderr.replace("/", "."), rendered.stderr
