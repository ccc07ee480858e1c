"""The test bed's Kubernetes client: the runtime's adapter, and what only a test or the test bed
does with the API.

``shared.adapters.kube`` holds what a function does and nothing else; creating a Tenant (as its
user would) and listing Secrets across every namespace are the test bed's (the stand-in vCluster
finds its releases' records that way, a fault test looks for helm's pending ones).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.adapters.kube import Kube
from shared.model.tenant import GROUP, PLURAL, VERSION


class AdminKube(Kube):
    """``Kube``, with the calls only the test bed makes."""

    def create_tenant(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create the Tenant object as given; the API server's answer, as JSON."""
        namespace = obj["metadata"]["namespace"]
        return dict(self._custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, dict(obj)))

    def list_secrets_everywhere(self, label_selector: str) -> list[tuple[str, str, str, dict[str, str]]]:
        """(namespace, name, uid, labels) of every Secret matching the selector, in all namespaces."""
        found = self._core.list_secret_for_all_namespaces(label_selector=label_selector)
        return [
            (i.metadata.namespace, i.metadata.name, i.metadata.uid, dict(i.metadata.labels or {})) for i in found.items
        ]
