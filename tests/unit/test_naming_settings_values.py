"""Naming rules, settings from the environment, and the Helm values builder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared.errors import ConfigError, PermanentError
from shared.model.isolation import Isolation
from shared.model.naming import RELEASE_NAME_MAX, TenantNames, check_tenant_name
from shared.model.quantity import parse
from shared.model.tenant import Quota, Tenant, TenantSpec
from shared.model.values import distro_of, keep_distro, vcluster_values
from shared.settings import Settings

from .fakes import TENANT_NAMESPACE

CS_ID = "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b"


def test_names_follow_the_original_rules() -> None:
    names = TenantNames.of("alice-default", CS_ID)
    assert names.release == "vc-alice-default"
    assert names.namespace == "vcluster-alice-default"
    assert names.vcluster_secret == "vc-vc-alice-default"
    assert names.kubeconfig_secret == f"tenant-{CS_ID}-kubeconfig"
    assert names.in_cluster_server == "https://vc-alice-default.vcluster-alice-default.svc:443"


@pytest.mark.parametrize("name", ["ab", "-abc", "abc-", "Abc", "a_bc", "a" * 33, "", "abc.d"])
def test_bad_tenant_names_are_permanent_errors(name: str) -> None:
    with pytest.raises(PermanentError, match="tenantName"):
        check_tenant_name(name)


@pytest.mark.parametrize("name", ["abc", "a-b", "a" * 32, "0tenant9"])
def test_good_tenant_names_pass(name: str) -> None:
    assert check_tenant_name(name) == name


def test_longest_release_name_fits_helm() -> None:
    assert len(TenantNames.of("a" * 32, CS_ID).release) <= RELEASE_NAME_MAX == 53


def test_cloud_space_id_must_be_a_uuid() -> None:
    with pytest.raises(PermanentError, match="cloudSpaceID"):
        TenantNames.of("alice", "not-a-uuid")


# Sender identity is on by default and needs these two (tests/unit/test_senders.py).
SENDERS = {
    "SENDER_AUDIENCE": "tenant-install",
    "SENDER_SUBJECTS": "system:serviceaccount:kubeopera-system:tenant-install-oidc-eventing.knative.dev-trigger",
}


def test_settings_defaults_are_the_original_operators() -> None:
    s = Settings.from_env(SENDERS)
    assert s.kubeopera_api_base_url == "http://kubeopera-api:8080"
    assert s.internal_service_token == ""
    assert s.environment == "development"
    assert (s.chart_ref, s.chart_version) == ("oci://ghcr.io/loft-sh/charts/vcluster", "0.21.2")
    assert s.tenant_namespace == "kubeopera-system"
    assert s.verify_senders


def test_settings_read_the_environment() -> None:
    s = Settings.from_env(
        {
            "KUBEOPERA_API_BASE_URL": "https://api.example:9443/",
            "INTERNAL_SERVICE_TOKEN": "s3cret",
            "ENVIRONMENT": "production",
            "VCLUSTER_CHART": "oci://127.0.0.1:5000/charts/vcluster",
            "VCLUSTER_CHART_VERSION": "0.21.2",
            "PROVISION_TIMEOUT_SECONDS": "900",
            "CHART_CACHE_DIR": "/var/cache/charts",
            "RESYNC_TICK_SECONDS": "600",
            "VCLUSTER_LOOK_PASSES": "4",
        }
        | SENDERS
    )
    assert s.kubeopera_api_base_url == "https://api.example:9443"
    assert (s.resync_tick_seconds, s.vcluster_look_passes) == (600, 4)
    assert s.environment == "production"
    assert s.provision_timeout_seconds == 900
    assert s.chart_cache_dir == Path("/var/cache/charts")
    assert "s3cret" not in repr(s)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("KUBEOPERA_API_BASE_URL", "kubeopera-api:8080", "KUBEOPERA_API_BASE_URL"),
        ("VCLUSTER_CHART", "ghcr.io/loft-sh/charts/vcluster", "VCLUSTER_CHART"),
        ("VCLUSTER_CHART_VERSION", "latest", "VCLUSTER_CHART_VERSION"),
        ("PROVISION_TIMEOUT_SECONDS", "ten", "PROVISION_TIMEOUT_SECONDS"),
        ("PROVISION_TIMEOUT_SECONDS", "0", "PROVISION_TIMEOUT_SECONDS"),
        ("LOG_LEVEL", "chatty", "LOG_LEVEL"),
        ("TENANT_NAMESPACE", "Not_A_Namespace", "TENANT_NAMESPACE"),
        ("READY_POLL_SECONDS", "16", "READY_POLL_SECONDS must be at most 15"),
        ("CLEANUP_POLL_SECONDS", "60", "CLEANUP_POLL_SECONDS must be at most 15"),
        ("CLEANUP_POLL_SECONDS", "-1", "CLEANUP_POLL_SECONDS"),
        ("VCLUSTER_DISTRO", "k0s", "VCLUSTER_DISTRO must be one of k3s, k8s, got 'k0s'"),
        ("VCLUSTER_EXTERNAL_SERVER", "http://{tenant}.example.com", "must be https://<host>"),
        ("VCLUSTER_EXTERNAL_SERVER", "https://10.0.0.1:6443", "with a DNS name as host"),
        ("VCLUSTER_EXTERNAL_SERVER", "https://{tenant}.example.com/api", "must be https://<host>"),
        ("VCLUSTER_EXTERNAL_SERVER", "https://{user}.example.com", "not \\['user'\\]"),
        ("HELM_DEADLINE_SECONDS", "0", "HELM_DEADLINE_SECONDS must be positive"),
        ("VCLUSTER_LOOK_PASSES", "0", "VCLUSTER_LOOK_PASSES must be positive, got 0"),
        ("VCLUSTER_LOOK_PASSES", "half", "VCLUSTER_LOOK_PASSES must be a whole number of passes, got 'half'"),
        ("RESYNC_TICK_SECONDS", "5m", "RESYNC_TICK_SECONDS must be a whole number of seconds, got '5m'"),
        (
            "HELM_DEADLINE_SECONDS",
            "178",
            r"STUCK_RELEASE_SECONDS \(180\) must exceed HELM_DEADLINE_SECONDS \(178\) \+ 2",
        ),
        (
            "STUCK_RELEASE_SECONDS",
            "122",
            r"STUCK_RELEASE_SECONDS \(122\) must exceed HELM_DEADLINE_SECONDS \(120\) \+ 2",
        ),
    ],
)
def test_bad_settings_fail_at_start_naming_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({name: value} | SENDERS)


def test_values_are_the_original_defaults_with_quota_as_requests_and_limits() -> None:
    spec = TenantSpec("3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b", "alice-default", CS_ID, Quota("2", "4Gi"))
    tenant = Tenant(TENANT_NAMESPACE, "alice", "uid-1", 1, "7", spec)
    values = vcluster_values(tenant, "staging")
    assert values["controlPlane"]["distro"] == {"k3s": {"enabled": True}}
    resources = values["controlPlane"]["statefulSet"]["resources"]
    assert resources == {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
    assert values["sync"] == {"toHost": {"ingresses": {"enabled": True}, "serviceAccounts": {"enabled": True}}}
    assert values["exportKubeConfig"] == {"server": "https://vc-alice-default.vcluster-alice-default.svc:443"}
    assert values["controlPlane"]["proxy"] == {
        "extraSANs": [
            "vc-alice-default.vcluster-alice-default.svc",
            "vc-alice-default.vcluster-alice-default.svc.cluster.local",
        ]
    }
    assert values["controlPlane"]["statefulSet"]["labels"] == {
        "kubeopera.io/environment": "staging",
        "kubeopera.io/tenant": "alice-default",
        "kubeopera.io/tenant-id": CS_ID,
        "kubeopera.io/owner-uid": "uid-1",
        "kubeopera.io/owner-namespace": TENANT_NAMESPACE,
        "kubeopera.io/owner-name": "alice",
    }
    assert set(values) == {"controlPlane", "sync", "exportKubeConfig", "policies"}
    # The chart's numbers unless set, the control plane's own requests and limits added.
    assert values["policies"] == Isolation().helm_policies(
        control_plane=values["controlPlane"]["statefulSet"]["resources"]["limits"]
    )
    hard = values["policies"]["resourceQuota"]["quota"]
    limits = values["controlPlane"]["statefulSet"]["resources"]["limits"]
    assert parse(hard["requests.cpu"]) == parse("10") + parse(limits["cpu"])
    assert parse(hard["limits.memory"]) == parse("40Gi") + parse(limits["memory"])
    assert hard["count/pods"] == "20"


def test_isolation_settings_change_or_add_entries_and_keep_the_rest() -> None:
    s = Settings.from_env(
        {
            "TENANT_RESOURCE_QUOTA": "requests.cpu=40, limits.cpu=80,requests.nvidia.com/gpu=2",
            "TENANT_LIMIT_DEFAULT": "memory=1Gi",
            "TENANT_LIMIT_DEFAULT_REQUEST": "cpu=250m",
            "TENANT_EGRESS_CIDR": "0.0.0.0/0",
            "TENANT_EGRESS_EXCEPT": "10.0.0.0/8,169.254.0.0/16",
            "POD_SECURITY_ENFORCE": "Restricted",
        }
        | SENDERS
    )
    policies = s.isolation.helm_policies()
    quota = policies["resourceQuota"]["quota"]
    assert (quota["requests.cpu"], quota["limits.cpu"], quota["requests.nvidia.com/gpu"]) == ("40", "80", "2")
    assert quota["count/pods"] == "20" and len(quota) == 16
    assert policies["limitRange"]["default"] == {"ephemeral-storage": "8Gi", "memory": "1Gi", "cpu": "1"}
    assert policies["limitRange"]["defaultRequest"] == {"ephemeral-storage": "3Gi", "memory": "128Mi", "cpu": "250m"}
    assert policies["networkPolicy"]["outgoingConnections"]["ipBlock"] == {
        "cidr": "0.0.0.0/0",
        "except": ["10.0.0.0/8", "169.254.0.0/16"],
    }
    assert s.isolation.pod_security_labels() == {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
    }


def test_isolation_defaults_are_baseline_and_the_charts() -> None:
    iso = Settings.from_env(SENDERS).isolation
    assert iso == Isolation()
    assert iso.pod_security_labels()["pod-security.kubernetes.io/enforce"] == "baseline"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TENANT_RESOURCE_QUOTA", "requests.cpu", "TENANT_RESOURCE_QUOTA must be name=quantity pairs"),
        ("TENANT_RESOURCE_QUOTA", "Requests.CPU=1", "TENANT_RESOURCE_QUOTA must be name=quantity pairs"),
        ("TENANT_RESOURCE_QUOTA", "limits.cpu=ten", "TENANT_RESOURCE_QUOTA: limits.cpu must be a Kubernetes quantity"),
        ("TENANT_RESOURCE_QUOTA", "count/pods=-1", "TENANT_RESOURCE_QUOTA: count/pods must be a Kubernetes quantity"),
        ("TENANT_LIMIT_DEFAULT", "memory=4 GB", "TENANT_LIMIT_DEFAULT: memory must be a Kubernetes quantity"),
        ("TENANT_LIMIT_DEFAULT_REQUEST", "=1", "TENANT_LIMIT_DEFAULT_REQUEST must be name=quantity pairs"),
        ("TENANT_EGRESS_CIDR", "everywhere", "TENANT_EGRESS_CIDR must be CIDRs"),
        ("TENANT_EGRESS_CIDR", "10.0.0.1/8", "TENANT_EGRESS_CIDR must be CIDRs"),
        ("TENANT_EGRESS_EXCEPT", "10.0.0.0/8,nope", "TENANT_EGRESS_EXCEPT must be CIDRs"),
        ("TENANT_EGRESS_EXCEPT", "fd00::/8", "TENANT_EGRESS_EXCEPT: fd00::/8 is not inside TENANT_EGRESS_CIDR"),
        ("POD_SECURITY_ENFORCE", "strict", "POD_SECURITY_ENFORCE must be one of privileged, baseline, restricted"),
        ("DELETE_RETAINED_VOLUMES", "maybe", "DELETE_RETAINED_VOLUMES must be true or false, got 'maybe'"),
    ],
)
def test_bad_isolation_settings_fail_at_start_naming_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        Settings.from_env({name: value} | SENDERS)


@pytest.mark.parametrize(("value", "expected"), [("", False), ("false", False), ("TRUE", True), ("1", True)])
def test_delete_retained_volumes_is_off_unless_asked(value: str, expected: bool) -> None:
    assert Settings.from_env({"DELETE_RETAINED_VOLUMES": value} | SENDERS).delete_retained_volumes is expected


@pytest.mark.parametrize(("value", "expected"), [("", False), ("no", False), ("true", True)])
def test_helm_checks_manifests_against_the_openapi_schema_only_when_asked(value: str, expected: bool) -> None:
    assert Settings.from_env({"HELM_VALIDATE_MANIFESTS": value} | SENDERS).validate_manifests is expected
    with pytest.raises(ConfigError, match="HELM_VALIDATE_MANIFESTS must be true or false"):
        Settings.from_env({"HELM_VALIDATE_MANIFESTS": "strict"} | SENDERS)


@pytest.mark.parametrize(("value", "expected"), [("", "k3s"), ("k8s", "k8s"), (" K3S ", "k3s")])
def test_the_distro_is_k3s_unless_set(value: str, expected: str) -> None:
    assert Settings.from_env({"VCLUSTER_DISTRO": value} | SENDERS).distro == expected


def test_a_running_vcluster_keeps_its_distro_and_a_new_one_gets_the_setting() -> None:
    spec = TenantSpec("3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b", "alice-default", CS_ID, Quota("2", "4Gi"))
    tenant = Tenant(TENANT_NAMESPACE, "alice", "uid-1", 1, "7", spec)
    k8s = vcluster_values(tenant, "staging", distro="k8s")
    assert keep_distro(k8s, None) == k8s  # a new release: the setting
    running_k3s = vcluster_values(tenant, "staging", distro="k3s")
    kept = keep_distro(k8s, running_k3s)
    assert kept["controlPlane"]["distro"] == {"k3s": {"enabled": True}}
    assert kept == running_k3s  # nothing else differs here
    assert k8s["controlPlane"]["distro"] == {"k8s": {"enabled": True}}  # the asked values are not changed
    assert distro_of({"controlPlane": {}}) == "k8s"  # the chart's own default
    # A release made without a distro runs the chart's default, k8s, and keeps it.
    assert keep_distro(running_k3s, {})["controlPlane"]["distro"] == {"k8s": {"enabled": True}}


def test_an_external_address_is_a_certificate_name_of_each_vcluster() -> None:
    settings = Settings.from_env({"VCLUSTER_EXTERNAL_SERVER": "https://{tenant}.vclusters.example.com:6443"} | SENDERS)
    spec = TenantSpec("3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b", "alice-default", CS_ID, Quota("2", "4Gi"))
    tenant = Tenant(TENANT_NAMESPACE, "alice", "uid-1", 1, "7", spec)
    assert spec.names.external_server(settings.external_server) == "https://alice-default.vclusters.example.com:6443"
    values = vcluster_values(tenant, "staging", external_server=settings.external_server)
    assert values["controlPlane"]["proxy"]["extraSANs"] == [
        "vc-alice-default.vcluster-alice-default.svc",
        "vc-alice-default.vcluster-alice-default.svc.cluster.local",
        "alice-default.vclusters.example.com",
    ]
    assert Settings.from_env(SENDERS).external_server == ""
    assert vcluster_values(tenant, "staging")["controlPlane"]["proxy"]["extraSANs"] == [
        "vc-alice-default.vcluster-alice-default.svc",
        "vc-alice-default.vcluster-alice-default.svc.cluster.local",
    ]
