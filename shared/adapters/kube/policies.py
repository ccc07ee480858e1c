"""What the chart renders to keep a tenant within its share (ResourceQuota, LimitRange,
NetworkPolicy), listed fleet-wide a page at a time, and the host's Service range.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from shared.adapters.kube.calls import Apis, call, paged
from shared.adapters.kube.client import ApiException
from shared.model.isolation import CHART_SELECTOR, PolicyObject


class Policies(Apis):
    """The chart's namespace policies and the host's Service range."""


    def iter_policy_objects(self, namespace: str | None = None) -> Iterator[tuple[str, PolicyObject]]:
        """(namespace, object) of every ResourceQuota, LimitRange and NetworkPolicy the chart
        rendered (``CHART_SELECTOR``), in ``namespace`` or, with None, in every namespace: three
        LISTs, a page of ``PAGE`` at a time, however many Tenants there are, each item as it is
        read (a caller keeps what it needs of them)."""
        kinds: tuple[tuple[str, Callable[..., Any], Callable[..., Any]], ...] = (
            (
                "ResourceQuota",
                self._core.list_resource_quota_for_all_namespaces,
                functools.partial(self._core.list_namespaced_resource_quota, namespace),
            ),
            (
                "LimitRange",
                self._core.list_limit_range_for_all_namespaces,
                functools.partial(self._core.list_namespaced_limit_range, namespace),
            ),
            (
                "NetworkPolicy",
                self._networking.list_network_policy_for_all_namespaces,
                functools.partial(self._networking.list_namespaced_network_policy, namespace),
            ),
        )
        for kind, everywhere, here in kinds:
            items = paged(
                f"list {kind.lower()} {namespace or '(all namespaces)'}",
                functools.partial(here if namespace else everywhere, label_selector=CHART_SELECTOR),
            )
            for item in items:
                yield str(item["metadata"]["namespace"]), PolicyObject(kind, str(item["metadata"]["name"]))


    def service_cidrs(self) -> list[tuple[str, list[str]]] | None:
        """(name, cidrs) of each ServiceCIDR (networking.k8s.io/v1); None when the API server
        serves none (before Kubernetes 1.33: 404)."""
        try:
            result = call("list servicecidrs", lambda: self._networking.list_service_cidr())
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return [(str(i.metadata.name), [str(c) for c in (i.spec.cidrs or [])]) for i in result.items]

