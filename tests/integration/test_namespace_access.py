"""Secrets are readable only where install granted it, on the test bed's real kube-apiserver.

``deploy/base/rbac``, ``deploy/base/policy`` and the ApiServerSource's RBAC are applied as
shipped, with the Tenant CRD. The real ``install`` step runs as
``system:serviceaccount:kubeopera-system:tenant-install`` (a token from the TokenRequest API)
with the real helm CLI and the test bed's chart: it makes the Tenant's namespace, binds its own
rights there and grants the other functions theirs (``shared.steps.access``; `bind`, RBAC's escalation
check and the write-scope policy all let it) and installs the release. Then, each with a token
of its own ServiceAccount:

- every ServiceAccount of kubeopera-system (``kubectl auth can-i`` with its token) may get and
  list Secrets in none of ``kube-system``, ``default``, an application's namespace and a
  ``vcluster-*`` namespace no Tenant owns; in the Tenant's namespace install may (the control:
  the same question can say yes), and resync may get ``vc-<release>`` and nothing else;

- store-kubeconfig reads ``vc-<release>`` and stores the kubeconfig (its real ``handle``), and is
  refused (403) every other Secret: another Secret of that namespace, one in ``kube-system``, one
  in a namespace that is not a Tenant's, the vCluster Secret of a namespace install never
  granted; a list in its own Tenant's namespace too;
- check-ready's read of helm's release record and of ``vc-<release>`` work there, and nowhere else;
- resync reads the StatefulSet and ``vc-<release>`` there (its real ``observe``);
- cleanup uninstalls the release and deletes the namespace; the grants go with it, so a
  namespace of the same name made again by hand grants nothing.

Everything made here that did not exist before is deleted afterwards.
"""

from __future__ import annotations

import base64
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from functions import install, resync, store_kubeconfig
from shared.adapters.helm import Helm
from shared.adapters.kube import Kube
from shared.adapters.release import ReleaseRecords
from shared.errors import Forbidden, TemporaryError
from shared.model.naming import DEFAULT_TENANT_NAMESPACE, KUBECONFIG_KEY, VCLUSTER_CONFIG_KEY
from shared.model.rbac import has_labels
from shared.model.tenant import Tenant, TenantRef
from shared.settings import Settings
from shared.steps import access
from testbed.admin_kube import AdminKube
from testbed.controlplane import ControlPlane, kubeconfig_for_token, kubectl, request_token, wait_established
from testbed.registry import CHART_VERSION
from testbed.toolchain import Toolchain

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = DEFAULT_TENANT_NAMESPACE
MANIFESTS = [
    REPO / "deploy" / "crd" / "tenants.yaml",
    REPO / "deploy" / "base" / "namespace.yaml",
    *sorted((REPO / "deploy" / "base" / "rbac").glob("*.yaml")),
    *sorted((REPO / "deploy" / "base" / "policy").glob("*.yaml")),
    REPO / "eventing" / "apiserversource-rbac.yaml",
]
FUNCTIONS = ("tenant-install", "tenant-check-ready", "tenant-store-kubeconfig", "tenant-cleanup", "tenant-resync")
# Where no identity of kubeopera-system may read a Secret: the cluster's own, the default, an
# application's (made here), and a vcluster-* namespace that no Tenant owns (made here by hand).
ELSEWHERE = ("kube-system", "default")
CONFIG = b"apiVersion: v1\nkind: Config\nclusters: []\n"
T = TypeVar("T")


def redelivered(what: Callable[[], T], seconds: float = 20.0) -> T:
    """``what``, asked again after a temporary error, as the broker re-delivers an event."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return what()
        except TemporaryError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture(scope="module")
def deployed(control_plane: ControlPlane) -> Iterator[None]:
    """The CRD, kubeopera-system, every function's RBAC and the admission policies, as shipped."""
    created = []
    for path in MANIFESTS:
        names = kubectl(control_plane, "get", "-f", str(path), "-o", "name", check=False)
        if names.returncode != 0:  # some of the file's objects are not there yet: ours to remove
            created.append(path)
    kubectl(control_plane, "apply", "--server-side", "--field-manager=kubeopera-access-test", *_files(MANIFESTS))
    wait_established(control_plane, "crd/tenants.kubeopera.io")
    yield
    for path in reversed(created):
        if path.name not in ("namespace.yaml", "tenants.yaml"):  # shared with the rest of the session
            kubectl(control_plane, "delete", "--ignore-not-found", "--wait=false", "-f", str(path), check=False)


def _files(paths: list[Path]) -> list[str]:
    return [arg for path in paths for arg in ("-f", str(path))]


