"""What vcluster-source costs as the fleet grows: Knative's namespace list, per new Tenant namespace.

``python -m bench sources --namespaces 100,1000,3000`` starts the local stack and, for each N in
turn, brings the number of namespaces labelled as install labels a Tenant's
(``kubeopera.io/managed-by: tenant-controller``) to N - 1, waits until Knative's controller has
given vcluster-source's adapter that list, then creates the N-th namespace with a StatefulSet
labelled as install's values label a vCluster's (the owner labels), and measures:

- how long from that namespace's create until a change of the StatefulSet reached the router (the
  hint check-ready would get for a new Tenant's vCluster), or that none ever came. Knative's
  adapter announces nothing its first LIST finds, only what its WATCH sees change after it, so
  the bench touches the StatefulSet every half second, as vcluster's pod becoming ready would;
- what that one namespace cost the API server: the SubjectAccessReviews of Knative's controller
  (its access check of get, list and watch in every matching namespace, on every reconcile),
  its updates of the adapter's Deployment (each restarts the adapter), the adapter's LISTs and
  WATCHes (one each per namespace on every start), and the CPU by part of the stack;
- the size of the adapter's ``K_SOURCE_CONFIG`` (the JSON that carries the namespace list) against
  Linux's limit of one environment string (MAX_ARG_STRLEN, 32 pages: 131,072 bytes with its
  name): beyond it no kubelet can start the adapter (execve fails with E2BIG), and neither can the
  test bed's kubelet stand-in, which runs it as a host process.

Namespaces are named ``vcluster-<a 32-character tenantName>``, the longest the CRD allows (41
characters), so the limit shows at the smallest fleet. No Tenant, helm release or vCluster is
made: what is measured is Knative's, and a Tenant's provisioning would only add noise. The
router replies a hint for the StatefulSet's owner labels; check-ready finds no such Tenant and
answers 204.
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
from testbed.local.stack import TENANT_NAMESPACE, Stack, StackOptions, start_stack

from .burst import EVENTING_CONTROLLER, cpu_by_part, lines, received_at
from .report import Table, table

SOURCE = "vcluster-source"
SOURCE_USER = f"system:serviceaccount:{TENANT_NAMESPACE}:{SOURCE}"
MAX_ARG_STRLEN = 32 * 4096  # linux include/uapi/linux/binfmts.h: one argv or environment string
TENANT_NAME_LENGTH = 32  # shared.model.naming.TENANT_NAME_PATTERN: at most 32 characters
BATCH = 500
HEARD_TIMEOUT = 180.0
SETTLE_TIMEOUT = 900.0
TOUCH_SECONDS = 0.5


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


def statefulset(i: int) -> dict[str, Any]:
    """A vCluster's StatefulSet as vcluster-source selects it (the owner labels), with no replicas."""
    name = namespace_name(i).removeprefix(NAMESPACE_PREFIX)
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


def source_config(stack: Stack) -> tuple[str, int]:
    """The adapter Deployment's K_SOURCE_CONFIG and its generation."""
    listed = json.loads(
        stack.kubectl(
            "get", "deployments", "-n", TENANT_NAMESPACE, "-l", f"eventing.knative.dev/sourceName={SOURCE}", "-o=json"
        )
    )
    (deployment,) = listed["items"]
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    config = next(e["value"] for e in env if e["name"] == "K_SOURCE_CONFIG")
    return config, int(deployment["metadata"]["generation"])


