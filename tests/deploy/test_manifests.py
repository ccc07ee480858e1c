"""The deployment manifests: every YAML file parses, kustomize renders both overlays, and the
rendered objects keep the contracts (names, namespace, image, per-function settings, RBAC layout,
Trigger delivery, the Dockerfile's start command)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from functions import check_ready
from shared.model import event_types, lifecycle, ownership
from shared.model.naming import (
    ANNOTATION_DELETION_PROTECTION,
    DEFAULT_TENANT_NAMESPACE,
    LABEL_MANAGED_BY,
    LABEL_OWNER_UID,
    MANAGED_BY,
)
from shared.model.tenant import GROUP, PLURAL, Tenant
from shared.model.values import vcluster_values
from shared.model.vcluster_watch import SELECTOR
from shared.settings import HELM_KILL_AFTER_SECONDS, Settings
from shared.steps import access
from shared.steps.locks import LEASE_SECONDS
from testbed import toolchain

from .manifests import (
    CONFIG_FEATURES_PATCH,
    DEPLOY,
    DOCKERFILE,
    EVENTING,
    FUNCTION_MODULES,
    OVERLAYS,
    RBAC,
    REPO,
    SERVICES,
    TRIGGERS,
    WATCH,
    dockerfile_entrypoint,
    dockerfile_env,
    documents,
    file_documents,
    objects_of,
    render_without_retryafter,
)

NAMESPACE = DEFAULT_TENANT_NAMESPACE
IMAGE = "ghcr.io/kubeopera/kubeopera-tenants"
TAGS = {"dev": "0.1.0-dev", "prod": "0.1.0"}
KUSTOMIZE_KINDS = {"Kustomization", "Component"}
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
# Where helm and the chart cache write; the image sets them (Dockerfile ENV), for every function.
HELM_HOME_VARS = ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME", "CHART_CACHE_DIR")
HELM_FUNCTIONS = {"tenant-install", "tenant-cleanup"}  # check-ready reads helm's record from the API (adapters.release)
ADD_UPDATE_DELETE = [event_types.APISERVER_ADD, event_types.APISERVER_UPDATE, event_types.APISERVER_DELETE]
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "escalate", "bind", "impersonate"}


# Prometheus' own files in deploy/monitoring: a scrape config and promtool's rule tests, not
# Kubernetes objects (tests/deploy/test_monitoring.py checks them with promtool).
NOT_KUBERNETES = {DEPLOY / "monitoring" / "prometheus-scrape-config.yaml", DEPLOY / "monitoring" / "tests"}


def yaml_files() -> list[Path]:
    found = [*EVENTING.rglob("*.yaml"), *DEPLOY.rglob("*.yaml")]
    return sorted(p for p in found if not (NOT_KUBERNETES & {p, *p.parents}))


def policy_files() -> dict[str, Path]:
    """The admission policies of deploy/base/policy by name: each file holds one and its bindings."""
    found: dict[str, Path] = {}
    for path in sorted((DEPLOY / "base" / "policy").glob("*.yaml")):
        policy, *bindings = file_documents(path)
        assert policy["kind"] == "ValidatingAdmissionPolicy" and policy["spec"]["failurePolicy"] == "Fail", path
        name = policy["metadata"]["name"]
        assert bindings and all(b["kind"] == "ValidatingAdmissionPolicyBinding" for b in bindings), path
        assert bindings[0]["metadata"]["name"] == name, path
        for binding in bindings:
            assert binding["spec"]["policyName"] == name and binding["spec"]["validationActions"] == ["Deny"], path
            assert binding["metadata"]["name"].startswith(name), path
        found[name] = path
    return found


def provision_timeout() -> int:
    config = objects_of(file_documents(DEPLOY / "base" / "config.yaml"), "ConfigMap")["tenant-functions-config"]
    return int(config["data"]["PROVISION_TIMEOUT_SECONDS"])


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_yaml_file_parses(path: Path) -> None:
    docs = file_documents(path)
    assert docs, f"{path} holds no YAML document"
    for doc in docs:
        assert isinstance(doc, dict), f"{path}: a document is not a mapping"
        assert doc.get("apiVersion") and doc.get("kind"), f"{path}: a document lacks apiVersion or kind"
        if doc["kind"] not in KUSTOMIZE_KINDS:
            assert doc.get("metadata", {}).get("name"), f"{path}: a {doc['kind']} has no metadata.name"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_everything(rendered: Mapping[str, str], overlay: str) -> None:
    docs = documents(rendered[overlay])
    kinds: dict[str, set[str]] = {}
    for doc in docs:
        kinds.setdefault(doc["kind"], set()).add(doc["metadata"]["name"])
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], f"{doc['kind']} {doc['metadata']['name']}"
        else:
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{doc['kind']} {doc['metadata']['name']}"
    assert kinds["Service"] == set(FUNCTION_MODULES)
    assert kinds["Trigger"] == {p.stem for p in TRIGGERS.glob("*.yaml")}
    assert kinds["Broker"] == {"default"}
    assert kinds["ApiServerSource"] == {"tenant-source"}
    assert kinds["ServiceAccount"] == {*FUNCTION_MODULES, "tenant-source"}
    assert kinds["SinkBinding"] == {"tenant-resync", "tenant-vcluster-watch"}
    assert kinds["Namespace"] == {NAMESPACE}
    assert "tenant-functions-config" in kinds["ConfigMap"]
    assert kinds["ValidatingAdmissionPolicy"] == set(policy_files()), "every policy/ file is rendered, and only those"
    bindings = {d["metadata"]["name"] for p in policy_files().values() for d in file_documents(p)[1:]}
    assert kinds["ValidatingAdmissionPolicyBinding"] == bindings
    for name, service in objects_of(docs, "Service").items():
        image = service["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image == f"{IMAGE}:{TAGS[overlay]}", name
    config = objects_of(docs, "ConfigMap")["tenant-functions-config"]["data"]
    assert config["ENVIRONMENT"] == {"dev": "development", "prod": "production"}[overlay]


def test_prod_keeps_one_install_pod_warm(rendered: Mapping[str, str]) -> None:
    services = objects_of(documents(rendered["prod"]), "Service")
    annotations = services["tenant-install"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["autoscaling.knative.dev/min-scale"] == "1"


def retry_waits(delivery: Mapping[str, Any], retry_after: int | None) -> list[float]:
    """The waits before each retry of a Trigger with this ``delivery``, when the subscriber answers
    503 with this ``Retry-After`` every time (knative/eventing v0.48.0
    pkg/kncloudevents/retries.go, design.md section 2): the larger of the backoff (linear d*k,
    exponential d*2^k, k counted from 0) and the Retry-After capped at ``retryAfterMax``, which
    counts only when the Trigger sets it."""

    def seconds(duration: str) -> int:
        match = re.fullmatch(r"PT(\d+)S", duration)
        assert match, f"{duration}: only whole seconds are expected here"
        return int(match.group(1))

    delay = seconds(delivery.get("backoffDelay", "PT0S"))
    policy = delivery.get("backoffPolicy")
    cap = delivery.get("retryAfterMax")
    waits: list[float] = []
    for k in range(delivery["retry"]):
        backoff = {"linear": delay * k, "exponential": delay * 2**k}.get(policy, 0)
        asked = min(retry_after, seconds(cap)) if cap and retry_after is not None else 0
        waits.append(max(backoff, asked))
    return waits


def longest_lease_hold() -> int:
    """How long another pod may hold the work lock while install's delivery waits for it: its
    helm's deadline (tenant-functions-config, else the default), the kill after it, and the
    Lease's life after its holder's last renewal (a holder that died)."""
    config = objects_of(file_documents(DEPLOY / "base" / "config.yaml"), "ConfigMap")["tenant-functions-config"]
    deadline = int(config["data"].get("HELM_DEADLINE_SECONDS", Settings().helm_deadline_seconds))
    return deadline + HELM_KILL_AFTER_SECONDS + LEASE_SECONDS


def test_installs_retries_outlast_the_longest_hold_of_the_work_lock(kubectl: Path, tmp_path: Path) -> None:
    """Issue 26 item 1: a delivery that finds another pod's helm running answers 503 with
    Retry-After 5 (shared.steps.locks); its retries must last until that pod's Lease is free, with
    the retryafter feature and without it, or the Tenant is provisioned only at resync's next pass."""
    shipped = file_documents(TRIGGERS / "tenant-install.yaml")[0]["spec"]["delivery"]
    without = objects_of(documents(render_without_retryafter(kubectl, tmp_path / "overlay")), "Trigger")
    plain = without["tenant-install"]["spec"]["delivery"]
    assert "retryAfterMax" not in plain and {**plain, "retryAfterMax": "PT15S"} == shipped
    for delivery in (shipped, plain):
        assert sum(retry_waits(delivery, retry_after=5)) > longest_lease_hold(), delivery
        assert sum(retry_waits(delivery, retry_after=None)) > longest_lease_hold(), delivery
    # A crashed pod's delivery is retried at once; the Lease's own Retry-After is honoured.
    assert retry_waits(plain, None)[0] == 0 and retry_waits(shipped, 5)[:3] == [5, 5, 5]


