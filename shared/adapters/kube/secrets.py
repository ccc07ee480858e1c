"""Secrets: the stored kubeconfig, helm's release records (their metadata, or with their ``release``
key) and the vCluster's exported kubeconfig. Their contents never reach a log line or an error message.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from shared.adapters.kube.calls import Apis, as_json, call, found_or_none, paged, precondition, unless_absent
from shared.adapters.kube.client import k8s
from shared.adapters.release import SecretMeta, SecretRecord
from shared.model.cluster import StoredSecret


class Secrets(Apis):
    """Secrets, read and written by the version read."""


    def read_secret_key(self, namespace: str, name: str, key: str) -> bytes | None:
        """The decoded value of one key of a Secret, or None if the Secret or key is absent."""
        secret = self.get_secret(namespace, name)
        return (secret.data.get(key) or None) if secret is not None else None

    def list_secret_records(self, namespace: str, label_selector: str) -> list[SecretMeta]:
        """The name, type and labels of each Secret in ``namespace`` matching the selector (helm's
        release record, ``shared.adapters.release``; the data is dropped unread); a 403 is ``Forbidden``."""
        result = call(
            f"list secrets {namespace} {label_selector}",
            lambda: self._core.list_namespaced_secret(namespace, label_selector=label_selector),
        )
        return [
            SecretMeta(name=str(i.metadata.name), type=str(i.type or ""), labels=dict(i.metadata.labels or {}))
            for i in result.items
        ]

    def list_release_records(self, namespace: str, label_selector: str) -> list[SecretRecord]:
        """Each Secret in ``namespace`` matching the selector with its ``release`` key's bytes (helm's
        record with its body, ``shared.adapters.release.decode_record``): one LIST, read as JSON
        as it comes; a 403 is ``Forbidden``."""
        result = call(
            f"list secrets {namespace} {label_selector}",
            lambda: as_json(
                self._core.list_namespaced_secret(namespace, label_selector=label_selector, _preload_content=False)
            ),
        )
        found = []
        for item in result.get("items") or []:
            meta = item.get("metadata") or {}
            release = (item.get("data") or {}).get("release")
            secret = SecretMeta(str(meta.get("name")), str(item.get("type") or ""), dict(meta.get("labels") or {}))
            found.append(SecretRecord(secret, base64.b64decode(release) if isinstance(release, str) else None))
        return found

    def get_secret(self, namespace: str, name: str) -> StoredSecret | None:
        secret = found_or_none(
            f"get secret {namespace}/{name}",
            lambda: as_json(self._core.read_namespaced_secret(name, namespace, _preload_content=False)),
        )
        return None if secret is None else _stored(secret)

    def iter_secrets(
        self, namespace: str, label_selector: str, keys: Collection[str]
    ) -> Iterator[tuple[str, StoredSecret]]:
        """(name, Secret) of each Secret in ``namespace`` matching ``label_selector``, with only
        ``keys`` of its data (the rest is dropped as it is read): one LIST, a page of ``PAGE`` at
        a time, each asked for when the one before has been consumed; a 403 is ``Forbidden``."""
        items = paged(
            f"list secrets {namespace} {label_selector}",
            functools.partial(self._core.list_namespaced_secret, namespace, label_selector=label_selector),
        )
        for item in items:
            yield str(item["metadata"]["name"]), _stored(item, keys)

    def write_secret(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, bytes],
        labels: Mapping[str, str],
        resource_version: str | None,
    ) -> None:
        """Create the Opaque Secret (``resource_version`` None) or replace the version we read;
        ``Conflict`` if it was created or changed meanwhile."""
        encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
        meta = k8s.V1ObjectMeta(name=name, namespace=namespace, labels=dict(labels), resource_version=resource_version)
        body: Any = k8s.V1Secret(metadata=meta, type="Opaque", data=dict(encoded))
        if resource_version is None:
            call(f"create secret {namespace}/{name}", lambda: self._core.create_namespaced_secret(namespace, body))
        else:
            call(
                f"replace secret {namespace}/{name}",
                lambda: self._core.replace_namespaced_secret(name, namespace, body),
            )

    def delete_secret(self, namespace: str, name: str, resource_version: str) -> None:
        """Delete the version of the Secret we read; absent is fine, changed is ``Conflict``."""
        options = precondition(resource_version)
        unless_absent(
            f"delete secret {namespace}/{name}",
            lambda: self._core.delete_namespaced_secret(name, namespace, body=options),
        )



def _stored(secret: Mapping[str, Any], keys: Collection[str] | None = None) -> StoredSecret:
    """A Secret as JSON from the API server, decoded (``keys`` of its data only, if given)."""
    data = secret.get("data") or {}
    return StoredSecret(
        labels=dict(secret["metadata"].get("labels") or {}),
        data={k: base64.b64decode(v) for k, v in data.items() if keys is None or k in keys},
        resource_version=str(secret["metadata"]["resourceVersion"]),
    )
