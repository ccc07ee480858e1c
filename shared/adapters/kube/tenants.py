"""The Tenant resource and its Kubernetes Events: read, list (a page at a time), patch the status
and the finalizer, record an Event that folds repeats into its count.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import socket
from collections.abc import Iterator, Mapping
from typing import Any

from shared.adapters.kube.calls import Apis, call, found_or_none, paged, pages
from shared.adapters.kube.client import ApiException
from shared.errors import Conflict, PermanentError, TemporaryError, TenantGone
from shared.model.tenant import (
    API_VERSION,
    FINALIZER,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    StatusUpdate,
    Tenant,
    TenantEvent,
    rfc3339,
    utcnow,
)

log = logging.getLogger(__name__)


class Tenants(Apis):
    """Tenants and their Events."""

    def get_tenant(self, namespace: str, name: str) -> Tenant | None:
        obj = found_or_none(
            f"get tenant {namespace}/{name}",
            lambda: self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
        )
        return None if obj is None else Tenant.from_object(obj)

    def list_tenants(self, namespace: str, field_selector: str) -> list[Tenant]:
        """Tenants in ``namespace`` matching a field selector on the CRD's selectable fields
        (``spec.tenantName``, ``spec.cloudSpaceID``)."""
        items = paged(
            f"list tenants {field_selector}",
            functools.partial(
                self._custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                field_selector=field_selector,
            ),
        )
        return [Tenant.from_object(item) for item in items]

    def tenant_pages(self, namespace: str) -> Iterator[list[Tenant]]:
        """Every Tenant in ``namespace``, a page of ``PAGE`` at a time (one LIST, one snapshot),
        each page asked for when the caller turns to it: a caller that keeps a little of each
        Tenant holds one page of them, however large the fleet (resync). A caller slower than the
        API server keeps a continue token gets the rest from its latest state (``pages``): resync
        then finishes its pass, and a Tenant made or deleted meanwhile is its next pass's."""
        fetch = functools.partial(self._custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL)
        for page in pages("list tenants", fetch, go_on_if_expired=True):
            tenants = [Tenant.from_object(item) for item in page.get("items") or ()]
            del page  # the Tenants are all this keeps of it
            yield tenants
            del tenants

    def list_tenant_objects(self, namespace: str | None) -> list[dict[str, Any]]:
        if namespace:
            return list(
                paged(
                    "list tenants",
                    functools.partial(self._custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL),
                )
            )
        return list(
            paged("list tenants", functools.partial(self._custom.list_cluster_custom_object, GROUP, VERSION, PLURAL))
        )

    def patch_tenant_status(self, tenant: Tenant, update: StatusUpdate) -> Tenant:
        """Apply ``update`` to the version of ``tenant`` we read; ``Conflict`` if it moved on,
        ``TenantGone`` if it was deleted meanwhile."""
        return self._patch_tenant(tenant, f"patch tenant {tenant.key} status", update.patch_for(tenant), status=True)

    def set_finalizer(self, tenant: Tenant, present: bool) -> Tenant:
        """Add or remove this project's finalizer on the version of ``tenant`` we read."""
        others = [f for f in tenant.finalizers if f != FINALIZER]
        finalizers = [*others, FINALIZER] if present else others
        body = {"metadata": {"resourceVersion": tenant.resource_version, "finalizers": finalizers}}
        verb = "add" if present else "remove"
        return self._patch_tenant(tenant, f"{verb} finalizer on tenant {tenant.key}", body, status=False)

    def _patch_tenant(self, tenant: Tenant, what: str, body: Mapping[str, Any], *, status: bool) -> Tenant:
        patch = (
            self._custom.patch_namespaced_custom_object_status
            if status
            else self._custom.patch_namespaced_custom_object
        )
        try:
            obj = call(what, lambda: patch(GROUP, VERSION, tenant.namespace, PLURAL, tenant.name, dict(body)))
        except ApiException as err:
            if err.status == 404:
                raise TenantGone(f"tenant {tenant.key} was deleted meanwhile") from None
            raise
        return Tenant.from_object(obj)

    def record_event(self, tenant: Tenant, event: TenantEvent) -> None:
        """A Kubernetes Event on the Tenant (``kubectl describe kt`` shows it). The same reason
        and message again folds into the first one's ``count``, as kubelet's events do. Never
        raises: an Event is worth a warning in the log, not a failed delivery."""
        digest = hashlib.sha256(f"{tenant.uid}/{event.reason}/{event.message}".encode()).hexdigest()[:16]
        name = f"{tenant.name}.{digest}"
        now = rfc3339(utcnow())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": tenant.namespace},
            "involvedObject": {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "namespace": tenant.namespace,
                "name": tenant.name,
                "uid": tenant.uid,
            },
            "type": event.type,
            "reason": event.reason,
            "message": event.message[:1024],
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self._component},
            "reportingComponent": f"kubeopera.io/{self._component}",
            "reportingInstance": socket.gethostname()[:128],
        }
        try:
            try:
                call(f"create event {name}", lambda: self._core.create_namespaced_event(tenant.namespace, body))
                return
            except Conflict:
                pass
            current = call(f"get event {name}", lambda: self._core.read_namespaced_event(name, tenant.namespace))
            patch = {
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "count": int(current.count or 1) + 1,
                "lastTimestamp": now,
            }
            call(f"patch event {name}", lambda: self._core.patch_namespaced_event(name, tenant.namespace, patch))
        except (TemporaryError, PermanentError, ApiException) as err:
            log.warning("could not record a Kubernetes Event", extra={"reason": event.reason, "error": str(err)})