def test_without_retryafter_component_swaps_the_poll_for_linear_backoff(kubectl: Path, tmp_path: Path) -> None:
    triggers = objects_of(documents(render_without_retryafter(kubectl, tmp_path / "overlay")), "Trigger")
    delivery = triggers["tenant-check-ready"]["spec"]["delivery"]
    assert "retryAfterMax" not in delivery
    assert delivery["backoffPolicy"] == "linear"
    assert delivery["backoffDelay"] == "PT10S"
    # Linear backoff waits 0, d, 2d, ...: the last check must come after the provision timeout.
    waits = [10 * k for k in range(delivery["retry"])]
    assert sum(waits) >= provision_timeout()
    hint = triggers["tenant-check-ready-hint"]["spec"]["delivery"]
    # 0, 1, 2, ... 5 s between looks: the last one 15 s after the change, one poll interval
    assert (hint["backoffPolicy"], hint["backoffDelay"]) == ("linear", "PT1S")
    assert sum(range(hint["retry"])) == 15
    changed = {"tenant-check-ready", "tenant-check-ready-hint", "tenant-cleanup", "tenant-install"}
    for path in TRIGGERS.glob("*.yaml"):
        if path.stem not in changed:
            assert triggers[path.stem]["spec"] == file_documents(path)[0]["spec"], path.stem
    assert not [name for name, t in triggers.items() if "retryAfterMax" in t["spec"]["delivery"]]


