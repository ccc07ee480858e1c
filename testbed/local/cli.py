"""``kubeopera-tenants local``: the command the development install adds to the operator's CLI.

``testbed/pyproject.toml`` registers :func:`add_command` in the entry-point group
``kubeopera_tenants.commands``, which ``shared.cli`` reads; it is also runnable on its own as
``python -m testbed.local``. It starts the whole pipeline on an embedded control plane
(:mod:`testbed.local.runner`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DESCRIPTION = (
    "Start an embedded control plane, the chart registry, Knative Eventing (its controllers and its broker) with "
    "the Broker, Triggers and sources of eventing/, each function under gunicorn, the vCluster stand-in and the "
    "kubeopera-api stand-in; create the example Tenant and show its progress, each delivery of the broker "
    "included. Ctrl-C stops everything."
)


def add_arguments(local: argparse.ArgumentParser) -> None:
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
        "--trace",
        action="store_true",
        help="start Jaeger (an OTLP receiver with a query API), trace every function into it and, when a "
        "Tenant is Ready, print its trace as a waterfall",
    )
    local.add_argument(
        "--cluster",
        action="store_true",
        help="the cluster tier: a real node (kubelet, containerd) with Knative Serving, Traefik and Knative "
        "Eventing as pods, every function a real Knative Service scaled by Knative (needs root; a cold first "
        "run builds about 20 minutes more)",
    )
    local.add_argument(
        "--vcluster-boot-seconds",
        type=float,
        default=20.0,
        metavar="N",
        help="how long the vCluster stand-in takes to write its Secret (default 20)",
    )
    local.add_argument(
        "--no-sender-identity",
        action="store_true",
        help="without Knative Eventing's authentication-oidc: the broker sends no tokens and every function runs "
        "with SENDER_IDENTITY=off (as on a cluster without the feature)",
    )
    local.set_defaults(run=run)


def add_command(sub: argparse._SubParsersAction[Any]) -> None:
    """The entry point: add ``local`` to ``kubeopera-tenants``' subcommands."""
    add_arguments(
        sub.add_parser(
            "local",
            help="run the whole pipeline on an embedded control plane and provision the example Tenant",
            description=DESCRIPTION,
        )
    )


def run(args: argparse.Namespace) -> int:
    if args.cluster:
        return _run_cluster(args)
    from testbed.local.runner import LocalOptions
    from testbed.local.runner import run as run_local

    return run_local(
        LocalOptions(
            kubeconfig_out=args.kubeconfig_out,
            kubeopera_api_url=args.kubeopera_api_url,
            create_example=not args.no_example,
            vcluster_boot_seconds=args.vcluster_boot_seconds,
            trace=args.trace,
            sender_identity=not args.no_sender_identity,
        )
    )


def _run_cluster(args: argparse.Namespace) -> int:
    unsupported = [
        flag
        for flag, given in (
            ("--kubeopera-api-url", args.kubeopera_api_url),
            ("--trace", args.trace),
            ("--no-sender-identity", args.no_sender_identity),
        )
        if given
    ]
    if unsupported:
        print(f"local --cluster: {' and '.join(unsupported)} not supported on the cluster tier yet", file=sys.stderr)
        return 2
    from testbed.cluster.runner import ClusterRunOptions, run_cluster

    return run_cluster(
        ClusterRunOptions(
            kubeconfig_out=args.kubeconfig_out,
            create_example=not args.no_example,
            vcluster_boot_seconds=args.vcluster_boot_seconds,
        ),
        sys.stdout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.local", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
