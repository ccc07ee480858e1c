"""The ``kubeopera-tenants`` command: what an operator runs against any cluster.

``status`` lists Tenants as ``kubectl get`` would, with their deletion protection and the last message; ``retry`` is the
runbook's manual step, patching a Failed Tenant's phase back to Pending so that install starts
over; ``rotate`` has a Ready Tenant's vCluster issue new certificates and waits until the new
kubeconfig is stored and announced (``shared.steps.rotation``); ``rollout status`` shows where each
Tenant is in a fleet upgrade (done, in progress, waiting, halted) and ``rollout resume`` ends a
halted one (``shared.steps.rollout``). All take ``--kubeconfig`` (or the usual ``KUBECONFIG``).

Other distributions add commands through the entry-point group ``kubeopera_tenants.commands``:
each entry point is a callable that adds one subcommand to the parser it is given and sets
``run`` on it. The development install adds ``local`` that way (``testbed.local.cli``); the
runtime wheel and the image have no such command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from shared.adapters.kube import Kube
from shared.errors import Conflict, TenantError
from shared.model import lifecycle, rollout
from shared.model.naming import DEFAULT_TENANT_NAMESPACE
from shared.model.tenant import Phase, Tenant, deletion_protected, parse_time
from shared.steps import rollout as waves
from shared.steps.reconcile import retry_update
from shared.steps.rotation import RotationError, rotate

COMMANDS_GROUP = "kubeopera_tenants.commands"
ROLLOUT_HELP = (
    "When the chart version, a plan or the base values change, install upgrades the Ready Tenants "
    "they affect in waves, at most ROLLOUT_MAX_PARALLEL at a time; a failed upgrade halts the rest."
)


def _age(created: str, now: datetime) -> str:
    born = parse_time(created)
    if born is None:
        return "?"
    seconds = int((now - born).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def status_table(objects: Sequence[Mapping[str, Any]], now: datetime) -> str:
    """The Tenants as a table: namespace, name, phase, vCluster, age, whether the API server
    refuses its deletion (annotation kubeopera.io/deletion-protection) and the last message."""
    rows = [("NAMESPACE", "NAME", "PHASE", "VCLUSTER", "AGE", "PROTECTED", "MESSAGE")]
    for obj in sorted(objects, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
        meta, status = obj["metadata"], obj.get("status") or {}
        rows.append(
            (
                meta["namespace"],
                meta["name"],
                status.get("phase") or "Pending",
                status.get("vclusterName") or "-",
                _age(meta.get("creationTimestamp", ""), now),
                "yes" if deletion_protected(meta) else "-",
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
            phase = tenant.status.phase.value
            raise SystemExit(
                f"error: tenant {namespace}/{name} is {phase}, not Failed; only a Failed tenant is retried"
            )
        try:
            kube.patch_tenant_status(tenant, retry_update(tenant, lifecycle.RETRY_REQUESTED_REASON, "retry requested"))
        except Conflict:
            continue
        return f"tenant {namespace}/{name} patched to Pending; install starts over"
    raise SystemExit(f"error: tenant {namespace}/{name} kept changing; try again")


def rollout_table(tenants: Sequence[Tenant], found: waves.Slots) -> str:
    """Each Tenant of the Tenants' namespace with its rollout state, the chart and values digest it
    runs and the slot it holds, then the counts and the halt. Waiting is as resync last marked it
    (``status.rollout``): only the functions compute what a Tenant should run."""
    behind = {t.key: t.status.rollout == rollout.WAITING_MARK for t in tenants}
    states = waves.states(tenants, behind, found)
    rows = [("NAME", "STATE", "PHASE", "CHART", "VALUES", "SLOT")]
    for tenant in sorted(tenants, key=lambda t: t.name):
        slot = found.held_by(tenant)
        held = slot.name if slot is not None and states[tenant.key] != rollout.State.DONE else "-"
        rows.append(
            (
                tenant.name,
                states[tenant.key].value,
                tenant.status.phase.value,
                tenant.status.chart_version or "-",
                tenant.status.values_digest or "-",
                held,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    shown = [s for s in rollout.State if s != rollout.State.OUTSIDE]
    counts = ", ".join(f"{sum(1 for v in states.values() if v == s)} {s.value}" for s in shown)
    lines.append("")
    lines.append(counts)
    if found.halted is not None:
        halted = next((t for t in tenants if t.uid == found.halted.uid), None)
        why = f": {halted.status.message}" if halted is not None and halted.status.message else ""
        lines.append(
            f"HALTED at Tenant {found.halted.tenant}{why}\n"
            "fix it and retry it (kubeopera-tenants retry), or leave it Failed, then: kubeopera-tenants rollout resume"
        )
    return "\n".join(lines)


def _rollout(kube: Kube, namespace: str, command: str) -> str:
    tenants = kube.list_tenants(namespace, "")
    by_name = {t.name: t for t in tenants}
    found = waves.listed(kube.list_claims(namespace, rollout.ROLE_LABEL), by_name.get)
    if command == "resume":
        return waves.resume(kube, namespace, found)
    return rollout_table(tenants, found)


def _on_cluster(args: argparse.Namespace) -> int:
    try:
        kube = Kube.connect(args.kubeconfig)
        if args.command == "rollout":
            print(_rollout(kube, args.namespace, args.rollout_command))
        elif args.command == "status":
            namespace = None if args.all_namespaces else args.namespace
            print(status_table(kube.list_tenant_objects(namespace), datetime.now(UTC)))
        elif args.command == "rotate":
            ref = f"{args.namespace}/{args.name}"
            print(f"rotating the certificates of tenant {ref}; waiting up to {args.timeout:.0f}s", flush=True)
            print(rotate(kube, args.namespace, args.name, args.timeout))
        else:
            print(retry(kube, args.namespace, args.name))
    except (TenantError, RotationError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except SystemExit as err:
        print(err.code, file=sys.stderr)
        return 1
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line: ``status``, ``retry``, ``rotate``, ``rollout``, and the commands other
    distributions add."""
    top = argparse.ArgumentParser(
        prog="kubeopera-tenants", description="Operate kubeopera.io Tenants and their vClusters."
    )
    sub = top.add_subparsers(dest="command", required=True)
    for name, text in (
        ("status", "list Tenants with phase, vCluster, age, deletion protection and the last message"),
        ("retry", "patch a Failed Tenant's phase to Pending so it is provisioned again"),
        (
            "rotate",
            "have a Ready Tenant's vCluster issue new certificates (the old kubeconfig stops working); "
            "wait until the new kubeconfig is stored and kubeopera-api is told",
        ),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        if name in ("retry", "rotate"):
            cmd.add_argument("name", help="the Tenant's name")
        if name == "rotate":
            cmd.add_argument(
                "--timeout", type=float, default=600.0, metavar="SECONDS", help="how long to wait (default 600)"
            )
        cmd.add_argument("--kubeconfig", type=Path, metavar="PATH", help="defaults to $KUBECONFIG or ~/.kube/config")
        cmd.add_argument(
            "-n", "--namespace", default=DEFAULT_TENANT_NAMESPACE, help=f"default {DEFAULT_TENANT_NAMESPACE}"
        )
        if name == "status":
            cmd.add_argument("-A", "--all-namespaces", action="store_true")
        cmd.set_defaults(run=_on_cluster)
    waves_cmd = sub.add_parser(
        "rollout", help="a fleet upgrade in waves: its status, and resume after a halt", description=ROLLOUT_HELP
    )
    actions = waves_cmd.add_subparsers(dest="rollout_command", required=True)
    for name, text in (
        ("status", "each Tenant's place in the fleet upgrade: done, in progress, waiting or halted, and the counts"),
        (
            "resume",
            "end a halt: remove the halt record and the slot of a Tenant still Failed (it is skipped); "
            "resync's next pass starts the next wave",
        ),
    ):
        action = actions.add_parser(name, help=text, description=text)
        action.add_argument(
            "--kubeconfig", type=Path, metavar="PATH", help="defaults to $KUBECONFIG or ~/.kube/config"
        )
        action.add_argument(
            "-n", "--namespace", default=DEFAULT_TENANT_NAMESPACE, help=f"default {DEFAULT_TENANT_NAMESPACE}"
        )
        action.set_defaults(run=_on_cluster)
    for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        entry.load()(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