def test_config_features_patch_enables_retryafter_and_sender_identity_only() -> None:
    (patch,) = file_documents(CONFIG_FEATURES_PATCH)
    assert (patch["kind"], patch["metadata"]["name"], patch["metadata"]["namespace"]) == (
        "ConfigMap",
        "config-features",
        "knative-eventing",
    )
    assert patch["data"] == {"delivery-retryafter": "enabled", "authentication-oidc": "enabled"}


# ----------------------------------------------------------------------------- Triggers


@pytest.mark.parametrize("path", sorted(TRIGGERS.glob("*.yaml")), ids=lambda p: p.name)
def test_trigger_file_contract(path: Path) -> None:
    (trigger,) = file_documents(path)
    assert trigger["apiVersion"] == "eventing.knative.dev/v1" and trigger["kind"] == "Trigger"
    assert trigger["metadata"]["name"] == path.stem
    assert trigger["metadata"]["namespace"] == NAMESPACE
    spec = trigger["spec"]
    assert spec["broker"] == "default"
    function = HINT_TRIGGERS.get(path.stem, path.stem)
    assert spec["subscriber"] == {
        "ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": function},
        "audience": function,  # tests/deploy/test_sender_identity.py
    }
    delivery = spec["delivery"]
    if path.stem == "tenant-resync":
        assert "deadLetterSink" not in delivery, "a tick names no Tenant for dead-letter to mark Failed"
    else:
        assert delivery["deadLetterSink"] == {
            "ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "tenant-dead-letter"},
            "audience": "tenant-dead-letter",
        }
    if path.stem in ("tenant-check-ready", "tenant-check-ready-hint", "tenant-cleanup"):
        # Polls: the function's Retry-After is the wait (shared.settings caps it at 15 s).
        assert delivery["retryAfterMax"] == "PT15S"
        assert "backoffPolicy" not in delivery and "backoffDelay" not in delivery
    if path.stem == "tenant-check-ready":
        assert delivery["retry"] * 15 > provision_timeout(), "the retries must outlast the provision timeout"
    elif path.stem == "tenant-check-ready-hint":
        # One look a second (check_ready.LOOK_AGAIN_SECONDS) for one poll interval from the change.
        assert delivery["retry"] * check_ready.LOOK_AGAIN_SECONDS > 15, "its looks must outlast a poll interval"
    elif path.stem == "tenant-cleanup":
        assert delivery["retry"] * 5 >= 300, "five minutes at the default CLEANUP_POLL_SECONDS for a namespace to go"
    elif path.stem == "tenant-install":
        # Linear, so that retries stay close while another pod's helm runs (the test above).
        assert (delivery["backoffPolicy"], delivery["backoffDelay"], delivery["retryAfterMax"]) == (
            "linear",
            "PT2S",
            "PT15S",
        )
    elif path.stem == "tenant-resync":
        # A tick that cannot be handled is retried a little; the next tick comes anyway.
        assert (delivery["retry"], delivery["backoffPolicy"], delivery["backoffDelay"]) == (3, "exponential", "PT10S")
    else:
        assert (delivery["retry"], delivery["backoffPolicy"], delivery["backoffDelay"]) == (5, "exponential", "PT1S")


