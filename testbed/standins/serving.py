"""STAND-IN for Knative Serving: a Knative Service's status, pointing at the function's local process.

The fast tier of the test bed has no node, so Knative Serving cannot run revisions (the cluster
tier, with a kubelet and real Serving, is another matter). The functions run as local gunicorn
processes instead, started with the container image's own command, and this module does the one
thing of Serving the rest of the system depends on: it writes each Knative Service's status as
Serving would for a Ready cluster-local Service,

    status.address.url = http://<name>.<namespace>.svc.cluster.local
    conditions Ready / ConfigurationsReady / RoutesReady = True at the current generation

and routes that host, through the service proxy, to the function's port. Knative Eventing then
resolves each Trigger's ``subscriber.ref`` and ``deadLetterSink.ref`` to that address by itself,
exactly as it does against real Serving.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config

from testbed.standins.service_proxy import ServiceProxy

GROUP, VERSION, PLURAL = "serving.knative.dev", "v1", "services"


def address(name: str, namespace: str) -> str:
    return f"http://{name}.{namespace}.svc.cluster.local"


def publish(kubeconfig: Path, proxy: ServiceProxy, namespace: str, ports: Mapping[str, int]) -> dict[str, str]:
    """Mark every Knative Service of ``namespace`` named in ``ports`` Ready at its address; return the
    addresses. A Service without a local process is an error: nothing would answer it."""
    api: Any = client.CustomObjectsApi(config.new_client_from_config(config_file=str(kubeconfig)))
    services: list[dict[str, Any]] = api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    names = {svc["metadata"]["name"] for svc in services}
    missing = sorted(set(ports) - names)
    if missing:
        raise RuntimeError(f"Knative Services {missing} are not in {namespace}: was deploy/ applied?")
    unserved = sorted(names - set(ports))
    if unserved:
        raise RuntimeError(f"Knative Services {unserved} in {namespace} have no local process to point at")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    published = {}
    for svc in services:
        name = svc["metadata"]["name"]
        url = address(name, namespace)
        proxy.routes.add(url.removeprefix("http://"), ports[name])
        revision = f"{name}-{svc['metadata'].get('generation', 1):05d}"
        conditions = [
            {
                "type": kind,
                "status": "True",
                "lastTransitionTime": now,
                "message": "local process (Knative Serving stand-in)",
            }
            for kind in ("ConfigurationsReady", "Ready", "RoutesReady")
        ]
        status = {
            "observedGeneration": svc["metadata"].get("generation", 1),
            "url": url,
            "address": {"url": url},
            "latestCreatedRevisionName": revision,
            "latestReadyRevisionName": revision,
            "traffic": [{"revisionName": revision, "latestRevision": True, "percent": 100}],
            "conditions": conditions,
        }
        api.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, {"status": status})
        published[name] = url
    return published
