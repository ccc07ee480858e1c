"""The one adapter to the Kubernetes API (the only module that imports ``kubernetes``).

It speaks in this project's values (``Tenant``, ``StatusUpdate``) and errors: a 409 becomes
``Conflict``; 429, 5xx and connection failures become ``TemporaryError``; 401/403 become
``PermanentError`` (a missing RBAC rule does not heal by retrying; the message names the verb
and resource), and so do 400/422 (the object we sent is invalid). Secret contents never appear
in an error message or a log line.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from shared.errors import Conflict, PermanentError, TemporaryError
from shared.tenant import GROUP, PLURAL, VERSION, StatusUpdate, Tenant

log = logging.getLogger(__name__)
T = TypeVar("T")


def _api_message(err: ApiException) -> str:
    """The Status message of an API error (never a request body, so never a secret)."""
    try:
        return str(json.loads(err.body or "{}").get("message", ""))[:300]
    except ValueError:
        return ""


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ApiException as err:
        status = int(err.status or 0)
        reason = err.reason or ""
        if status == 409:
            raise Conflict(f"{what}: conflict ({reason})") from None
        if status in (401, 403):
            raise PermanentError(f"{what}: the API server refused it ({status} {reason})") from None
        if status in (400, 422):
            raise PermanentError(f"{what}: the API server found it invalid ({status}): {_api_message(err)}") from None
        if status == 429 or status >= 500 or status == 0:
            raise TemporaryError(f"{what}: API server answered {status} {reason}", retry_after=2) from None
        raise
    except (urllib3.exceptions.HTTPError, OSError) as err:
        raise TemporaryError(f"{what}: API server unreachable ({type(err).__name__})", retry_after=2) from None


class Kube:
    """Typed operations on Tenants, Namespaces and Secrets."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._api = api_client
        # The client's generated types are loose (objects and optionals everywhere); the adapter
        # treats answers as Any and converts them to this project's values right here.
        self._core: Any = k8s.CoreV1Api(api_client)
        self._custom: Any = k8s.CustomObjectsApi(api_client)

    @classmethod
    def connect(cls, kubeconfig: Path | None = None) -> Kube:
        """In-cluster credentials inside a pod; otherwise ``kubeconfig`` or ``$KUBECONFIG``."""
        configuration = k8s.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig) if kubeconfig else None, client_configuration=configuration
            )
        return cls(k8s.ApiClient(configuration))

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]

    # Tenants -----------------------------------------------------------------------------

    def get_tenant(self, namespace: str, name: str) -> Tenant | None:
        obj = self.get_tenant_object(namespace, name)
        return None if obj is None else Tenant.from_object(obj)

    def get_tenant_object(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                _call(
                    f"get tenant {namespace}/{name}",
                    lambda: self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
                )
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def list_tenant_objects(self, namespace: str | None) -> list[dict[str, Any]]:
        if namespace:
            result = _call(
                "list tenants",
                lambda: self._custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL),
            )
        else:
            result = _call("list tenants", lambda: self._custom.list_cluster_custom_object(GROUP, VERSION, PLURAL))
        return [dict(item) for item in result.get("items", [])]

    def create_tenant(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        namespace = obj["metadata"]["namespace"]
        return dict(
            _call(
                f"create tenant {namespace}/{obj['metadata']['name']}",
                lambda: self._custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, dict(obj)),
            )
        )

    def patch_tenant_status(self, tenant: Tenant, update: StatusUpdate) -> Tenant:
        """Apply ``update`` to the version of ``tenant`` we read; ``Conflict`` if it moved on."""
        body = update.patch_for(tenant)
        obj = _call(
            f"patch tenant {tenant.namespace}/{tenant.name} status",
            lambda: self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, tenant.namespace, PLURAL, tenant.name, body
            ),
        )
        return Tenant.from_object(obj)

    # Namespaces ---------------------------------------------------------------------------

    def ensure_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        """Create the namespace, or add missing labels to the one that exists."""
        body = k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name, labels=dict(labels)))
        try:
            _call(f"create namespace {name}", lambda: self._core.create_namespace(body))
            log.info("namespace created", extra={"namespace": name})
            return
        except Conflict:
            pass
        current = _call(f"get namespace {name}", lambda: self._core.read_namespace(name))
        have = current.metadata.labels or {}
        if any(have.get(k) != v for k, v in labels.items()):
            patch = {"metadata": {"labels": dict(labels)}}
            _call(f"label namespace {name}", lambda: self._core.patch_namespace(name, patch))

    # Secrets ------------------------------------------------------------------------------

    def read_secret_key(self, namespace: str, name: str, key: str) -> bytes | None:
        """The decoded value of one key of a Secret, or None if the Secret or key is absent."""
        try:
            secret = _call(f"get secret {namespace}/{name}", lambda: self._core.read_namespaced_secret(name, namespace))
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        encoded = (secret.data or {}).get(key)
        return base64.b64decode(encoded) if encoded else None

    def list_secrets(self, label_selector: str) -> list[tuple[str, str, dict[str, str]]]:
        """(namespace, name, labels) of every Secret matching the selector, in all namespaces."""
        result = _call(
            f"list secrets {label_selector}",
            lambda: self._core.list_secret_for_all_namespaces(label_selector=label_selector),
        )
        return [(i.metadata.namespace, i.metadata.name, dict(i.metadata.labels or {})) for i in result.items]

    def upsert_secret(self, namespace: str, name: str, data: Mapping[str, bytes], labels: Mapping[str, str]) -> bool:
        """Create or update an Opaque Secret; return False when it already held exactly this."""
        encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
        meta = k8s.V1ObjectMeta(name=name, namespace=namespace, labels=dict(labels))
        body: Any = k8s.V1Secret(metadata=meta, type="Opaque", data=dict(encoded))
        try:
            _call(
                f"create secret {namespace}/{name}",
                lambda: self._core.create_namespaced_secret(namespace, body),
            )
            return True
        except Conflict:
            pass
        current = _call(f"get secret {namespace}/{name}", lambda: self._core.read_namespaced_secret(name, namespace))
        current_labels = current.metadata.labels or {}
        if (current.data or {}) == encoded and all(current_labels.get(k) == v for k, v in labels.items()):
            return False
        meta.resource_version = current.metadata.resource_version
        _call(
            f"replace secret {namespace}/{name}",
            lambda: self._core.replace_namespaced_secret(name, namespace, body),
        )
        return True