def test_router_trigger_takes_every_tenant_change_and_nothing_else() -> None:
    (trigger,) = file_documents(TRIGGERS / "tenant-router.yaml")
    assert trigger["spec"]["filters"] == [
        {"any": [{"exact": {"type": t}} for t in sorted(lifecycle.ROUTER.takes, key=ADD_UPDATE_DELETE.index)]},
        {"exact": {"kind": "Tenant"}},
    ]


def test_resync_trigger_takes_only_its_own_pingsource() -> None:
    (trigger,) = file_documents(TRIGGERS / "tenant-resync.yaml")
    (ping,) = file_documents(EVENTING / "resync-pingsource.yaml")
    source = f"/apis/v1/namespaces/{ping['metadata']['namespace']}/pingsources/{ping['metadata']['name']}"
    assert trigger["spec"]["filters"] == [{"exact": {"type": "dev.knative.sources.ping", "source": source}}]


def test_the_resync_schedule_ticks_every_resync_tick_seconds() -> None:
    """resync spreads its close looks by the tick's number (shared.model.cadence), counted in
    RESYNC_TICK_SECONDS: the schedule must tick that often, on the period's boundaries, in UTC."""
    (ping,) = file_documents(EVENTING / "resync-pingsource.yaml")
    minutes = re.fullmatch(r"\*/(\d+) \* \* \* \*", ping["spec"]["schedule"])
    assert minutes is not None, "every N minutes, from the hour"
    assert 60 % int(minutes[1]) == 0, "a period that divides the hour: the ticks fall on its boundaries"
    assert int(minutes[1]) * 60 == Settings().resync_tick_seconds
    assert ping["spec"]["timezone"] == "Etc/UTC"


HINT_TRIGGERS = {step.hint_trigger: step.function for step in lifecycle.STEPS if step.hint_trigger}
ONE_TYPE_STEPS = [step for step in lifecycle.STEPS if step not in (lifecycle.ROUTER, lifecycle.RESYNC)]


@pytest.mark.parametrize("step", ONE_TYPE_STEPS, ids=lambda step: step.function)
def test_step_triggers_filter_on_the_exact_type_the_lifecycle_table_gives(step: lifecycle.Step) -> None:
    """shared.model.lifecycle.STEPS is the one table of who takes what: each step's Trigger passes
    exactly its event type, so no Tenant change (the router's) reaches install or cleanup."""
    (doc,) = file_documents(TRIGGERS / f"{step.function}.yaml")
    (event_type,) = step.takes
    assert doc["spec"]["filters"] == [{"exact": {"type": event_type}}]


@pytest.mark.parametrize("step", [s for s in lifecycle.STEPS if s.hints], ids=lambda step: step.function)
def test_hint_triggers_filter_on_the_exact_hint_types(step: lifecycle.Step) -> None:
    (doc,) = file_documents(TRIGGERS / f"{step.hint_trigger}.yaml")
    (event_type,) = step.hints
    assert doc["spec"]["filters"] == [{"exact": {"type": event_type}}]


def test_every_trigger_is_a_step_of_the_lifecycle_table() -> None:
    assert {path.stem for path in TRIGGERS.glob("*.yaml")} == {step.function for step in lifecycle.STEPS} | set(
        HINT_TRIGGERS
    )


# ----------------------------------------------------------------------------- Services