def wait_listed(stack: Stack, count: int) -> str:
    """Wait until Knative gave the adapter a list of ``count`` namespaces; its K_SOURCE_CONFIG."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        config, _ = source_config(stack)
        if len(json.loads(config)["namespaces"] or ()) == count:
            return config
        if time.monotonic() > deadline:
            raise RuntimeError(f"Knative did not give {SOURCE} {count} namespaces in {SETTLE_TIMEOUT:.0f} s")
        time.sleep(1)


def adapter_running(stack: Stack) -> bool:
    try:
        stack.adapter(SOURCE)
    except TimeoutError:
        return False
    return True


def heard(stack: Stack, i: int, since: float, timeout: float) -> float | None:
    """When the router was first given an event of the i-th StatefulSet (time.time()), or None.

    Knative's adapter sends nothing for what its first LIST finds (``resourceDelegate.Replace``
    is a no-op), only for changes its WATCH sees after: the StatefulSet is touched (an
    annotation) every ``TOUCH_SECONDS`` until one is heard, as vcluster's pod becoming ready
    would change it."""
    ns, name = namespace_name(i), statefulset(i)["metadata"]["name"]
    deadline = time.monotonic() + timeout
    touched = 0.0
    while time.monotonic() < deadline:
        for d in stack.watch.deliveries():
            if d.service == "tenant-router" and d.time >= since and f"/namespaces/{ns}/" in (d.subject or ""):
                return d.time
        if time.monotonic() - touched >= TOUCH_SECONDS:
            stack.kubectl("annotate", "--overwrite", "statefulset", name, "-n", ns, f"bench/touched={time.time()}")
            touched = time.monotonic()
        time.sleep(0.05)
    return None


def requests_between(stack: Stack, began: float, ended: float) -> Counter[str]:
    """The controller's and the adapter's requests received in [began, ended] (audit log)."""
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
        elif entry["user"]["username"] == SOURCE_USER:
            counts[f"adapter: {what}"] += 1
    return counts


def step(stack: Stack, there: int, n: int) -> dict[str, str]:
    """Bring the labelled namespaces from ``there`` to ``n``; the last one is measured."""
    apply(stack, [namespace(i) for i in range(there, n - 1)])
    wait_listed(stack, n - 1)
    running_before = adapter_running(stack)
    time.sleep(2 + n / 500)  # the adapter's start and its LISTs done: the window holds the new namespace alone
    _, generation = source_config(stack)
    cpu_before = cpu_by_part(stack)
    began = time.time()
    apply(stack, [namespace(n - 1)])
    apply(stack, [statefulset(n - 1)])
    at = heard(stack, n - 1, began, HEARD_TIMEOUT)
    after = wait_listed(stack, n)  # K_SOURCE_CONFIG as Knative wrote it, started or not
    ended = (at if at is not None else time.time()) + 2
    time.sleep(max(0.0, ended - time.time()) + 1)  # the audit log is written asynchronously
    cpu = {part: s - cpu_before.get(part, 0.0) for part, s in cpu_by_part(stack).items()}
    to_hear = f"{at - began:.1f}" if at is not None else f"never ({HEARD_TIMEOUT:.0f} s)"
    _, generation_after = source_config(stack)
    counts = requests_between(stack, began, ended)
    size = len("K_SOURCE_CONFIG=") + len(after.encode()) + 1
    row = {
        "labelled namespaces": str(n),
        "K_SOURCE_CONFIG (bytes, with its name)": f"{size:,}",
        "over Linux's 131,072 for one env string": "yes" if size > MAX_ARG_STRLEN else "no",
        "adapter running before": "yes" if running_before else "no",
        "namespace created -> StatefulSet heard (s)": to_hear,
        "controller SubjectAccessReviews": str(counts["controller: create subjectaccessreviews"]),
        "adapter Deployment updates (restarts)": str(generation_after - generation),
        "adapter LISTs of StatefulSets": str(counts["adapter: list statefulsets"]),
        "adapter WATCHes of StatefulSets": str(counts["adapter: watch statefulsets"]),
        "CPU s, kube-apiserver": f"{cpu.get('kube-apiserver', 0.0):.2f}",
        "CPU s, Knative Eventing": f"{cpu.get('Knative Eventing (broker, channel, controllers)', 0.0):.2f}",
        "window (s)": f"{ended - began:.1f}",
    }
    return row


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
            "vcluster-source: one more Tenant namespace, with N - 1 there (one stack, N in turn)",
            ("what", *(r["labelled namespaces"] for r in rows)),
            [(k, *(r[k] for r in rows)) for k in keys[1:]],
            (
                "Window: from the N-th namespace's create to 2 s after the router got its StatefulSet's event "
                "(or the timeout). Requests from the API server's audit log: Knative Eventing's controller by its "
                "user agent, the adapter by its ServiceAccount.",
                "Namespaces named with the longest tenantName (41 characters); no Tenant, release or vCluster.",
                "No CPU row for the adapter: it restarts within the window, and a process gone takes its CPU "
                "count with it. 'adapter running before': ready within 60 s of getting the N - 1 list (it opens "
                "a LIST and a WATCH per namespace, at client-go's default 5 requests a second).",
            ),
        )
    ]
