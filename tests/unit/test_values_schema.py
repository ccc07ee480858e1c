"""The values install sends pass the real vcluster 0.21.2 chart's schema, and the isolation
numbers are the real chart's defaults.

The schema is ``testbed/chart/values.schema.json``: the stand-in chart carries the real file
unchanged (checked here against ``../shared/vcluster-0.21.2/`` when that folder is beside the
clone), so helm refuses there exactly what the real chart refuses. helm validates the chart's
defaults merged with the values sent; both are checked, the values alone and merged with the
stand-in's ``values.yaml`` the way helm merges them (maps key by key, the rest replaced).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from shared.model.isolation import Isolation
from shared.model.tenant import Quota, Tenant, TenantSpec
from shared.model.values import vcluster_values
from shared.settings import Settings

from .fakes import TENANT_NAMESPACE

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "testbed" / "chart"
REFERENCE = REPO / "testbed" / "reference" / "vcluster-0.21.2"
DESIGN_COPY = REPO.parent / "shared" / "vcluster-0.21.2"  # design.md's folder, beside the clone
USER_ID = "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b"


def schema() -> Any:
    return json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))


def errors(values: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema())
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(values)]


def coalesce(defaults: Any, values: Any) -> Any:
    """helm's merge of a chart's defaults with the values given."""
    if not isinstance(defaults, dict) or not isinstance(values, dict):
        return copy.deepcopy(values)
    merged = copy.deepcopy(defaults)
    for key, value in values.items():
        merged[key] = coalesce(defaults.get(key), value)
    return merged


def tenant(name: str = "alice", cloud_space_id: str = "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b") -> Tenant:
    spec = TenantSpec(USER_ID, name, cloud_space_id, Quota("1", "2Gi"))
    return Tenant(TENANT_NAMESPACE, name, "uid-1", 1, "7", spec)


SETTINGS = [
    pytest.param({}, id="defaults"),
    pytest.param(
        {
            "TENANT_RESOURCE_QUOTA": "requests.cpu=40,requests.nvidia.com/gpu=1",
            "TENANT_LIMIT_DEFAULT_REQUEST": "cpu=250m",
            "TENANT_EGRESS_CIDR": "::/0",
            "TENANT_EGRESS_EXCEPT": "fd00::/8",
            "POD_SECURITY_ENFORCE": "restricted",
        },
        id="changed",
    ),
]


@pytest.mark.parametrize("distro", ["k3s", "k8s"])
@pytest.mark.parametrize("env", SETTINGS)
def test_the_values_install_sends_pass_the_real_schema(env: dict[str, str], distro: str) -> None:
    settings = Settings.from_env(env | {"SENDER_IDENTITY": "off", "VCLUSTER_DISTRO": distro})
    values = vcluster_values(tenant(), "production", settings.isolation, "10.0.0.0/16", settings.distro)
    assert values["controlPlane"]["distro"] == {distro: {"enabled": True}}
    assert errors(values) == []
    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert errors(coalesce(defaults, values)) == []
    assert errors(defaults) == []


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"exportKubeConfig": {"enabled": True}}, "'enabled' was unexpected"),  # design.md section 5
        ({"policies": {"networkPolicy": {"enabled": "true"}}}, "is not of type 'boolean'"),
        ({"policies": {"podSecurity": "baseline"}}, "'podSecurity' was unexpected"),
    ],
)
def test_the_real_schema_refuses_what_the_real_chart_refuses(change: dict[str, Any], refusal: str) -> None:
    found = errors(coalesce(vcluster_values(tenant(), "production"), change))
    assert len(found) == 1 and refusal in found[0], found


def test_the_isolation_defaults_are_the_real_charts() -> None:
    real = yaml.safe_load((REFERENCE / "values.yaml").read_text(encoding="utf-8"))["policies"]
    mine = Isolation().helm_policies()

    def as_rendered(entries: dict[str, Any]) -> dict[str, str]:  # the chart quotes each quantity
        return {str(k): str(v) for k, v in entries.items()}

    assert mine["resourceQuota"]["quota"] == as_rendered(real["resourceQuota"]["quota"])
    assert mine["limitRange"]["default"] == as_rendered(real["limitRange"]["default"])
    assert mine["limitRange"]["defaultRequest"] == as_rendered(real["limitRange"]["defaultRequest"])
    ip_block = real["networkPolicy"]["outgoingConnections"]["ipBlock"]
    assert mine["networkPolicy"]["outgoingConnections"]["ipBlock"] == ip_block
    # the chart's own switches, which the values turn on: auto, auto (nothing) and false
    assert (real["resourceQuota"]["enabled"], real["limitRange"]["enabled"], real["networkPolicy"]["enabled"]) == (
        "auto",
        "auto",
        False,
    )


def test_the_stand_in_chart_has_the_real_charts_policy_defaults() -> None:
    real = yaml.safe_load((REFERENCE / "values.yaml").read_text(encoding="utf-8"))["policies"]
    standin = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["policies"]
    assert {key: real[key] for key in ("resourceQuota", "limitRange", "networkPolicy")} == standin


@pytest.mark.parametrize(
    ("copy_in_clone", "name"),
    [
        (CHART / "values.schema.json", "values.schema.json"),
        (REFERENCE / "values.yaml", "values.yaml"),
        (REFERENCE / "rendered-isolated.yaml", "rendered-isolated.yaml"),
    ],
)
def test_the_clones_copies_are_the_real_files(copy_in_clone: Path, name: str) -> None:
    original = DESIGN_COPY / name
    if not original.is_file():
        pytest.skip(f"{original} is not beside this clone")
    assert copy_in_clone.read_bytes() == original.read_bytes()