def _services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(SERVICES.glob("*.yaml")):
        (doc,) = file_documents(path)
        assert doc["metadata"]["name"] == path.stem
        found[path.stem] = doc
    return found


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item for item in container.get("env", [])}


@pytest.mark.parametrize("name", sorted(FUNCTION_MODULES))
def test_service_runs_its_function_safely(name: str) -> None:
    service = _services()[name]
    assert service["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"
    template = service["spec"]["template"]
    spec = template["spec"]
    (container,) = spec["containers"]
    assert spec["serviceAccountName"] == name
    assert container["command"] == dockerfile_entrypoint(), "the Service must run the image's start command"
    function = importlib.import_module(f"functions.{FUNCTION_MODULES[name]}")
    assert name == f"tenant-{function.NAME}", "a Service is named after the function it runs (logs, metrics, Events)"
    env = _env(container)
    workers, threads = int(env["GUNICORN_WORKERS"]["value"]), int(env["GUNICORN_THREADS"]["value"])
    assert spec["containerConcurrency"] == workers * threads, "one pod gets at most what gunicorn serves at once"
    assert 0 < spec["timeoutSeconds"] <= 600
    annotations = template["metadata"]["annotations"]
    assert int(annotations["autoscaling.knative.dev/max-scale"]) >= 1
    assert container["envFrom"] == [{"configMapRef": {"name": "tenant-functions-config"}}]
    if name != WATCH:  # it sends no callback
        assert env["INTERNAL_SERVICE_TOKEN"]["valueFrom"] == {
            "secretKeyRef": {"name": "kubeopera-internal-token", "key": "token", "optional": True}
        }
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Knative's aggressive readiness probe (queue-proxy, every 50 ms) only without a period:
    # with one, a pod woken from zero waited for the kubelet's next probe (cold start).
    assert "periodSeconds" not in container["readinessProbe"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] > 0
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    empty_dirs = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    assert mounts.get("/tmp") in empty_dirs
    assert not set(HELM_HOME_VARS) & set(env), "helm's folders are set once, by the image (Dockerfile ENV)"
    if name in HELM_FUNCTIONS:
        image_env = dockerfile_env()
        for var in HELM_HOME_VARS:
            path = image_env[var]
            assert any(path.startswith(mount + "/") and mounts[mount] in empty_dirs for mount in mounts), (
                f"{name}: {var}={path} (Dockerfile ENV) is not on a writable emptyDir"
            )


def test_install_is_heavy_and_few_the_others_light_and_many() -> None:
    services = _services()
    install = services["tenant-install"]["spec"]["template"]["spec"]["containerConcurrency"]
    for name, service in services.items():
        if name not in ("tenant-install", "tenant-resync"):
            assert service["spec"]["template"]["spec"]["containerConcurrency"] > install, name
    # resync: one pass at a time, on one pod
    resync = services["tenant-resync"]["spec"]["template"]
    assert resync["spec"]["containerConcurrency"] == 1
    assert resync["metadata"]["annotations"]["autoscaling.knative.dev/max-scale"] == "1"


# ----------------------------------------------------------------------------- RBAC


@pytest.mark.parametrize("name", sorted(FUNCTION_MODULES))
def test_rbac_file_is_one_identity(name: str) -> None:
    docs = file_documents(RBAC / f"{name}.yaml")
    accounts = objects_of(docs, "ServiceAccount")
    assert list(accounts) == [name]
    roles = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("Role", "ClusterRole")}
    bound = set()
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
        bound.add((binding["roleRef"]["kind"], binding["roleRef"]["name"]))
        if binding["kind"] == "RoleBinding":
            assert binding["roleRef"]["kind"] == "Role", "a RoleBinding here binds this file's Role"
    # The file's ClusterRole for Tenant namespaces is bound in each of them by tenant-install, at
    # run time (shared/steps/access.py; tests/deploy/test_namespace_access.py), never here.
    at_run_time = {("ClusterRole", access.cluster_role(name))} if name in access.BOUND else set()
    assert not bound & at_run_time
    assert bound | at_run_time == roles, "every Role of the file is bound to its ServiceAccount, and only those"
    for role in (d for d in docs if d["kind"] in ("Role", "ClusterRole")):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
            assert not {"escalate", "impersonate"} & set(rule["verbs"])
            if "bind" in rule["verbs"]:  # install's, on exactly the ClusterRoles it binds per Tenant namespace
                assert name == "tenant-install" and rule["resources"] == ["clusterroles"], rule
                assert rule["resourceNames"] == [access.cluster_role(s) for s in access.BOUND]