@pytest.fixture(scope="module")
def identities(
    control_plane: ControlPlane, deployed: None, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """A kubeconfig per function, with a token of its ServiceAccount (as a pod's projected token)."""
    folder = tmp_path_factory.mktemp("identities")
    return {
        name: kubeconfig_for_token(
            control_plane,
            request_token(control_plane, NAMESPACE, name, duration="1h"),
            folder / f"{name}.kubeconfig",
            user=f"system:serviceaccount:{NAMESPACE}:{name}",
        )
        for name in FUNCTIONS
    }


@pytest.fixture(scope="module")
def clients(identities: dict[str, Path]) -> Iterator[dict[str, Kube]]:
    made = {name: Kube.connect(path, component=name.removeprefix("tenant-")) for name, path in identities.items()}
    yield made
    for kube in made.values():
        kube.close()


def all_identities(control_plane: ControlPlane, folder: Path) -> dict[str, Path]:
    """A kubeconfig with a token of each ServiceAccount in kubeopera-system, whatever made it."""
    names = kubectl(control_plane, "get", "serviceaccounts", "-n", NAMESPACE, "-o", "name").stdout.split()
    accounts = sorted(name.removeprefix("serviceaccount/") for name in names)
    assert set(FUNCTIONS) | {"tenant-source"} <= set(accounts), accounts
    return {
        name: kubeconfig_for_token(
            control_plane,
            request_token(control_plane, NAMESPACE, name, duration="1h"),
            folder / f"sweep-{name}.kubeconfig",
            user=f"system:serviceaccount:{NAMESPACE}:{name}",
        )
        for name in accounts
    }


@pytest.fixture
def admin(kube_admin_kubeconfig: Path) -> Iterator[k8s.CoreV1Api]:
    api = k8s_config.new_client_from_config(config_file=str(kube_admin_kubeconfig))
    yield k8s.CoreV1Api(api)
    api.close()


def helm_as(toolchain: Toolchain, chart_ref: str, kubeconfig: Path, cache: Path) -> Helm:
    records = ReleaseRecords(Kube.connect(kubeconfig))  # helm's record, read as the same identity
    return Helm(chart_ref, CHART_VERSION, cache, records=records, executable=str(toolchain.helm), kubeconfig=kubeconfig)


def secret(core: k8s.CoreV1Api, namespace: str, name: str, data: bytes = b"not yours") -> None:
    encoded = {VCLUSTER_CONFIG_KEY: base64.b64encode(data).decode()}
    body = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace), data=encoded)
    core.create_namespaced_secret(namespace, body)


def namespace(core: k8s.CoreV1Api, name: str) -> str:
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    return name


def can_i(cp: ControlPlane, kubeconfig: Path, verb: str, what: str, namespace: str) -> bool:
    """``kubectl auth can-i`` as the identity of ``kubeconfig`` (a SelfSubjectAccessReview)."""
    answer = kubectl(cp, "auth", "can-i", verb, what, "-n", namespace, kubeconfig=kubeconfig, check=False)
    assert answer.stdout.strip() in ("yes", "no"), answer.stdout + answer.stderr
    return answer.stdout.strip() == "yes"


def refused(read: Callable[[], object]) -> str:
    """The message of the real API server's 403 for ``read``."""
    with pytest.raises(Forbidden) as raised:
        read()
    assert "403" in str(raised.value)
    return str(raised.value)


