"""The ``kubeopera-tenants`` command: run the pipeline locally, list Tenants, retry a Failed one.

``local`` starts the whole pipeline on an embedded control plane (see ``shared.local.runner``).
``status`` and ``retry`` work against any cluster (``--kubeconfig`` or the usual
``KUBECONFIG``): ``retry`` is the runbook's manual step, patching a Failed Tenant's phase back
to Pending so that install starts over.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.errors import Conflict, TenantError
from shared.kube import Kube
from shared.tenant import Phase, StatusUpdate, Tenant, rfc3339, utcnow

DEFAULT_NAMESPACE = "kubeopera-system"


def _age(created: str, now: datetime) -> str:
    if not created:
        return "?"
    seconds = int((now - datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def status_table(objects: Sequence[Mapping[str, Any]], now: datetime) -> str:
    """The Tenants as a table: namespace, name, phase, vCluster, age and the last message."""
    rows = [("NAMESPACE", "NAME", "PHASE", "VCLUSTER", "AGE", "MESSAGE")]
    for obj in sorted(objects, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
        meta, status = obj["metadata"], obj.get("status") or {}
        rows.append(
            (
                meta["namespace"],
                meta["name"],
                status.get("phase") or "Pending",
                status.get("vclusterName") or "-",
                _age(meta.get("creationTimestamp", ""), now),
                (status.get("message") or "").replace("\n", " ")[:100],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "   " + row[-1] for row in rows
    )


def retry(kube: Kube, namespace: str, name: str) -> str:
    """Patch a Failed Tenant to Pending; raise ``SystemExit`` with a clear message otherwise."""
    for _ in range(3):
        tenant = kube.get_tenant(namespace, name)
        if tenant is None:
            raise SystemExit(f"error: tenant {namespace}/{name} not found")
        if tenant.status.phase != Phase.FAILED:
            phase = tenant.status.phase.value if tenant.status.phase else "Pending"
            raise SystemExit(
                f"error: tenant {namespace}/{name} is {phase}, not Failed; only a Failed tenant is retried"
            )
        try:
            kube.patch_tenant_status(tenant, _retry_update(tenant))
        except Conflict:
            continue
        return f"tenant {namespace}/{name} patched to Pending; install starts over"
    raise SystemExit(f"error: tenant {namespace}/{name} kept changing; try again")


def _retry_update(tenant: Tenant) -> StatusUpdate:
    return StatusUpdate(
        phase=Phase.PENDING,
        fields={"message": f"retry requested at {rfc3339(utcnow())}; was: {tenant.status.message}"[:1024]},
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubeopera-tenants",
        description="Turn kubeopera.io Tenants into vClusters, or run the whole pipeline locally.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    local = sub.add_parser(
        "local",
        help="run the whole pipeline on an embedded control plane and provision the example Tenant",
        description="Start an embedded control plane, the chart registry, Knative Eventing (its controllers and "
        "its broker) with the Broker, Triggers and sources of eventing/, each function under gunicorn, the vCluster "
        "stand-in and the kubeopera-api stand-in; create the example Tenant and show its progress, each delivery "
        "of the broker included. Ctrl-C stops everything.",
    )
    local.add_argument(
        "--kubeconfig-out",
        type=Path,
        metavar="PATH",
        help="write the admin kubeconfig there once the CRD is served and the functions are ready",
    )
    local.add_argument(
        "--kubeopera-api-url",
        metavar="URL",
        help="send callbacks to this URL instead of the built-in stand-in "
        "(INTERNAL_SERVICE_TOKEN from the environment is used as usual)",
    )
    local.add_argument("--no-example", action="store_true", help="do not create the example Tenant")
    local.add_argument(
        "--vcluster-boot-seconds",
        type=float,
        default=20.0,
        metavar="N",
        help="how long the vCluster stand-in takes to write its Secret (default 20)",
    )
    for name, text in (
        ("status", "list Tenants with phase, vCluster, age and the last message"),
        ("retry", "patch a Failed Tenant's phase to Pending so it is provisioned again"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        if name == "retry":
            cmd.add_argument("name", help="the Tenant's name")
        cmd.add_argument("--kubeconfig", type=Path, metavar="PATH", help="defaults to $KUBECONFIG or ~/.kube/config")
        cmd.add_argument("-n", "--namespace", default=DEFAULT_NAMESPACE, help=f"default {DEFAULT_NAMESPACE}")
        if name == "status":
            cmd.add_argument("-A", "--all-namespaces", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "local":
        from shared.local.runner import LocalOptions, run

        return run(
            LocalOptions(
                kubeconfig_out=args.kubeconfig_out,
                kubeopera_api_url=args.kubeopera_api_url,
                create_example=not args.no_example,
                vcluster_boot_seconds=args.vcluster_boot_seconds,
            )
        )
    try:
        kube = Kube.connect(args.kubeconfig)
        if args.command == "status":
            namespace = None if args.all_namespaces else args.namespace
            print(status_table(kube.list_tenant_objects(namespace), datetime.now(UTC)))
        else:
            print(retry(kube, args.namespace, args.name))
    except TenantError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except SystemExit as err:
        print(err.code, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
