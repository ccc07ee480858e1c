"""What hearing a new vCluster costs as the fleet grows: the vCluster watch, per new Tenant namespace.

``python -m bench sources --namespaces 100,1000,3000`` starts the local stack and, for each N in
turn, brings the number of namespaces labelled as install labels a Tenant's
(``kubeopera.io/managed-by: tenant-controller``), each holding a StatefulSet labelled as install's
values label a vCluster's (the owner labels), to N - 1, waits until the vCluster watch's hints for
them are answered, then creates the N-th namespace with its StatefulSet and measures:

- how long from that namespace's create until check-ready got the hint for the StatefulSet (the
  look a new Tenant's vCluster gets), or that none ever came. The watch sends one for a new
  StatefulSet (``shared.model.vcluster_watch.worth_a_look``: nothing was seen before);
- what that one namespace cost the API server: the requests of the vCluster watch (its LISTs and
  WATCHes of StatefulSets) and of Knative Eventing's controller (its SubjectAccessReviews), and
  the CPU by part of the stack; and the watch's resident memory after it.

Until 2026-12-06 the hint came from Knative's ApiServerSource ``vcluster-source``, which this
bench measured first (bench/RESULTS.md, 2026-12-06 00:56): Knative gave its adapter the list of
matching namespaces in one environment variable, restarted it for each new one after three
SubjectAccessReviews per namespace, and from about 2,970 namespaces of the longest names the list
no longer fit Linux's 131,072 bytes for one environment string.

Namespaces are named ``vcluster-<a 32-character tenantName>``, the longest the CRD allows (41
characters), as before. No Tenant, helm release or vCluster is made: check-ready finds no such
Tenant and answers 204.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from shared.model.naming import (
    LABEL_MANAGED_BY,
    LABEL_OWNER_NAME,
    LABEL_OWNER_NAMESPACE,
    LABEL_OWNER_UID,
    MANAGED_BY,
    NAMESPACE_PREFIX,
)
from testbed.local.manifests import VCLUSTER_WATCH
from testbed.local.stack import TENANT_NAMESPACE, Stack, StackOptions, start_stack

from .burst import EVENTING_CONTROLLER, cpu_by_part, lines, received_at, worker_rss
from .report import Table, table

WATCH_USER = f"system:serviceaccount:{TENANT_NAMESPACE}:{VCLUSTER_WATCH}"
TENANT_NAME_LENGTH = 32  # shared.model.naming.TENANT_NAME_PATTERN: at most 32 characters
BATCH = 500
HEARD_TIMEOUT = 180.0
SETTLE_TIMEOUT = 900.0
HINT_TRIGGER = "tenant-check-ready-hint"


def namespace_name(i: int) -> str:
    """The i-th namespace, with the longest tenantName the CRD allows."""
    tenant = f"fleet-{i:05d}-".ljust(TENANT_NAME_LENGTH, "x")
    return NAMESPACE_PREFIX + tenant


def namespace(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace_name(i), "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
    }


def owner_name(i: int) -> str:
    return namespace_name(i).removeprefix(NAMESPACE_PREFIX)


def statefulset(i: int) -> dict[str, Any]:
    """A vCluster's StatefulSet as the vCluster watch selects it (the owner labels), with no replicas."""
    name = owner_name(i)
    labels = {LABEL_OWNER_UID: f"00000000-0000-4000-8000-{i:012d}", LABEL_OWNER_NAMESPACE: TENANT_NAMESPACE}
    labels[LABEL_OWNER_NAME] = name
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": f"vc-{name}", "namespace": namespace_name(i), "labels": labels},
        "spec": {
            "replicas": 0,
            "serviceName": f"vc-{name}",
            "selector": {"matchLabels": {"bench": "sources"}},
            "template": {
                "metadata": {"labels": {"bench": "sources"}},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/none:0"}]},
            },
        },
    }


def apply(stack: Stack, docs: Sequence[Mapping[str, Any]]) -> None:
    for start in range(0, len(docs), BATCH):
        chunk = {"apiVersion": "v1", "kind": "List", "items": list(docs[start : start + BATCH])}
        stack.kubectl("apply", "--server-side", "--field-manager=bench", "-f", "-", input=json.dumps(chunk))


def hints_answered(stack: Stack, names: set[str], timeout: float) -> None:
    """Wait until check-ready answered a hint for each Tenant name of ``names``."""
    deadline = time.monotonic() + timeout
    while True:
        heard = {
            (d.subject or "").rpartition("/")[2]
            for d in stack.watch.deliveries()
            if d.trigger == HINT_TRIGGER and d.status < 300
        }
        if names <= heard:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(names - heard)} hints not answered in {timeout:.0f} s")
        time.sleep(1)


