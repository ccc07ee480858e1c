"""The vCluster's StatefulSet: its rollout as its controller reports it (one, or the fleet's in
one LIST), a restart, and the fleet's StatefulSets listed and then watched (the vCluster watch).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import urllib3

from shared.adapters.kube.calls import Apis, as_json, call, found_or_none, paged, pages
from shared.adapters.kube.client import iter_resp_lines
from shared.errors import TemporaryError, WatchExpired
from shared.model.cluster import Rollout
from shared.model.ownership import owner_of
from shared.model.vcluster_watch import Change, Key, Seen

# Seconds past a watch's own timeout before the client gives up on a silent connection (the API
# server sends a bookmark about once a minute, and ends the watch at its timeout).
WATCH_GRACE_SECONDS = 30

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

    def list_seen(self, label_selector: str) -> tuple[dict[Key, Seen], str]:
        """Every StatefulSet matching ``label_selector`` in every namespace, by (namespace, name),
        and the list's resourceVersion, to watch from (one LIST, a page at a time)."""
        found: dict[Key, Seen] = {}
        version = ""
        fetch = functools.partial(self._apps.list_stateful_set_for_all_namespaces, label_selector=label_selector)
        for page in pages(f"list statefulsets (all namespaces) {label_selector}", fetch):
            version = version or str(page.get("metadata", {}).get("resourceVersion") or "")
            for item in page.get("items") or []:
                seen = _seen(item)
                found[seen.key] = seen
            del page  # let go before the next page is asked for (``pages``)
        return found, version

    def watch_seen(self, label_selector: str, resource_version: str, timeout_seconds: int) -> Iterator[Change]:
        """The changes of the StatefulSets matching ``label_selector`` in every namespace after
        ``resource_version``, with bookmarks, until the API server ends the watch (after
        ``timeout_seconds``). ``WatchExpired`` when that version is too old; ``TemporaryError``
        when the connection fails."""
        what = f"watch statefulsets (all namespaces) {label_selector}"
        response = call(
            what,
            lambda: self._apps.list_stateful_set_for_all_namespaces(
                label_selector=label_selector,
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=resource_version,
                timeout_seconds=timeout_seconds,
                _request_timeout=(10, timeout_seconds + WATCH_GRACE_SECONDS),
                _preload_content=False,
            ),
        )
        try:
            for line in iter_resp_lines(response):
                if line:
                    yield _change(what, json.loads(line))
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise TemporaryError(f"{what}: the connection failed ({type(err).__name__})", retry_after=2) from None
        finally:  # a watch left early has unread data: close it rather than return it to the pool
            response.close()
            response.release_conn()

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


def _seen(sts: dict[str, Any]) -> Seen:
    meta = sts["metadata"]
    return Seen(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        owner=owner_of(meta.get("labels") or {}),
        rollout=_rollout(sts),
    )


def _change(what: str, event: dict[str, Any]) -> Change:
    """One line of a watch: a change, or the API server's error ending the watch."""
    kind, obj = str(event.get("type", "")), event.get("object") or {}
    if kind == "ERROR":
        code, message = obj.get("code"), str(obj.get("message", ""))[:300]
        if code == 410:
            raise WatchExpired(f"{what}: {message}")
        raise TemporaryError(f"{what}: the API server ended it ({code}: {message})", retry_after=2)
    version = str(obj.get("metadata", {}).get("resourceVersion") or "")
    return Change(kind=kind, seen=None if kind == "BOOKMARK" else _seen(obj), resource_version=version)
