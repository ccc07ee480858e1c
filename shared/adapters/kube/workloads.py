"""The vCluster's StatefulSet: its rollout as its controller reports it (one, or the fleet's in
one LIST), and a restart.
"""

from __future__ import annotations

import functools
from typing import Any

from shared.adapters.kube.calls import Apis, as_json, found_or_none, paged
from shared.model.cluster import Rollout

# The pod-template annotation ``kubectl rollout restart`` sets: its change rolls the pods.
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"


class Workloads(Apis):
    """The vCluster's StatefulSet."""


    def get_rollout(self, namespace: str, name: str) -> Rollout | None:
        """The rollout of StatefulSet ``name`` (the vCluster control plane), None if there is none."""
        sts = found_or_none(
            f"get statefulset {namespace}/{name}",
            lambda: as_json(self._apps.read_namespaced_stateful_set(name, namespace, _preload_content=False)),
        )
        return None if sts is None else _rollout(sts)

    def list_rollouts(self, label_selector: str) -> dict[tuple[str, str], Rollout]:
        """The rollout of every StatefulSet matching ``label_selector`` in every namespace, by
        (namespace, name): one LIST, a page of ``PAGE`` at a time, however many there are."""
        items = paged(
            f"list statefulsets (all namespaces) {label_selector}",
            functools.partial(self._apps.list_stateful_set_for_all_namespaces, label_selector=label_selector),
        )
        return {(str(i["metadata"]["namespace"]), str(i["metadata"]["name"])): _rollout(i) for i in items}

    def restart_rollout(self, namespace: str, name: str, at: str) -> int | None:
        """Restart StatefulSet ``name``'s pods as ``kubectl rollout restart`` does (the pod
        template's ``kubectl.kubernetes.io/restartedAt`` set to ``at``: a new generation, whose pods
        replace the old); return that generation, None if there is no such StatefulSet. Helm's
        three-way merge keeps the annotation on later upgrades."""
        body = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: at}}}}}
        sts = found_or_none(
            f"restart statefulset {namespace}/{name}",
            lambda: self._apps.patch_namespaced_stateful_set(name, namespace, body),
        )
        return None if sts is None else int(sts.metadata.generation or 0)



def _rollout(sts: dict[str, Any]) -> Rollout:
    spec, status = sts.get("spec", {}), sts.get("status", {})
    return Rollout(
        generation=int(sts["metadata"].get("generation") or 0),
        observed_generation=int(status.get("observedGeneration") or 0),
        replicas=int(spec["replicas"] if spec.get("replicas") is not None else 1),
        ready_replicas=int(status.get("readyReplicas") or 0),
        updated_replicas=int(status.get("updatedReplicas") or 0),
    )
