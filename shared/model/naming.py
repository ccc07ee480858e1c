"""The naming rules of the original operator, as pure functions of a Tenant's spec.

- Helm release: ``vc-{tenantName}`` (at most 53 characters, Helm's limit)
- Host namespace: ``vcluster-{tenantName}``
- Secret vcluster writes: ``vc-{release}`` (key ``config``) in the host namespace
- Stored kubeconfig: ``tenant-{cloudSpaceID}-kubeconfig`` in the Tenant namespace
- The lock of the work on a Tenant's namespace: Lease ``lock-vcluster-{tenantName}`` in the Tenant
  namespace; the claim of a cloudSpaceID: Lease ``cloudspace-{cloudSpaceID}`` there
- In-cluster address of the vCluster: ``https://{release}.{namespace}:443`` (design.md section 5)
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from shared.errors import PermanentError

# Where Tenants live unless TENANT_NAMESPACE says otherwise (spec: Environment Variables).
DEFAULT_TENANT_NAMESPACE = "kubeopera-system"

# At most 32 characters, so release vc-{tenantName} is at most 35: within the spec's (and helm's)
# 53 for a release name (tests/unit/test_naming_settings_values.py holds the two together).
TENANT_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{1,30}[a-z0-9]$"
_TENANT_NAME = re.compile(TENANT_NAME_PATTERN)
RELEASE_NAME_MAX = 53
NAMESPACE_PREFIX = "vcluster-"  # every Tenant's host namespace is this and its tenantName

LABEL_TENANT_ID = "kubeopera.io/tenant-id"
# Ownership (design.md section 1): which Tenant object, by uid, caused a namespace, release or
# Secret. Set when the object is made; nothing carrying another owner is ever touched.
LABEL_OWNER_UID = "kubeopera.io/owner-uid"
LABEL_OWNER_NAMESPACE = "kubeopera.io/owner-namespace"
LABEL_OWNER_NAME = "kubeopera.io/owner-name"
LABEL_MANAGED_BY = "kubeopera.io/managed-by"
LABEL_TENANT_NAME = "kubeopera.io/tenant"
MANAGED_BY = "tenant-controller"
# On a Tenant, "true" makes the API server refuse its deletion (deploy/base/policy/
# tenant-deletion-protection.yaml, which spells it too: tests/deploy/test_manifests.py).
ANNOTATION_DELETION_PROTECTION = "kubeopera.io/deletion-protection"
KUBECONFIG_KEY = "kubeconfig"
KUBECONFIG_EXTERNAL_KEY = "kubeconfig-external"  # with VCLUSTER_EXTERNAL_SERVER: its server instead
VCLUSTER_CONFIG_KEY = "config"


def check_tenant_name(tenant_name: str) -> str:
    if not _TENANT_NAME.match(tenant_name):
        raise PermanentError(
            f"spec.tenantName {tenant_name!r} must match {TENANT_NAME_PATTERN} "
            "(3 to 32 lowercase letters, digits or '-', starting and ending with a letter or digit)"
        )
    return tenant_name


def tenant_name_in(namespace: str) -> str | None:
    """The tenantName a host namespace is named for, None when it is not one of ours by name."""
    return namespace.removeprefix(NAMESPACE_PREFIX) if namespace.startswith(NAMESPACE_PREFIX) else None


def check_uuid(field_name: str, value: str) -> str:
    try:
        uuid.UUID(value)
    except ValueError:
        raise PermanentError(f"spec.{field_name} {value!r} is not a UUID") from None
    return value


@dataclass(frozen=True)
class TenantNames:
    """Every name derived from one Tenant."""

    tenant_name: str
    cloud_space_id: str

    @classmethod
    def of(cls, tenant_name: str, cloud_space_id: str) -> TenantNames:
        return cls(check_tenant_name(tenant_name), check_uuid("cloudSpaceID", cloud_space_id))

    @property
    def release(self) -> str:
        return f"vc-{self.tenant_name}"

    @property
    def namespace(self) -> str:
        return f"{NAMESPACE_PREFIX}{self.tenant_name}"

    @property
    def vcluster_secret(self) -> str:
        return f"vc-{self.release}"

    @property
    def kubeconfig_secret(self) -> str:
        return f"tenant-{self.cloud_space_id}-kubeconfig"

    @property
    def cloud_space_claim(self) -> str:
        """The Lease in the Tenants' namespace whose creation claims the cloudSpaceID (``shared.claims``)."""
        return f"cloudspace-{self.cloud_space_id}"

    @property
    def work_lock(self) -> str:
        """The Lease in the Tenants' namespace that install and cleanup hold while they make or
        remove anything of ``vcluster-{tenantName}`` (``shared.locks``)."""
        return f"lock-{self.namespace}"

    @property
    def server_names(self) -> tuple[str, str]:
        """The vCluster's Service as every pod can resolve it (``.svc``: through the search list of
        any namespace) and fully qualified; the chart's certificate covers only the short
        ``<release>.<namespace>`` form, so the values add both (``controlPlane.proxy.extraSANs``)."""
        service = f"{self.release}.{self.namespace}.svc"
        return service, f"{service}.cluster.local"

    def external_server(self, template: str) -> str:
        """``VCLUSTER_EXTERNAL_SERVER`` with this Tenant's names in it (``{tenant}``, ``{release}``,
        ``{namespace}``; checked at start by ``shared.settings``); empty when there is none."""
        if not template:
            return ""
        return template.format(tenant=self.tenant_name, release=self.release, namespace=self.namespace)

    @property
    def in_cluster_server(self) -> str:
        """The server of the stored kubeconfig: the ``.svc`` name, which resolves from a pod in
        any namespace (``<release>.<namespace>`` does only through a pod's search list)."""
        return f"https://{self.server_names[0]}:443"
