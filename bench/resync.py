"""One resync pass over many settled Tenants: time, API requests by verb and resource, writes.

``python -m bench resync --tenants 1000 --passes 3`` starts the local stack (vCluster boot 0 s, 1 s
poll, no tick at start), provisions one Tenant through the whole pipeline, and stops the
ApiServerSource's adapter and the vCluster watch (so what follows starts no install and hints
nothing to check-ready). It then creates N settled Tenants directly, as copies of that one renamed:
the Tenant with its finalizer and its Ready status, its host namespace with the Roles and
RoleBindings install grants there (resync reads through them), the vCluster StatefulSet with the
template's status (without the label the vCluster stand-in watches, which would poll each one for a
helm record it will never find), the chart's ResourceQuota, LimitRange and NetworkPolicies,
vcluster's Secret with the kubeconfig it exported, and the stored kubeconfig Secret (no helm
release, no vCluster: what resync reads is there). It posts the PingSource's tick straight to the
resync function (with the broker's token; it answers when its pass is done) ``passes`` times and
counts, from the API server's audit log, what tenant-resync asked for during each pass; a pass that
re-drives anything (the broker delivers something after it) or writes anything stops the bench: the
copies were not settled. A settled pass writes nothing and runs no helm. Each copy's StatefulSet
status is the template's (its pod ready), so resync asks each one's vCluster API through the stored
kubeconfig (the template's vCluster answers for all): those requests go to the vCluster stand-in,
not the API server, and are not in the audit log's count.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import requests

from shared.adapters.kube import Kube
from shared.model import service_range
from shared.model.isolation import policy_objects
from shared.model.tenant import Tenant
from shared.settings import Settings
from shared.steps import rollout as waves
from testbed.local.manifests import VCLUSTER_WATCH
from testbed.local.stack import TENANT_NAMESPACE, Stack, StackOptions, project_path, start_stack
from testbed.local.ticker import ping_event

from .burst import cpu_by_part, worker_rss
from .report import Table, spread, table
from .workload import provision

RESYNC_USER = f"system:serviceaccount:{TENANT_NAMESPACE}:tenant-resync"
TEMPLATE = "resync-template"
VCLUSTER_LABEL = "app"  # testbed.standins.vcluster boots the StatefulSets labelled app=vcluster
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "ownerReferences")


def _bare(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as one would create it: no status, none of the fields the server sets."""
    doc = {k: v for k, v in obj.items() if k != "status"}
    doc["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in SERVER_FIELDS}
    doc["metadata"].get("annotations", {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return doc


def _renamed(doc: Mapping[str, Any], replacements: Mapping[str, str]) -> dict[str, Any]:
    """``doc`` with the template's name and cloudSpaceID (which the kubeconfig Secret's name
    carries) replaced by the copy's."""
    text = json.dumps(doc)
    for old, new in replacements.items():
        text = text.replace(old, new)
    copied: dict[str, Any] = json.loads(text)
    return copied


def template(stack: Stack) -> dict[str, dict[str, Any]]:
    """The provisioned Tenant's objects that resync reads."""

    def get(*args: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(stack.kubectl("get", *args, "-o", "json"))
        return found

    tenant = get("kt", TEMPLATE, "-n", TENANT_NAMESPACE)
    cloud_space = tenant["spec"]["cloudSpaceID"]
    # what install grants the functions in the namespace (shared.steps.access): resync reads through it
    grants = {
        f"{item['kind']} {item['metadata']['name']}": item
        for kind in ("roles", "rolebindings")
        for item in get(kind, "-n", f"vcluster-{TEMPLATE}")["items"]
    }
    return {
        **grants,
        "tenant": tenant,
        "namespace": get("namespace", f"vcluster-{TEMPLATE}"),
        "statefulset": get("statefulset", f"vc-{TEMPLATE}", "-n", f"vcluster-{TEMPLATE}"),
        "secret": get("secret", f"tenant-{cloud_space}-kubeconfig", "-n", TENANT_NAMESPACE),
        # the kubeconfig vcluster exported, which resync compares with the stored one on a close
        # look (the same bytes as the stored copy's: settled)
        f"Secret vc-vc-{TEMPLATE}": get("secret", f"vc-vc-{TEMPLATE}", "-n", f"vcluster-{TEMPLATE}"),
        # the chart's namespace policies, which resync lists fleet-wide (shared.model.isolation)
        **{
            f"{o.kind} {o.name}": get(o.kind.lower(), o.name, "-n", f"vcluster-{TEMPLATE}")
            for o in policy_objects(f"vc-{TEMPLATE}")
        },
    }


def install_settings(stack: Stack, kube: Kube) -> Settings:
    """The settings the stack's install runs with (its environment; the Service range as install
    resolves it at start): what a copy's ``status.valuesDigest`` must be computed with."""
    settings = Settings.from_env(os.environ | dict(stack.function_specs["tenant-install"].env))
    return dataclasses.replace(settings, service_cidr=service_range.resolve(settings.service_cidr, kube.service_cidrs))


def settled_digest(item: Mapping[str, Any], settings: Settings) -> str:
    """The ``status.valuesDigest`` install records for this Tenant: a copy with the template's would
    be behind the fleet (its values name another Tenant), and resync would start a rollout."""
    return waves.target(Tenant.from_object(item), settings).values_digest


def create_settled(stack: Stack, objects: Mapping[str, Mapping[str, Any]], count: int, settings: Settings) -> float:
    """N copies of the template, created with server-side apply, then their status written."""
    recorded = objects["tenant"]["status"].get("valuesDigest")
    if settled_digest(objects["tenant"], settings) != recorded:
        raise RuntimeError(f"install's settings, as read here, do not give the template's values digest {recorded}")
    began = time.perf_counter()
    docs: list[dict[str, Any]] = []
    names = [f"settled-{i:04d}" for i in range(count)]
    template_space = objects["tenant"]["spec"]["cloudSpaceID"]
    replacements: dict[str, dict[str, str]] = {}
    for name in names:
        replacements[name] = {TEMPLATE: name, template_space: str(uuid.uuid4())}
        for kind in ("namespace", "statefulset", "secret", *(k for k in objects if " " in k), "tenant"):
            doc = _renamed(_bare(objects[kind]), replacements[name])
            if kind == "statefulset":  # not the vCluster stand-in's to boot: it has no release record
                doc["metadata"].get("labels", {}).pop(VCLUSTER_LABEL, None)
            docs.append(doc)
    for start in range(0, len(docs), 400):
        chunk = {"apiVersion": "v1", "kind": "List", "items": docs[start : start + 400]}
        stack.kubectl("apply", "--server-side", "--field-manager=bench", "-f", "-", input=json.dumps(chunk))
    listed = json.loads(stack.kubectl("get", "kt", "-n", TENANT_NAMESPACE, "-o", "json"))
    status = objects["tenant"]["status"]
    items = []
    for item in listed["items"]:
        if item["metadata"]["name"].startswith("settled-"):
            item["status"] = _renamed(status, replacements[item["metadata"]["name"]])
            item["status"]["valuesDigest"] = settled_digest(item, settings)
            items.append(item)
    # each copy's StatefulSet says what the template's does (its pod ready), as the StatefulSet
    # controller would: resync then finds each vCluster available and asks its API, through the
    # stored kubeconfig (the template's, whose vCluster answers: the Secret's data is not renamed)
    rollout = objects["statefulset"]["status"]
    for statefulset in json.loads(stack.kubectl("get", "statefulsets", "-A", "-o", "json"))["items"]:
        if statefulset["metadata"]["name"].startswith("vc-settled-"):
            statefulset["status"] = rollout | {"observedGeneration": statefulset["metadata"]["generation"]}
            items.append(statefulset)
    for start in range(0, len(items), 200):
        chunk = {"apiVersion": "v1", "kind": "List", "items": items[start : start + 200]}
        stack.kubectl("replace", "--subresource=status", "-f", "-", input=json.dumps(chunk))
    return time.perf_counter() - began


def _review(entry: Mapping[str, Any]) -> bool:
    """A TokenReview (the sender check of the tick) asks the API server; it changes nothing."""
    resource: str = entry.get("objectRef", {}).get("resource", "")
    return resource.endswith("reviews")


def settled_fleet(stack: Stack, tenants: int) -> tuple[Settings, float]:
    """One Tenant provisioned through the pipeline, the ApiServerSource's adapter and the vCluster
    watch stopped (the copies' StatefulSets would each be a hint to check-ready, delivered while
    the passes run), and ``tenants`` settled copies of it: install's settings, and how long the
    copies took."""
    kube = Kube.connect(stack.admin_kubeconfig)
    try:
        provision(stack, kube, TEMPLATE)
        settings = install_settings(stack, kube)
    finally:
        kube.close()
    assert stack.watch.wait_idle(60), stack.watch.pending()
    stack.stop_adapter()
    stack.stop_function(VCLUSTER_WATCH)
    return settings, create_settled(stack, template(stack), tenants, settings)


def main(argv: Sequence[str]) -> list[Table]:
    parser = argparse.ArgumentParser(
        prog="python -m bench resync", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set in every function's environment (repeatable), e.g. MALLOC_ARENA_MAX=2",
    )
    args = parser.parse_args(argv)
    env = dict(pair.split("=", 1) for pair in args.env)
    options = StackOptions(
        vcluster_boot_seconds=0, ready_poll_seconds=1, resync_at_start=False, log_level="WARNING", function_env=env
    )
    with start_stack(options) as stack:
        settings, created = settled_fleet(stack, args.tenants)
        assert stack.control_plane is not None
        audit = stack.control_plane.audit_log
        url = stack.function_urls["tenant-resync"]
        pingsource = project_path("eventing", "resync-pingsource.yaml")
        durations: list[float] = []
        requests_per_pass: list[float] = []
        writes: list[float] = []
        helm_requests: list[float] = []
        verbs: Counter[str] = Counter()
        cpu: list[dict[str, float]] = []
        sender = stack.delivery_authorization("tenant-resync")  # as the broker's filter sends it
        for _ in range(args.passes):
            mark = len(audit.read_text().splitlines())
            delivered = len(stack.watch.deliveries())
            headers, body = ping_event(pingsource)
            cpu_before = cpu_by_part(stack)
            began = time.perf_counter()
            answer = requests.post(url, headers=headers | sender, data=body, timeout=900)
            durations.append(time.perf_counter() - began)
            cpu.append({part: s - cpu_before.get(part, 0.0) for part, s in cpu_by_part(stack).items()})
            if answer.status_code != 204:
                raise RuntimeError(f"resync answered {answer.status_code}: {answer.text}")
            if not stack.watch.wait_idle(120):
                raise RuntimeError(f"the broker is still busy after the pass: {stack.watch.pending()}")
            redriven = len(stack.watch.deliveries()) - delivered
            if redriven:
                raise RuntimeError(f"the pass re-drove {redriven} deliveries: the copies are not settled")
            time.sleep(1)  # the audit log is written asynchronously
            mine = [
                e
                for e in map(json.loads, audit.read_text().splitlines()[mark:])
                if e["user"]["username"] == RESYNC_USER and e.get("stage") == "ResponseComplete"
            ]
            pass_verbs = Counter(f"{e['verb']} {e['objectRef']['resource']}" for e in mine if e.get("objectRef"))
            pass_writes = [e for e in mine if e["verb"] not in ("get", "list", "watch") and not _review(e)]
            if pass_writes:  # a settled pass writes nothing: what it wrote says what the copies lacked
                wrote = Counter(f"{e['verb']} {e['objectRef']['resource']}" for e in pass_writes)
                raise RuntimeError(f"the pass wrote {dict(wrote)}: the copies are not settled")
            verbs.update(pass_verbs)
            requests_per_pass.append(len(mine))
            writes.append(len(pass_writes))
            helm_requests.append(sum(1 for e in mine if e.get("userAgent", "").lower().startswith("helm")))
        memory = (worker_rss(stack)["tenant-resync"], worker_rss(stack, "VmHWM")["tenant-resync"])
    total = args.tenants + 1
    rows = [
        ("settled Tenants", f"{total} ({args.tenants} created directly in {created:.0f} s, 1 through the pipeline)"),
        ("pass time (s)", spread(durations, digits=3)),
        ("  per Tenant (ms)", spread([d / total for d in durations], scale=1000, digits=2)),
        ("API requests per pass", spread(requests_per_pass, digits=0)),
    ]
    rows += [(f"  {key}", f"{count / args.passes:.0f}") for key, count in sorted(verbs.items())]
    rows += [("writes per pass", spread(writes, digits=0)), ("requests made by helm", spread(helm_requests, digits=0))]
    rows += [("resync's worker RSS after the passes, peak (MiB)", f"{memory[0]:.1f}, {memory[1]:.1f}")]
    return [
        table(
            f"Resync: one pass over {total} settled Tenants ({args.passes} passes: median (min-max))",
            ("what", "figure"),
            rows,
            (
                "From the API server's audit log, user tenant-resync, stage ResponseComplete.",
                "writes: requests other than get, list and watch, less the TokenReview that checks the tick's sender.",
            ),
        ),
        cpu_table(total, durations, cpu),
    ]


def cpu_table(total: int, durations: Sequence[float], cpu: Sequence[Mapping[str, float]]) -> Table:
    """Where a pass's CPU goes: resync is the only function at work, and the vCluster stand-in
    answers every copy's API probe."""
    parts = sorted({p for c in cpu for p in c}, key=lambda p: -statistics.median(c.get(p, 0.0) for c in cpu))
    rows = [
        (
            part,
            spread([c.get(part, 0.0) for c in cpu], digits=2),
            f"{statistics.median(c.get(part, 0.0) for c in cpu) / total * 1000:.2f}",
        )
        for part in parts
        if statistics.median(c.get(part, 0.0) for c in cpu) >= 0.01
    ]
    totals = [sum(c.values()) for c in cpu]
    rows.append(("all", spread(totals, digits=2), f"{statistics.median(totals) / total * 1000:.2f}"))
    busy = statistics.median(t / (len(os.sched_getaffinity(0)) * d) for t, d in zip(totals, durations, strict=True))
    return table(
        "Where the CPU goes during a pass (CPU seconds: median (min-max))",
        ("part", "CPU s", "ms per Tenant"),
        rows,
        (
            "functions (Python): resync's pass, the only function at work; stand-ins: the one vCluster stand-in "
            "answering every copy's probe (TLS and three GETs); the service proxy: the tunnel each probe crosses.",
            f"The machine's cores were {busy * 100:.0f}% busy over the passes (CPU seconds / cores x wall time).",
        ),
    )