def test_secrets_are_readable_only_where_install_granted_it(
    control_plane: ControlPlane,
    toolchain: Toolchain,
    chart_ref: str,
    helm_env: dict[str, str],
    clients: dict[str, Kube],
    identities: dict[str, Path],
    admin: k8s.CoreV1Api,
    kube_admin_kubeconfig: Path,
    tmp_path: Path,
) -> None:
    tenant_name = f"acc-{secrets.token_hex(3)}"
    obj = {
        "apiVersion": "kubeopera.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": tenant_name, "namespace": NAMESPACE},
        "spec": {
            "userID": str(uuid.uuid4()),
            "tenantName": tenant_name,
            "cloudSpaceID": str(uuid.uuid4()),
            "quota": {"cpu": "1", "memory": "1Gi"},
        },
    }
    admin_kube = AdminKube.connect(kube_admin_kubeconfig)
    made = Tenant.from_object(admin_kube.create_tenant(obj))
    names = made.spec.names
    ref = TenantRef(NAMESPACE, tenant_name, made.uid, made.generation)
    settings = Settings(chart_ref=chart_ref, chart_version=CHART_VERSION, tenant_namespace=NAMESPACE)
    elsewhere = namespace(admin, f"not-a-tenant-{secrets.token_hex(3)}")
    ungranted = namespace(admin, f"vcluster-by-hand-{secrets.token_hex(3)}")
    shop = namespace(admin, f"shop-{secrets.token_hex(3)}")
    try:
        # install, as tenant-install: namespace, grants, release
        helm_install = helm_as(toolchain, chart_ref, identities["tenant-install"], tmp_path / "charts")
        reply = install.handle(clients["tenant-install"], helm_install, settings, ref)
        assert reply is not None, "install did not reach Provisioning"
        tenant = admin_kube.get_tenant(NAMESPACE, tenant_name)
        assert tenant is not None and tenant.status.phase == "Provisioning"
        wanted = access.namespace_grants(tenant, NAMESPACE)
        for role in wanted.roles:
            assert admin_kube.get_role(role.namespace, role.name) == role
        for binding in wanted.bindings:
            found = admin_kube.get_role_binding(binding.namespace, binding.name)
            assert found == binding and found is not None and found.labels == binding.labels
        assert access.grant(clients["tenant-install"], tenant, NAMESPACE) == 0, "a second run writes nothing"

        # Secrets: install may read them in its Tenant's namespace (the control: can-i can say yes),
        # resync one by name; no identity of kubeopera-system anywhere else
        sweep = identities | all_identities(control_plane, tmp_path)
        for verb in ("get", "list"):
            assert can_i(control_plane, identities["tenant-install"], verb, "secrets", names.namespace), verb
        resync_id = identities["tenant-resync"]
        assert can_i(control_plane, resync_id, "get", f"secret/{names.vcluster_secret}", names.namespace)
        assert can_i(control_plane, resync_id, "get", f"statefulset.apps/{names.release}", names.namespace)
        assert not can_i(control_plane, resync_id, "get", "secret/something-else", names.namespace)
        assert not can_i(control_plane, resync_id, "list", "secrets", names.namespace)
        yes = [
            (who, verb, where)
            for who, kubeconfig in sorted(sweep.items())
            for where in (*ELSEWHERE, shop, ungranted)
            for verb in ("get", "list")
            if can_i(control_plane, kubeconfig, verb, "secrets", where)
        ]
        assert yes == [], "identities of kubeopera-system that may read Secrets outside their Tenants' namespaces"

        # isolation (README, "Tenant isolation"): helm made the chart's namespace policies under
        # install's RBAC, and the Pod Security labels install wrote come back when changed by hand
        # (on the next delivery, a settled one included, once this process's recheck window is over)
        assert admin.read_namespaced_resource_quota(f"vc-{names.release}", names.namespace).spec.hard
        assert admin.read_namespaced_limit_range(f"vc-{names.release}", names.namespace).spec.limits
        networking = k8s.NetworkingV1Api(admin.api_client)
        policies = networking.list_namespaced_network_policy(names.namespace).items
        assert sorted(p.metadata.name for p in policies) == [f"vc-cp-{names.release}", f"vc-work-{names.release}"]
        pod_security = settings.isolation.pod_security_labels()
        assert has_labels(admin_kube.get_namespace(names.namespace).labels, pod_security)  # type: ignore[union-attr]
        admin.patch_namespace(
            names.namespace,
            {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged",
                                     "pod-security.kubernetes.io/warn": None}}},
        )  # fmt: skip
        assert not has_labels(admin_kube.get_namespace(names.namespace).labels, pod_security)  # type: ignore[union-attr]
        access.forget_ensured()
        assert install.handle(clients["tenant-install"], helm_install, settings, ref) is None  # settled: left alone
        assert has_labels(admin_kube.get_namespace(names.namespace).labels, pod_security)  # type: ignore[union-attr]

        # what vcluster writes, and other Secrets the functions must not read
        secret(admin, names.namespace, names.vcluster_secret, CONFIG)
        secret(admin, names.namespace, "something-else")
        secret(admin, "kube-system", f"probe-{tenant_name}")
        secret(admin, elsewhere, "probe")
        secret(admin, ungranted, f"vc-vc-{ungranted.removeprefix('vcluster-')}")

        # store-kubeconfig: its one Secret, through the Role install made, and nothing else
        store = clients["tenant-store-kubeconfig"]
        stored = redelivered(lambda: store_kubeconfig.handle(store, settings, ref))
        assert stored is not None
        copy = admin_kube.get_secret(NAMESPACE, names.kubeconfig_secret)
        assert copy is not None and copy.data == {KUBECONFIG_KEY: CONFIG}
        assert store.read_secret_key(names.namespace, names.vcluster_secret, VCLUSTER_CONFIG_KEY) == CONFIG
        refused(lambda: store.get_secret(names.namespace, "something-else"))
        refused(lambda: store.get_secret("kube-system", f"probe-{tenant_name}"))
        refused(lambda: store.get_secret(elsewhere, "probe"))
        refused(lambda: store.get_secret(ungranted, f"vc-vc-{ungranted.removeprefix('vcluster-')}"))
        listing = kubectl(
            control_plane,
            "get",
            "secrets",
            "-n",
            names.namespace,
            kubeconfig=identities["tenant-store-kubeconfig"],
            check=False,
        )
        assert listing.returncode != 0 and "forbidden" in listing.stderr.lower()
        # ... which its step reads as temporary in a Tenant's namespace (the grant may be on its way)
        with pytest.raises(TemporaryError), access.granted_at_run_time(ungranted):
            store.get_secret(ungranted, "anything")

        # resync: vcluster's Secret there, through the Role install made (store-kubeconfig's too);
        # the StatefulSet, which its ClusterRole lists anyway, by name through that ClusterRole
        resync_kube = clients["tenant-resync"]
        fleet = resync.FleetReads.read(resync_kube, settings)  # fleet-wide, as a pass lists them
        assert (names.namespace, names.release) in fleet.rollouts and names.kubeconfig_secret in fleet.stored
        seen = resync.observe(resync_kube, settings, tenant, fleet)
        assert seen.granted and seen.kubeconfig_current and seen.policies_missing == ()
        sts = k8s.AppsV1Api(admin.api_client).list_namespaced_stateful_set(names.namespace).items
        assert seen.release_present == any(s.metadata.name == names.release for s in sts)
        refused(lambda: clients["tenant-resync"].get_secret(names.namespace, "something-else"))
        refused(lambda: clients["tenant-resync"].get_secret(elsewhere, "probe"))

        # check-ready: helm's release record and vcluster's Secret in the Tenant's namespace, nowhere else
        check = clients["tenant-check-ready"]
        check_records = ReleaseRecords(check)
        release = check_records.release(names.release, names.namespace)
        assert release is not None and release.deployed
        refused(lambda: ReleaseRecords(check).release(names.release, elsewhere))
        assert check.read_secret_key(names.namespace, names.vcluster_secret, VCLUSTER_CONFIG_KEY) == CONFIG
        refused(lambda: check.get_secret("kube-system", f"probe-{tenant_name}"))
        refused(lambda: check.get_secret(elsewhere, "probe"))
        refused(lambda: check.get_secret(NAMESPACE, names.kubeconfig_secret))

        # cleanup: helm uninstall there, not a read elsewhere; the namespace takes the grants along
        cleanup = clients["tenant-cleanup"]
        refused(lambda: cleanup.get_secret("kube-system", f"probe-{tenant_name}"))
        refused(lambda: cleanup.get_secret(elsewhere, "probe"))
        helm_cleanup = helm_as(toolchain, chart_ref, identities["tenant-cleanup"], tmp_path / "charts")
        assert helm_cleanup.uninstall(names.release, names.namespace) is True
        assert check_records.release(names.release, names.namespace) is None
        cleanup.delete_namespace(names.namespace)
        deadline = time.monotonic() + 60
        while admin_kube.get_namespace(names.namespace) is not None:
            assert time.monotonic() < deadline, f"namespace {names.namespace} was not deleted"
            time.sleep(0.5)
        namespace(admin, names.namespace)  # the same name again, made by hand: no grant in it
        secret(admin, names.namespace, names.vcluster_secret, CONFIG)
        assert admin_kube.get_role_binding(names.namespace, wanted.bindings[1].name) is None
        refused(lambda: store.get_secret(names.namespace, names.vcluster_secret))
    finally:
        for name in (elsewhere, ungranted, shop, names.namespace):
            kubectl(control_plane, "delete", "namespace", name, "--ignore-not-found", "--wait=false", check=False)
        kubectl(control_plane, "delete", "secret", f"probe-{tenant_name}", "-n", "kube-system", check=False)
        kubectl(control_plane, "delete", "secret", names.kubeconfig_secret, "-n", NAMESPACE, check=False)
        unfinalize = '{"metadata":{"finalizers":null}}'
        kubectl(
            control_plane, "patch", "kt", tenant_name, "-n", NAMESPACE, "--type=merge", "-p", unfinalize, check=False
        )
        kubectl(control_plane, "delete", "kt", tenant_name, "-n", NAMESPACE, "--wait=false", check=False)
        admin_kube.close()