def heard(stack: Stack, i: int, since: float, timeout: float) -> float | None:
    """When check-ready was first given the hint for the i-th StatefulSet (time.time()), or None."""
    subject = f"{TENANT_NAMESPACE}/{owner_name(i)}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for d in stack.watch.deliveries():
            if d.trigger == HINT_TRIGGER and d.time >= since and d.subject == subject:
                return d.time
        time.sleep(0.05)
    return None


def requests_between(stack: Stack, began: float, ended: float) -> Counter[str]:
    """The controller's and the vCluster watch's requests received in [began, ended] (audit log)."""
    assert stack.control_plane is not None
    counts: Counter[str] = Counter()
    for line in lines(stack.control_plane.audit_log):
        entry = json.loads(line)
        # a WATCH is logged as started when it is made and as complete only when it ends
        stage = "ResponseStarted" if entry.get("verb") == "watch" else "ResponseComplete"
        if entry.get("stage") != stage or not entry.get("objectRef"):
            continue
        if not began <= received_at(entry) <= ended:
            continue
        ref = entry["objectRef"]
        what = f"{entry['verb']} {ref['resource']}"
        if entry.get("userAgent", "").startswith(EVENTING_CONTROLLER):
            counts[f"controller: {what}"] += 1
        elif entry["user"]["username"] == WATCH_USER:
            counts[f"watch: {what}"] += 1
    return counts


def step(stack: Stack, there: int, n: int) -> dict[str, str]:
    """Bring the labelled namespaces from ``there`` to ``n``; the last one is measured."""
    earlier = range(there, n - 1)
    apply(stack, [namespace(i) for i in earlier])
    apply(stack, [statefulset(i) for i in earlier])
    hints_answered(stack, {owner_name(i) for i in earlier}, SETTLE_TIMEOUT)
    time.sleep(2)  # the window holds the new namespace alone
    cpu_before = cpu_by_part(stack)
    began = time.time()
    apply(stack, [namespace(n - 1)])
    apply(stack, [statefulset(n - 1)])
    at = heard(stack, n - 1, began, HEARD_TIMEOUT)
    ended = (at if at is not None else time.time()) + 2
    time.sleep(max(0.0, ended - time.time()) + 1)  # the audit log is written asynchronously
    cpu = {part: s - cpu_before.get(part, 0.0) for part, s in cpu_by_part(stack).items()}
    to_hear = f"{at - began:.1f}" if at is not None else f"never ({HEARD_TIMEOUT:.0f} s)"
    counts = requests_between(stack, began, ended)
    return {
        "labelled namespaces": str(n),
        "namespace created -> hint at check-ready (s)": to_hear,
        "controller SubjectAccessReviews": str(counts["controller: create subjectaccessreviews"]),
        "watch LISTs of StatefulSets": str(counts["watch: list statefulsets"]),
        "watch WATCHes of StatefulSets": str(counts["watch: watch statefulsets"]),
        "CPU s, kube-apiserver": f"{cpu.get('kube-apiserver', 0.0):.2f}",
        "CPU s, Knative Eventing": f"{cpu.get('Knative Eventing (broker, channel, controllers)', 0.0):.2f}",
        "CPU s, the vCluster watch": f"{cpu.get('the vCluster watch', 0.0):.3f}",
        "the watch's worker RSS after (MiB)": f"{worker_rss(stack).get(VCLUSTER_WATCH, 0.0):.1f}",
        "window (s)": f"{ended - began:.1f}",
    }


def main(argv: Sequence[str]) -> list[Table]:
    parser = argparse.ArgumentParser(
        prog="python -m bench sources", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--namespaces", default="100,1000,3000", help="comma-separated N, ascending")
    args = parser.parse_args(argv)
    steps = [int(n) for n in args.namespaces.split(",")]
    if steps != sorted(set(steps)) or steps[0] < 2:
        parser.error("--namespaces: ascending, distinct, each at least 2")
    options = StackOptions(vcluster_boot_seconds=0, ready_poll_seconds=1, resync_at_start=False, log_level="WARNING")
    rows: list[dict[str, str]] = []
    with start_stack(options) as stack:
        for there, n in zip([0, *steps], steps, strict=False):
            rows.append(step(stack, there, n))
    keys = list(rows[0])
    return [
        table(
            "The vCluster watch: one more Tenant namespace, with N - 1 there (one stack, N in turn)",
            ("what", *(r["labelled namespaces"] for r in rows)),
            [(k, *(r[k] for r in rows)) for k in keys[1:]],
            (
                "Window: from the N-th namespace's create to 2 s after check-ready got its StatefulSet's hint "
                "(or the timeout). Requests from the API server's audit log: Knative Eventing's controller by its "
                "user agent, the watch by its ServiceAccount; a WATCH counted when it starts.",
                "Namespaces named with the longest tenantName (41 characters), each with one labelled StatefulSet; "
                "no Tenant, release or vCluster.",
            ),
        )
    ]