def _rules(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (doc["kind"], doc["metadata"]["name"], rule)
        for doc in file_documents(path)
        if doc["kind"] in ("Role", "ClusterRole")
        for rule in doc["rules"]
    ]


def test_check_ready_writes_only_the_tenants_status_and_events() -> None:
    for kind, name, rule in _rules(RBAC / "tenant-check-ready.yaml"):
        if rule["resources"] in (["events"], ["tenants/status"]):
            continue  # Events on the Tenant; phase Failed at the provision timeout
        assert not WRITE_VERBS & set(rule["verbs"]), f"{kind} {name}: {rule}"


def test_only_cleanup_deletes_namespaces_and_stored_kubeconfigs() -> None:
    for path in sorted(RBAC.glob("*.yaml")):
        for kind, name, rule in _rules(path):
            deletes = "delete" in rule["verbs"] and {"namespaces", "secrets"} & set(rule["resources"])
            if path.stem == "tenant-install" and kind == "ClusterRole":
                continue  # helm's objects in vcluster-* (confined by policy/tenant-write-scope.yaml)
            assert not deletes or path.stem == "tenant-cleanup", f"{path.name}: {kind} {name}: {rule}"


def test_cluster_wide_rules_are_only_where_namespaces_are_unknown() -> None:
    """notify-api and dead-letter touch kubeopera-system only: no ClusterRole for them."""
    for name in ("tenant-notify-api", "tenant-dead-letter"):
        kinds = {doc["kind"] for doc in file_documents(RBAC / f"{name}.yaml")}
        assert not kinds & {"ClusterRole", "ClusterRoleBinding"}, name


def test_deletion_protection_guards_tenants_by_the_models_annotation() -> None:
    """policy/tenant-deletion-protection.yaml: DELETE of Tenants (and CREATE and UPDATE, for the
    value), the annotation spelled as shared.model.naming has it, its message giving the command
    that lifts it (tests/integration/test_deletion_protection_policy.py runs it on the API server)."""
    policy, _ = file_documents(policy_files()["kubeopera-tenants-deletion-protection"])
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [GROUP],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": [PLURAL],
        }
    ], "tenants alone: tenants/status writes (the functions') never touch the annotation"
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["key"] == f"'{ANNOTATION_DELETION_PROTECTION}'"
    refusal = policy["spec"]["validations"][0]
    assert "request.operation != 'DELETE'" in refusal["expression"] and refusal["reason"] == "Forbidden"
    assert f"kubectl annotate {PLURAL}.{GROUP} " in refusal["messageExpression"]


SCOPE = "kubeopera-tenants-write-scope"


def _takes_every_write(match: Mapping[str, Any]) -> bool:
    """Do these match rules take every write in every namespace (no rules: every resource)?"""
    rules = match.get("resourceRules") or [{"resources": ["*/*"], "operations": ["*"]}]
    every = any(
        {"*", "*/*"} & set(rule["resources"]) and "*" in rule["operations"] and rule.get("scope", "*") == "*"
        for rule in rules
    )
    return every and not match.get("namespaceSelector") and not match.get("objectSelector")


def test_no_policy_takes_every_write_of_the_cluster() -> None:
    """Every write a policy's binding takes is made unstructured for CEL before the policy's
    matchConditions can say "not mine": a binding that took every write in every namespace would
    be paid by every write of the cluster, anyone's (bench/admission.py). Each narrows what it
    takes by kind, operation or namespace, which costs no CEL."""
    for path in policy_files().values():
        policy, *bindings = file_documents(path)
        for binding in bindings:
            narrowed = binding["spec"].get("matchResources")
            taken = _takes_every_write(policy["spec"]["matchConstraints"]) and (
                narrowed is None or _takes_every_write(narrowed)
            )
            assert not taken, f"{binding['metadata']['name']} takes every write of the cluster"


SCOPED = ("tenant-install", "tenant-cleanup", "tenant-store-kubeconfig")
OPERATIONS = {
    "create": "CREATE",
    "update": "UPDATE",
    "patch": "UPDATE",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}
