"""The one adapter to the Kubernetes API (the only runtime code that imports ``kubernetes``).

It speaks in this project's values (``Tenant``, ``StatusUpdate``, ``TenantEvent`` and the values of
``shared.model.cluster``) and errors (classified once, in ``calls``). Writes are guarded by the
resourceVersion that was read. Secret contents never appear in an error message or a log line.
``Kube`` is made of one part per kind of object, each a module here: tenants (and their Events),
namespaces (and volumes), workloads (the StatefulSet), leases (locks and claims), policies (the
chart's namespace policies, the host's Service range), access (RBAC, token reviews), secrets.
Each part imports the client from ``client``, which loads it a part at a time (the names this
adapter uses, not the whole generated package: a worker's start and memory).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Self

from shared.adapters.kube.access import Access
from shared.adapters.kube.client import k8s, k8s_config
from shared.adapters.kube.leases import Leases
from shared.adapters.kube.namespaces import Namespaces
from shared.adapters.kube.policies import Policies
from shared.adapters.kube.secrets import Secrets
from shared.adapters.kube.tenants import Tenants
from shared.adapters.kube.workloads import Workloads

__all__ = ["Kube"]


class Kube(Tenants, Namespaces, Workloads, Leases, Policies, Access, Secrets):
    """Typed operations on the Kubernetes objects the functions read and write."""

    def __init__(self, api_client: k8s.ApiClient, component: str = "kubeopera-tenants") -> None:
        self._api = api_client
        self._component = component
        self._core = k8s.CoreV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._coordination = k8s.CoordinationV1Api(api_client)
        self._apps = k8s.AppsV1Api(api_client)
        self._authentication = k8s.AuthenticationV1Api(api_client)
        self._rbac = k8s.RbacAuthorizationV1Api(api_client)
        self._authorization = k8s.AuthorizationV1Api(api_client)
        self._networking = k8s.NetworkingV1Api(api_client)

    @classmethod
    def connect(cls, kubeconfig: Path | None = None, component: str = "kubeopera-tenants") -> Self:
        """In-cluster credentials inside a pod; otherwise ``kubeconfig`` or ``$KUBECONFIG``."""
        configuration = k8s.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(
                config_file=str(kubeconfig) if kubeconfig else None, client_configuration=configuration
            )
        return cls(k8s.ApiClient(configuration), component)

    def close(self) -> None:
        self._api.close()
