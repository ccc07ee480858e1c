"""The cost of one resync pass over settled Tenants: time, API requests by verb, writes, helm calls.

``python -m bench.resync --tenants 100 --passes 3`` starts the local stack (vCluster boot 0 s,
1 s poll, no tick at start; Knative's broker and the real PingSource adapter, whose 5-minute
schedule does not fire during a pass), provisions N Tenants through the whole pipeline until every one
is Ready, then posts the PingSource's tick straight to the resync function (it answers when its
pass is done) and counts, from the API server's audit log, what tenant-resync asked for during
each pass. A settled pass should write nothing and run no helm. Prints a table; no test asserts
these numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter

import requests

from shared.kube import Kube
from testbed.local.stack import TENANT_NAMESPACE, StackOptions, project_path, start_stack
from testbed.local.ticker import ping_event

RESYNC_USER = f"system:serviceaccount:{TENANT_NAMESPACE}:tenant-resync"


def manifest(i: int) -> str:
    return json.dumps(
        {
            "apiVersion": "kubeopera.io/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": f"bench-{i:04d}", "namespace": TENANT_NAMESPACE},
            "spec": {
                "userID": "3f1a2b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b",
                "tenantName": f"bench-{i:04d}",
                "cloudSpaceID": f"be4c0000-0000-4000-8000-{i:012d}",
                "quota": {"cpu": "1", "memory": "1Gi"},
            },
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args(argv)
    options = StackOptions(vcluster_boot_seconds=0, ready_poll_seconds=1, resync_at_start=False, log_level="WARNING")
    with start_stack(options) as stack:
        kube = Kube.connect(stack.admin_kubeconfig)
        started = time.monotonic()
        stack.kubectl("apply", "-f", "-", input="\n---\n".join(manifest(i) for i in range(args.tenants)))
        while True:
            ready = [
                t
                for t in kube.list_tenants(TENANT_NAMESPACE, "")
                if t.status.phase is not None and t.status.phase.value == "Ready"
            ]
            if len(ready) == args.tenants:
                break
            if time.monotonic() - started > 60 + 10 * args.tenants:
                raise SystemExit(f"only {len(ready)} of {args.tenants} Tenants Ready")
            time.sleep(2)
        provisioned = time.monotonic() - started
        assert stack.watch.wait_idle(120)
        assert stack.control_plane is not None
        audit = stack.control_plane.audit_log
        url = stack.function_urls["tenant-resync"]
        pingsource = project_path("eventing", "resync-pingsource.yaml")
        durations: list[float] = []
        requests_per_pass: list[int] = []
        writes: list[int] = []
        helm_requests: list[int] = []
        verbs: Counter[str] = Counter()
        sender = stack.delivery_authorization("tenant-resync")  # as the broker's filter sends it
        for _ in range(args.passes):
            mark = len(audit.read_text().splitlines())
            headers, body = ping_event(pingsource)
            headers |= sender
            began = time.perf_counter()
            answer = requests.post(url, headers=headers, data=body, timeout=600)
            durations.append(time.perf_counter() - began)
            assert answer.status_code == 204, answer.text
            time.sleep(1)  # the audit log is written asynchronously
            mine = [
                e
                for e in map(json.loads, audit.read_text().splitlines()[mark:])
                if e["user"]["username"] == RESYNC_USER and e.get("stage") == "ResponseComplete"
            ]
            pass_verbs = Counter(f"{e['verb']} {e['objectRef']['resource']}" for e in mine if e.get("objectRef"))
            verbs.update(pass_verbs)
            requests_per_pass.append(len(mine))
            writes.append(sum(1 for e in mine if e["verb"] not in ("get", "list", "watch")))
            # helm would run with the function's own identity: its requests carry its user agent
            helm_requests.append(sum(1 for e in mine if e.get("userAgent", "").startswith("helm")))
        rows = [
            ("Tenants (all Ready)", f"{args.tenants} (provisioned in {provisioned:.0f} s)"),
            (
                "pass time, median (min-max)",
                f"{statistics.median(durations):.3f} s ({min(durations):.3f}-{max(durations):.3f})",
            ),
            ("API requests per pass", f"{statistics.median(requests_per_pass):.0f}"),
            ("  by verb and resource", ", ".join(f"{k}: {v // args.passes}" for k, v in sorted(verbs.items()))),
            ("writes per pass", f"{max(writes)}"),
            ("requests made by helm", f"{max(helm_requests)}"),
        ]
        width = max(len(r[0]) for r in rows)
        print(f"\nresync pass over settled Tenants ({args.passes} passes)")
        for label, value in rows:
            print(f"{label.ljust(width)}  {value}")
        kube.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