# Reviews are asked, not stored: a create of one writes nothing (the functions check senders' tokens).
REVIEWS = {("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "selfsubjectaccessreviews")}
# Groups every ServiceAccount of kubeopera-system is in: a grant to one is a grant to the three.
THEIR_GROUPS = {"system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"}
CONNECTS = ("/exec", "/attach", "/portforward", "/proxy")  # a CONNECT request, whatever the verb


def _is_theirs(subject: Mapping[str, Any]) -> bool:
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "ServiceAccount":
        return name in SCOPED and subject.get("namespace") == NAMESPACE
    if kind == "User":
        return name in {f"system:serviceaccount:{NAMESPACE}:{n}" for n in SCOPED}
    return kind == "Group" and name in THEIR_GROUPS


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_write_scope_takes_every_write_rbac_allows_outside_tenant_namespaces(
    rendered: Mapping[str, str], overlay: str
) -> None:
    """policy/tenant-write-scope.yaml's bindings take only some writes (above); with the RBAC of
    the rendered overlay they must still take every write install, cleanup and store-kubeconfig
    can make outside the vcluster-* namespaces: whatever is bound to them (by name, or to a group
    they are in) in a namespace is in kubeopera-system, which the second binding takes whole;
    each write rule of a ClusterRole bound to them cluster-wide is a kind and operation of the
    first binding, which takes them in every namespace; and a ClusterRole bound to them in no
    ClusterRoleBinding can only be bound by install's RoleBindings, which the first binding takes."""
    docs = documents(rendered[overlay])
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == SCOPE]
    bindings = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    cluster_wide, at_home = bindings[SCOPE], bindings[f"{SCOPE}-{NAMESPACE}"]
    constraints = policy["spec"]["matchConstraints"]
    assert _takes_every_write(constraints) and not constraints.get("excludeResourceRules"), constraints
    assert constraints.get("matchPolicy", "Equivalent") == "Equivalent", constraints
    condition = policy["spec"]["matchConditions"][0]["expression"]
    for name in SCOPED:
        assert f"'system:serviceaccount:{NAMESPACE}:{name}'" in condition, name

    home = at_home["spec"]["matchResources"]
    assert set(home) == {"namespaceSelector", "resourceRules"}, home
    assert home["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    (home_rule,) = home["resourceRules"]
    assert home_rule == {
        "apiGroups": ["*"],
        "apiVersions": ["*"],
        "operations": ["*"],
        "resources": ["*/*"],
        "scope": "Namespaced",
    }, home_rule
    anywhere = cluster_wide["spec"]["matchResources"]
    assert set(anywhere) == {"resourceRules"}, "no selector, no exclusion: every namespace"
    taken = set()
    for rule in anywhere["resourceRules"]:
        assert rule["apiVersions"] == ["*"] and rule.get("scope", "*") == "*", rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                taken |= {(group, resource, operation) for operation in rule["operations"]}

    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs if "rules" in d}
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if not any(_is_theirs(subject) for subject in binding.get("subjects") or []):
            continue
        where = f"{binding['kind']} {binding['metadata']['name']}"
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles[(ref["kind"], namespace, ref["name"])]
        assert "aggregationRule" not in role, f"{where}: an aggregated ClusterRole's rules are not in the file"
        for rule in role["rules"]:
            assert not {"escalate", "impersonate", "*"} & set(rule["verbs"]), f"{where}: {rule}"
            assert not [r for r in rule["resources"] if r.endswith(CONNECTS)], f"{where}: {rule}"
            assert not [r for r in rule["resources"] if r.startswith("namespaces/")], f"{where}: {rule}"
        if binding["kind"] == "RoleBinding":
            assert binding["metadata"]["namespace"] == NAMESPACE, f"{where}: its rules would be in no binding"
            continue
        for rule in role["rules"]:
            for verb in set(rule["verbs"]) & set(OPERATIONS):
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        if (group, resource) in REVIEWS:
                            continue
                        want = (group, resource, OPERATIONS[verb])
                        assert want in taken, f"{where}: {ref['name']} lets them {verb} {resource} anywhere"
    # a ClusterRole bound in no ClusterRoleBinding is bound per namespace, by install's RoleBindings;
    # the namespace object itself, with its status and finalize, is the first binding's too
    assert {("rbac.authorization.k8s.io", "rolebindings", op) for op in ("CREATE", "UPDATE")} <= taken
    for resource in ("namespaces", "namespaces/status", "namespaces/finalize"):
        assert {("", resource, "CREATE"), ("", resource, "UPDATE")} <= taken, resource


def test_helm_records_judges_only_the_namespaces_install_makes() -> None:
    """policy/tenant-helm-records.yaml takes Secrets only in namespaces with the label install puts
    on every namespace it makes (a label selector costs no CEL), so other Secrets of the cluster
    are not made unstructured for it."""
    policy, _ = file_documents(policy_files()["kubeopera-tenants-helm-records"])
    (example,) = file_documents(DEPLOY / "examples" / "alice-default.yaml")
    example["metadata"]["uid"] = "0d6f6a1c-1b7e-4c3e-9a51-2f0c8e4b7d10"
    labels = ownership.namespace_labels(Tenant.from_object(example))
    selector = policy["spec"]["matchConstraints"]["namespaceSelector"]
    assert selector == {"matchLabels": {LABEL_MANAGED_BY: MANAGED_BY}}
    assert labels[LABEL_MANAGED_BY] == MANAGED_BY


def test_the_tenant_source_reads_tenants_and_nothing_else() -> None:
    rules = _rules(EVENTING / "apiserversource-rbac.yaml")
    assert [(kind, rule) for kind, _, rule in rules] == [
        ("Role", {"apiGroups": ["kubeopera.io"], "resources": ["tenants"], "verbs": ["get", "list", "watch"]}),
    ]
    (source,) = file_documents(EVENTING / "apiserversource.yaml")
    assert source["spec"]["serviceAccountName"] == "tenant-source"
    assert source["spec"]["mode"] == "Resource"
    assert source["spec"]["resources"] == [{"apiVersion": "kubeopera.io/v1alpha1", "kind": "Tenant"}]


def test_the_vcluster_watch_lists_and_watches_statefulsets_and_nothing_else() -> None:
    rules = _rules(DEPLOY / "base" / "rbac" / f"{WATCH}.yaml")
    assert [(kind, rule) for kind, _, rule in rules] == [
        ("ClusterRole", {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["list", "watch"]}),
    ]
    template = _services()[WATCH]["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["autoscaling.knative.dev/min-scale"] == annotations["autoscaling.knative.dev/max-scale"] == "1"
    env = _env(template["spec"]["containers"][0])
    assert env["GUNICORN_WORKERS"]["value"] == "1", "one worker, one watch"
    assert not {"SENDER_AUDIENCE", "SENDER_SUBJECTS"} & set(env), "nothing is delivered to it"
    (binding,) = file_documents(EVENTING / "vcluster-watch-sinkbinding.yaml")
    assert binding["spec"]["subject"] == {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": WATCH}
    assert binding["spec"]["sink"]["ref"]["kind"] == "Broker"


def test_the_vcluster_watch_selects_the_statefulsets_install_labels() -> None:
    assert SELECTOR == LABEL_OWNER_UID
    (example,) = file_documents(DEPLOY / "examples" / "alice-default.yaml")
    example["metadata"]["uid"] = "0d6f6a1c-1b7e-4c3e-9a51-2f0c8e4b7d10"
    tenant = Tenant.from_object(example)
    statefulset = vcluster_values(tenant, "production")["controlPlane"]["statefulSet"]["labels"]
    assert LABEL_OWNER_UID in statefulset
    assert ownership.owner_of(statefulset) == ownership.Owner(tenant.namespace, tenant.name, tenant.uid)


# ----------------------------------------------------------------------------- the image


def test_dockerfile_pins_its_inputs_and_runs_as_non_root() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base), base
    (helm_version,) = re.findall(r"^ARG HELM_VERSION=(\S+)$", text, re.M)
    assert helm_version == toolchain.HELM_VERSION, "the image's helm is the one the tests run"
    assert "sha256sum -c" in text, "the helm download is checked against its published checksum"
    users = re.findall(r"^USER\s+(\S+)$", text, re.M)
    assert users and re.fullmatch(r"[1-9]\d*:[1-9]\d*", users[-1]), "the last USER must be a numeric non-root user"
    assert dockerfile_entrypoint() == ["gunicorn", "-c", "python:functions.gunicorn_conf"]
