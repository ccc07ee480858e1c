"""The platform's plans (``shared.model.plans``, read by ``shared.settings``, used by install through
``shared.steps.plans``): merged under what install computes, refused naming the plan and the key
for what they may not set, their numbers through isolation's rule, their distro for new releases
only, an unknown plan failing the Tenant with the list of plans, and the check against the chart's
own schema keeping install from being ready.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from functions import install
from shared.adapters import values_schema
from shared.errors import ConfigError, UnknownPlan
from shared.model import event_types, quantity
from shared.model.isolation import Isolation
from shared.model.plans import DISTRO, NUMBERS, PROTECTED, Plan, Plans
from shared.model.tenant import Quota, Tenant, TenantSpec
from shared.model.values import keep_distro, vcluster_values
from shared.settings import Settings
from shared.steps import plans as plan_steps

from .fakes import (
    TENANT_NAMESPACE,
    FakeHelm,
    FakeKube,
    FakeKubeoperaApi,
    deliver,
    fake_runtime,
    ref_of,
    step_event,
    tenant_object,
)

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "testbed" / "chart" / "values.schema.json").read_text(encoding="utf-8"))
EXAMPLE = REPO / "deploy" / "examples" / "plans" / "tenant-plans.yaml"
BASE = REPO / "deploy" / "base" / "plans.yaml"
CS_BOB = "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b"
BOB_RELEASE, BOB_NS = "vc-bob-dev", "vcluster-bob-dev"

GOLD = {
    "controlPlane": {
        "advanced": {"defaultImageRegistry": "mirror.example.com"},
        "statefulSet": {
            "persistence": {"volumeClaim": {"storageClass": "fast-ssd"}},
            "scheduling": {
                "nodeSelector": {"kubeopera.io/pool": "control-planes"},
                "tolerations": [{"key": "kubeopera.io/pool", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
    },
    "policies": {"resourceQuota": {"quota": {"requests.cpu": "40", "count/pods": 100}}},
}


def tenant(plan: str = "default") -> Tenant:
    spec = TenantSpec("3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b", "alice", CS_BOB, Quota("1", "2Gi"), plan)
    return Tenant(TENANT_NAMESPACE, "alice", "uid-1", 1, "7", spec)


def values_of(plan: Plan, distro: str = "k3s") -> dict[str, Any]:
    return plan.release_values(tenant(plan.name), "production", Isolation(), "10.0.0.0/16", distro, "")


def write_plans(folder: Path, files: dict[str, str]) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return {"SENDER_IDENTITY": "off", "PLANS_DIR": str(folder)}


# the merge --------------------------------------------------------------------------------------


def test_a_plan_is_merged_under_what_install_computes() -> None:
    plan = Plan.parse("gold", GOLD)
    values = values_of(plan)
    computed = vcluster_values(tenant(), "production", plan.isolation(Isolation()), "10.0.0.0/16", "k3s")
    control_plane = values["controlPlane"]
    assert control_plane["advanced"] == {"defaultImageRegistry": "mirror.example.com"}
    assert control_plane["statefulSet"]["persistence"] == {"volumeClaim": {"storageClass": "fast-ssd"}}
    assert control_plane["statefulSet"]["scheduling"] == GOLD["controlPlane"]["statefulSet"]["scheduling"]
    # what install computes is all there, unchanged
    assert control_plane["statefulSet"]["labels"] == computed["controlPlane"]["statefulSet"]["labels"]
    assert control_plane["statefulSet"]["resources"] == computed["controlPlane"]["statefulSet"]["resources"]
    assert {k: v for k, v in values.items() if k != "controlPlane"} == {
        k: v for k, v in computed.items() if k != "controlPlane"
    }
    assert plan.values == {"controlPlane": GOLD["controlPlane"]}  # the numbers went to isolation


def test_the_empty_default_plan_changes_nothing() -> None:
    assert values_of(Plan()) == vcluster_values(tenant(), "production", Isolation(), "10.0.0.0/16", "k3s")


def test_every_key_install_computes_is_protected_or_has_a_rule_of_its_own() -> None:
    """So the merge never drops a key a plan sets: a plan cannot set what install computes."""
    computed = vcluster_values(
        tenant(), "production", Isolation(), "10.0.0.0/16", "k8s", "https://{tenant}.vclusters.example.com"
    )

    def leaves(values: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        out = []
        for key, value in values.items():
            path = (*prefix, key)
            out += leaves(value, path) if isinstance(value, dict) and value else [path]
        return out

    def covered(path: tuple[str, ...]) -> bool:
        return any(path[: len(p)] == p for p, _ in PROTECTED) or path[: len(DISTRO)] == DISTRO

    assert [".".join(p) for p in leaves(computed) if not covered(p)] == []
    assert all(any(n[: len(p)] == p for p, _ in PROTECTED) for n in NUMBERS)


# what a plan may not set -------------------------------------------------------------------------


def nested(key: str, value: Any) -> dict[str, Any]:
    """``a.b.c: value`` as ``{"a": {"b": {"c": value}}}`` (``/`` in a key part keeps its dots)."""
    parts = key.split(".")
    if "kubeopera" in parts:  # the owner label's key, kubeopera.io/owner-uid, is one key
        at = parts.index("kubeopera")
        parts[at : at + 2] = [f"{parts[at]}.{parts[at + 1]}"]
    out: Any = value
    for part in reversed(parts):
        out = {part: out}
    return dict(out)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("controlPlane.statefulSet.resources.limits.cpu", "8"),
        ("controlPlane.statefulSet.labels.kubeopera.io/owner-uid", "x"),
        ("controlPlane.proxy.extraSANs", ["evil.example.com"]),
        ("exportKubeConfig.server", "https://elsewhere:443"),
        ("serviceCIDR", "10.96.0.0/12"),
        ("sync.toHost.ingresses.enabled", False),
        ("policies.networkPolicy.enabled", False),
        ("policies.resourceQuota.enabled", False),
        ("policies.limitRange.max.cpu", "64"),
        ("controlPlane", None),  # would replace the map install computes
    ],
)
def test_a_plan_setting_what_install_computes_is_refused_naming_the_key(key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        Plan.parse("gold", nested(key, value))
    assert str(caught.value).startswith(f"plan gold: {key}: install sets it (")


def test_a_plan_may_set_keys_beside_the_protected_ones() -> None:
    plan = Plan.parse(
        "gold",
        {
            "controlPlane": {"statefulSet": {"pods": {"labels": {"team": "a"}}, "image": {"registry": "m.example"}}},
            "sync": {"toHost": {"ingresses": {}}, "fromHost": {"nodes": {"enabled": False}}},
        },
    )
    assert values_of(plan)["controlPlane"]["statefulSet"]["pods"] == {"labels": {"team": "a"}}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([1, 2], "must be a map of Helm values, not list"),
        (
            nested("policies.resourceQuota.quota", {"requests.cpu": "ten"}),
            "policies.resourceQuota.quota.requests.cpu: requests.cpu must be a Kubernetes quantity >= 0",
        ),
        (
            nested("policies.limitRange.default", {"Memory": "1Gi"}),
            "policies.limitRange.default.Memory: 'Memory' is not a resource name",
        ),
        (
            nested("policies.resourceQuota.quota", {"count": {"pods": "1"}}),
            "policies.resourceQuota.quota.count.pods: must be a resource name with a quantity",
        ),
        (nested("controlPlane.distro.k0s.enabled", True), "controlPlane.distro.k0s.enabled: install runs the distros"),
        (
            nested("controlPlane.distro", {"k3s": {"enabled": True}, "k8s": {"enabled": True}}),
            "controlPlane.distro: enables k3s and k8s; a plan picks one",
        ),
        (nested("controlPlane.distro.k3s.enabled", False), "controlPlane.distro.k3s.enabled: false picks no distro"),
        (nested("controlPlane.distro.k8s.enabled", "yes"), "controlPlane.distro.k8s.enabled: must be true or false"),
    ],
)
def test_a_plan_the_rules_refuse_names_the_plan_and_the_key(values: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Plan.parse("gold", values)
    assert str(caught.value).startswith(f"plan gold: {message}")


def test_a_plans_name_is_a_dns_label() -> None:
    with pytest.raises(ConfigError, match="^plan 'Gold': a plan's name must be a DNS label"):
        Plan.parse("Gold", {})


# the numbers and the distro ------------------------------------------------------------------------


def test_a_plans_numbers_go_through_isolations_rule() -> None:
    """Entries changed or added over the settings' (TENANT_RESOURCE_QUOTA), the Tenant's own quota
    still added to the ResourceQuota, the enabled flags and the NetworkPolicy untouched."""
    settings = Isolation.from_env({"TENANT_RESOURCE_QUOTA": "requests.cpu=12,count/pods=30"})
    plan = Plan.parse(
        "gold",
        {
            "policies": {
                "resourceQuota": {"quota": {"requests.cpu": "40", "requests.nvidia.com/gpu": 2}},
                "limitRange": {"default": {"memory": "1Gi"}, "defaultRequest": {"cpu": "250m"}},
            }
        },
    )
    policies = plan.release_values(tenant("gold"), "production", settings, "", "k3s", "")["policies"]
    quota = policies["resourceQuota"]["quota"]
    assert quota["requests.cpu"] == "41"  # the plan's 40 + the Tenant's 1 (quota_with)
    assert quantity.parse(quota["requests.memory"]) == quantity.parse("22Gi")  # the chart's 20Gi + the Tenant's 2Gi
    assert quota["count/pods"] == "30"  # the setting's, the plan says nothing of it
    assert quota["requests.nvidia.com/gpu"] == "2"
    assert policies["limitRange"]["default"]["memory"] == "1Gi"
    assert policies["limitRange"]["defaultRequest"] == {"ephemeral-storage": "3Gi", "memory": "128Mi", "cpu": "250m"}
    assert policies["resourceQuota"]["enabled"] and policies["limitRange"]["enabled"]
    assert policies["networkPolicy"] == Isolation().helm_policies()["networkPolicy"]


def test_a_plans_distro_is_for_new_releases_only() -> None:
    plan = Plan.parse("gold", {"controlPlane": {"distro": {"k8s": {"enabled": True, "version": "v1.31.1"}}}})
    values = values_of(plan, distro="k3s")  # VCLUSTER_DISTRO k3s: the plan's k8s wins
    assert values["controlPlane"]["distro"] == {"k8s": {"enabled": True, "version": "v1.31.1"}}
    running_k3s = values_of(Plan(), distro="k3s")
    assert keep_distro(values, running_k3s)["controlPlane"]["distro"] == {"k3s": {"enabled": True}}
    assert values_of(Plan(), distro="k8s")["controlPlane"]["distro"] == {"k8s": {"enabled": True}}


# the plans by name ---------------------------------------------------------------------------------


def test_an_unknown_plan_is_permanent_and_lists_the_plans() -> None:
    plans = Plans.of([Plan.parse("gold", {}), Plan.parse("silver", {})])
    assert plans.names == ("default", "gold", "silver")
    with pytest.raises(UnknownPlan) as caught:
        plans.get("platinum")
    assert str(caught.value) == (
        "spec.plan 'platinum' is not a plan of this platform; the plans are: default, gold, silver"
    )
    assert caught.value.reason == "UnknownPlan"


def test_a_tenant_names_its_plan_or_runs_default() -> None:
    body = tenant_object("bob-dev", CS_BOB)
    assert Tenant.from_object(body).spec.plan == "default"
    body["spec"]["plan"] = "gold"
    assert Tenant.from_object(body).spec.plan == "gold"


# the settings ------------------------------------------------------------------------------------


def test_the_plans_are_read_from_plans_dir(tmp_path: Path) -> None:
    env = write_plans(tmp_path / "plans", {"gold.yaml": yaml.safe_dump(GOLD), "silver.yaml": "", "default.yaml": "{}"})
    # a ConfigMap volume's own entries are hidden, and skipped
    (tmp_path / "plans" / "..2026_12_04_01_02_03.000").mkdir()
    (tmp_path / "plans" / "..data").symlink_to("..2026_12_04_01_02_03.000")
    plans = Settings.from_env(env).plans
    assert plans.names == ("default", "gold", "silver")
    assert plans.get("gold") == Plan.parse("gold", GOLD)
    assert plans.get("silver") == Plan("silver")


def test_no_plans_folder_at_the_default_path_is_the_empty_default_plan() -> None:
    assert Settings.from_env({"SENDER_IDENTITY": "off"}).plans == Plans()


OWNER_LABEL_PLAN = "controlPlane:\n  statefulSet:\n    labels:\n      kubeopera.io/owner-uid: x\n"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"gold.yaml": OWNER_LABEL_PLAN}, r"^plan gold: controlPlane\.statefulSet\.labels\.kubeopera\.io/owner-uid: "),
        ({"gold.yaml": "controlPlane: [\n"}, r"^plan gold \(.*gold\.yaml\): not a readable YAML file"),
        ({"gold.yaml": "- 1\n"}, "^plan gold: must be a map of Helm values, not list$"),
        ({"Gold.yaml": "{}"}, r"^PLANS_DIR .*: 'Gold\.yaml' is not a plan: a plan is a file <plan>\.yaml"),
        ({"gold.yml": "{}"}, r"^PLANS_DIR .*: 'gold\.yml' is not a plan"),
    ],
)
def test_a_bad_plan_stops_the_settings_naming_it(tmp_path: Path, files: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(write_plans(tmp_path / "plans", files))


def test_a_plans_dir_that_is_no_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="^PLANS_DIR must be a folder of plans"):
        Settings.from_env({"SENDER_IDENTITY": "off", "PLANS_DIR": str(tmp_path / "missing")})


@pytest.mark.parametrize("manifest", [BASE, EXAMPLE], ids=["base", "example"])
def test_the_shipped_plans_pass_the_rules_and_the_real_schema(tmp_path: Path, manifest: Path) -> None:
    (config_map,) = [d for d in yaml.safe_load_all(manifest.read_text(encoding="utf-8")) if d]
    assert config_map["metadata"]["name"] == "tenant-plans"
    settings = Settings.from_env(write_plans(tmp_path / "plans", config_map["data"]))
    assert set(settings.plans.names) == {n.removesuffix(".yaml") for n in config_map["data"]}
    plan_steps.check(settings, SCHEMA)
    for plan in settings.plans.plans:
        assert values_schema.problems(SCHEMA, plan_steps.release_values(plan_steps.SAMPLE, settings, plan)) == []


# the check against the chart's schema ---------------------------------------------------------------


def test_the_schema_check_names_the_unknown_key_and_the_bad_value() -> None:
    values = {"controlPlane": {"statefulSet": {"scheduling": {"nodeSelectors": {}, "tolerations": {"key": "a"}}}}}
    assert values_schema.problems(SCHEMA, values) == [
        "controlPlane.statefulSet.scheduling.nodeSelectors: not a value of the chart "
        "(Additional properties are not allowed ('nodeSelectors' was unexpected))",
        "controlPlane.statefulSet.scheduling.tolerations: {'key': 'a'} is not of type 'array'",
    ]


def test_a_plan_the_charts_schema_refuses_keeps_install_from_being_ready(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    settings = dataclasses.replace(
        Settings(),
        plans=Plans.of(
            [Plan.parse("gold", nested("controlPlane.statefulSet.persistence.volumeClaim.storgeClass", "x"))]
        ),
    )
    helm.schema = SCHEMA
    client = install.create_app(fake_runtime(kube, helm, api, settings)).test_client()
    assert client.get("/readyz").status_code == 503
    assert client.get("/readyz").status_code == 503  # for ever: the check is not made again
    assert helm.calls["values_schema"] == 1
    with pytest.raises(ConfigError) as caught:
        plan_steps.check(settings, SCHEMA)
    assert str(caught.value) == (
        "the chart's values.schema.json refuses plan gold: "
        "controlPlane.statefulSet.persistence.volumeClaim.storgeClass: not a value of the chart "
        "(Additional properties are not allowed ('storgeClass' was unexpected)) "
        "(fix the ConfigMap tenant-plans)"
    )


def test_plans_the_schema_admits_make_install_ready(kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi) -> None:
    settings = dataclasses.replace(Settings(), plans=Plans.of([Plan.parse("gold", GOLD)]))
    helm.schema = SCHEMA
    client = install.create_app(fake_runtime(kube, helm, api, settings)).test_client()
    assert client.get("/readyz").status_code == 200


# install ---------------------------------------------------------------------------------------------


def test_install_hands_helm_the_values_under_the_tenants_plan(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    settings = dataclasses.replace(Settings(), plans=Plans.of([Plan.parse("gold", GOLD)]))
    obj = tenant_object("bob-dev", CS_BOB)
    obj["spec"]["plan"] = "gold"
    obj = kube.add_tenant(obj)
    app = install.create_app(fake_runtime(kube, helm, api, settings))
    assert deliver(app, step_event(obj, event_types.INSTALL)).status_code == 200
    values = helm.values_of(BOB_RELEASE, BOB_NS)
    live = Tenant.from_object(kube.tenant_dict(TENANT_NAMESPACE, "bob-dev") or {})
    assert values == plan_steps.release_values(live, dataclasses.replace(settings, service_cidr="10.0.0.0/24"))
    assert values["controlPlane"]["statefulSet"]["persistence"]["volumeClaim"]["storageClass"] == "fast-ssd"


def test_a_change_of_plan_upgrades_the_release(kube: FakeKube, helm: FakeHelm) -> None:
    settings = dataclasses.replace(Settings(), plans=Plans.of([Plan.parse("gold", GOLD)]))
    obj = kube.add_tenant(tenant_object("bob-dev", CS_BOB))
    assert install.handle(kube, helm, settings, ref_of(obj)) is not None
    assert "persistence" not in helm.values_of(BOB_RELEASE, BOB_NS)["controlPlane"]["statefulSet"]
    obj = kube.edit_spec(TENANT_NAMESPACE, "bob-dev", plan="gold")
    assert install.handle(kube, helm, settings, ref_of(obj)) is not None
    assert helm.operations[-1] == ("upgrade", f"{BOB_NS}/{BOB_RELEASE}")
    upgraded = helm.values_of(BOB_RELEASE, BOB_NS)["controlPlane"]
    assert upgraded["advanced"]["defaultImageRegistry"] == "mirror.example.com"


def test_an_unknown_plan_fails_the_tenant_listing_the_plans_before_anything_is_made(
    kube: FakeKube, helm: FakeHelm, api: FakeKubeoperaApi
) -> None:
    settings = dataclasses.replace(Settings(), plans=Plans.of([Plan.parse("gold", {})]))
    obj = tenant_object("bob-dev", CS_BOB)
    obj["spec"]["plan"] = "platinum"
    obj = kube.add_tenant(obj)
    app = install.create_app(fake_runtime(kube, helm, api, settings))
    response = deliver(app, step_event(obj, event_types.INSTALL))
    assert response.status_code == 422
    failed = kube.get_tenant(TENANT_NAMESPACE, "bob-dev")
    assert failed is not None and failed.status.phase == "Failed"
    assert failed.status.message == "spec.plan 'platinum' is not a plan of this platform; the plans are: default, gold"
    ready = next(c for c in failed.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "UnknownPlan")
    assert BOB_NS not in kube.namespaces and helm.operations == []


def test_a_distro_that_is_no_map_is_refused_not_replaced_unseen() -> None:
    with pytest.raises(ConfigError, match=r"plan odd: controlPlane\.distro\.k8s: must be a map"):
        Plan.parse("odd", {"controlPlane": {"distro": {"k8s": "x"}}})
