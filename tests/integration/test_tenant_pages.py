"""resync's LIST of Tenants a page at a time (``Kube.tenant_pages``) on the test bed's real
kube-apiserver (v1.34) and etcd, when the list's continue token expires between two pages (a
pass slower than the API server keeps it): the API server answers 410 with a token for the rest
of the list from its latest state, and the adapter goes on with it (``calls.pages``,
``go_on_if_expired``), so that the pass finishes instead of failing on every re-delivery.

Making the token expire takes two steps here, both found by trying: compacting etcd past the
list's version is not enough, because this API server serves the next page from its watch
cache's snapshot of that version while the cache holds it. The cache lets go of history once it
is older than 75 s and newer events need the room, so the test also waits that long and then
writes 400 changes to one Tenant. Only then does the next page reach etcd, whose 410 carries the
new token (k8s.io/apiserver storage/etcd3 ``handleCompactedErrorForPaging``). About 90 s.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from shared.adapters.kube import Kube, calls
from shared.model.tenant import GROUP, PLURAL, VERSION
from testbed.controlplane import ControlPlane

from .tenant_objects import admitted, create, tenant_body

pytestmark = pytest.mark.integration

CACHE_FRESH_SECONDS = 75  # how long the watch cache keeps an event before newer ones may evict it
# The cache's room: 100 events at its smallest, doubled each time it fills within 75 s (earlier
# tests' Tenants may have grown it). Writing past its room overwrites its oldest events; 400 covers
# a cache grown twice, more than this session's other tests write Tenants.
NEWER_EVENTS = 400


def etcd(control_plane: ControlPlane, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """One call to etcd's JSON gateway (its v3 API over HTTP), as etcdctl would make it."""
    request = urllib.request.Request(control_plane.etcd_url + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - the test bed's own etcd
        found: dict[str, Any] = json.load(answer)
    return found


def compact(control_plane: ControlPlane) -> None:
    """Compact etcd to its current revision: every older version of every key is gone."""
    revision = int(etcd(control_plane, "/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
    etcd(control_plane, "/v3/kv/compaction", {"revision": str(revision), "physical": True})


def test_a_list_goes_on_from_the_latest_state_past_an_expired_continue_token(
    control_plane: ControlPlane,
    tenant_crd: Path,
    custom_objects: k8s.CustomObjectsApi,
    kube_admin_kubeconfig: Path,
    test_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for name in ("page-a", "page-b", "page-c"):
        admitted(create(custom_objects, test_namespace, tenant_body(name)))
    monkeypatch.setattr(calls, "PAGE", 1)
    kube = Kube.connect(kube_admin_kubeconfig)
    pages = kube.tenant_pages(test_namespace)
    first = [t.name for t in next(pages)]

    admitted(create(custom_objects, test_namespace, tenant_body("page-d")))  # made after the list's snapshot
    compact(control_plane)
    time.sleep(CACHE_FRESH_SECONDS + 5)
    for i in range(NEWER_EVENTS):
        labels = {"metadata": {"labels": {"change": str(i)}}}
        custom_objects.patch_namespaced_custom_object(GROUP, VERSION, test_namespace, PLURAL, "page-a", labels)

    with caplog.at_level(logging.WARNING, logger=calls.__name__):
        rest = [t.name for page in pages for t in page]

    assert "continue token expired" in caplog.text, "the API server answered the expired token with 410"
    assert first + rest == ["page-a", "page-b", "page-c", "page-d"], (
        "the rest from the latest state: nothing listed twice or lost, the Tenant made since seen"
    )
    kube.close()
