"""``deploy/base`` as the local stack applies it, and what the stack reads off it: the functions
(each Knative Service and the module its container starts) and the Broker's routes (each Trigger
with its delivery).

What is applied is ``deploy/base`` as kustomize builds it, each Knative object as Knative's webhook
would store it: ``tools/knative-check`` runs ``SetDefaults`` then ``Validate`` with the cluster's
eventing feature flags and Broker defaults (the webhook does not run here). Sender identity adds
to it (:mod:`.senders`): an audience for every Trigger's subscriber and dead-letter sink that has
none, or, with the feature off, no EventPolicy.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from testbed.knative.broker_watch import Route
from testbed.knative.kubectl import kubectl
from testbed.knative.names import SYSTEM_NAMESPACE
from testbed.local import senders
from testbed.local.errors import StackError
from testbed.processes import run
from testbed.project import cluster_concurrency, function_modules, project_path
from testbed.toolchain import Toolchain, knative_check

BROKER = "default"
SOURCE = "tenant-source"  # the ApiServerSource of Tenants in eventing/, and its ServiceAccount
VCLUSTER_WATCH = "tenant-vcluster-watch"  # the Knative Service that watches vClusters' StatefulSets

# A function's Knative Service starts the image with one argument, the gunicorn app of its module.


def admitted_manifests(tools: Toolchain, run_dir: Path, features: Mapping[str, str], sender_identity: bool) -> Path:
    """``deploy/base`` as kustomize builds it, with sender identity's additions (:mod:`.senders`),
    each Knative object as Knative's webhook would store it (``tools/knative-check``: ``SetDefaults``
    then ``Validate``, with the cluster's eventing feature flags, ``features`` over the repository's
    patch, and Broker defaults); written to a file under ``run_dir``, whose path is returned."""
    built = kubectl(tools, Path(os.devnull), "kustomize", str(project_path("deploy", "base")))
    docs = [doc for doc in yaml.safe_load_all(built) if doc]
    docs = senders.with_audiences(docs) if sender_identity else senders.without_event_policies(docs)
    emitted = run_dir / "deploy-base.checked.yaml"
    testbed_features = run_dir / "config-features.testbed.yaml"
    testbed_features.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "config-features", "namespace": SYSTEM_NAMESPACE},
                "data": dict(features),
            }
        )
    )
    cluster_config = [
        tools.knative_config / "eventing" / "core" / "configmaps" / "default-broker.yaml",
        project_path("eventing", "config-features-patch.yaml"),
        testbed_features,
    ]
    checked = run(
        [knative_check(), "--emit", emitted, *cluster_config, "-"], input=yaml.safe_dump_all(docs), check=False
    )
    if checked.returncode != 0:
        raise StackError(f"Knative's validation refused deploy/base:\n{checked.stdout}{checked.stderr}")
    ours = [
        doc
        for doc in yaml.safe_load_all(emitted.read_text())
        if doc and doc["metadata"].get("namespace") != "knative-eventing"  # the cluster's config, given as input
    ]
    admitted = run_dir / "deploy-base.admitted.yaml"
    admitted.write_text(yaml.safe_dump_all(ours))
    return admitted


def routes(manifests: list[dict[str, Any]]) -> list[Route]:
    """Each Trigger of the Broker, with the delivery that applies to it."""
    broker = next(d for d in manifests if d["kind"] == "Broker" and d["metadata"]["name"] == BROKER)
    return [
        Route.from_trigger(doc, broker["spec"].get("delivery") or {})
        for doc in manifests
        if doc["kind"] == "Trigger" and doc["spec"]["broker"] == BROKER
    ]


def _declared_services() -> list[dict[str, Any]]:
    folder = project_path("deploy", "base", "services")
    return [doc for path in sorted(folder.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def declared_functions() -> dict[str, str]:
    """:func:`function_modules` of the files in ``deploy/base/services`` as they are (no kustomize, no
    stack): for what must be known before a stack runs, e.g. a test's parameters."""
    return function_modules(_declared_services())


def declared_concurrency() -> dict[str, int]:
    """:func:`cluster_concurrency` of the files in ``deploy/base/services`` as they are: how many
    requests each function's Service serves at once across the cluster."""
    return cluster_concurrency(_declared_services())
