"""What proving Ready costs: check-ready's probe of a vCluster's API through the stored kubeconfig.

check-ready asks a booted vCluster three questions over TLS with its own CA and client certificate
(``shared.adapters.vcluster_api``): ``/readyz``, Service ``default/kubernetes``, Service
``kube-system/kube-dns``. This times ``VClusterApi().missing()`` against the vCluster stand-in's API
(``testbed.standins.vcluster_api``), reached as on the fast tier through the service proxy's
CONNECT tunnel, for vClusters with a CA and certificates each: the share of the Secret-written to
Ready time that the proof adds, once per poll that finds the vCluster booted. resync makes the
same probe of every Ready Tenant on each pass, so a second table splits the probe's client CPU
(this thread's; the stand-ins run on threads of their own) into its parts: reading the
kubeconfig, building its TLS context, and the connection with its handshake and three GETs.

``python -m bench readiness [--vclusters 20] [--probes 200]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from unittest import mock

from shared.adapters.vcluster_api import VClusterApi, read_kubeconfig, tls_context
from testbed.standins.service_proxy import ServiceProxy
from testbed.standins.vcluster import Identity, kubeconfig_for, serving_names
from testbed.standins.vcluster_api import VirtualApi, VirtualApiServer

from .report import Table, ms, percentile, table


def _fine(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def main(argv: Sequence[str]) -> list[Table]:
    parser = argparse.ArgumentParser(prog="python -m bench readiness", description=__doc__.splitlines()[0])
    parser.add_argument("--vclusters", type=int, default=20)
    parser.add_argument("--probes", type=int, default=200)
    args = parser.parse_args(argv)

    server = VirtualApiServer().start()
    proxy = ServiceProxy()
    proxy.start()
    proxy.tunnels.add_suffix(".svc", server.port)
    cluster_network = mock.patch.dict(os.environ, {"HTTPS_PROXY": proxy.url, "NO_PROXY": "127.0.0.1,localhost"})
    cluster_network.start()
    try:
        configs = []
        for n in range(args.vclusters):
            release, namespace = f"vc-t{n}", f"vcluster-t{n}"
            svc = f"{release}.{namespace}.svc"
            identity = Identity.new(release)
            names = serving_names(release, namespace, {"controlPlane": {"proxy": {"extraSANs": [svc]}}})
            serving = identity.ca.issue_serving(names, ["10.0.0.10"])
            server.publish(VirtualApi(namespace, release, tuple(names), identity.ca, serving, "10.0.0.10"))
            configs.append(kubeconfig_for(f"https://{svc}:443", identity))
        api = VClusterApi()
        for config in configs:  # warm: the first probe of a process pays its imports
            assert api.missing(config) is None
        samples, cpu = [], []
        for i in range(args.probes):
            began, began_cpu = time.perf_counter(), time.thread_time()
            missing = api.missing(configs[i % len(configs)])
            samples.append(time.perf_counter() - began)
            cpu.append(time.thread_time() - began_cpu)
            assert missing is None, missing
        parse, context = [], []
        for i in range(args.probes):
            config = configs[i % len(configs)]
            began_cpu = time.thread_time()
            credentials = read_kubeconfig.__wrapped__(config)  # as on a pass: the cache holds 32 of a fleet
            parse.append(time.thread_time() - began_cpu)
            began_cpu = time.thread_time()
            tls_context(credentials)
            context.append(time.thread_time() - began_cpu)
    finally:
        cluster_network.stop()
        proxy.stop()
        server.stop()
    rows = [
        ("p50", ms(percentile(samples, 50))),
        ("p95", ms(percentile(samples, 95))),
        ("max", ms(max(samples))),
    ]
    whole, parsed, built = (statistics.median(x) for x in (cpu, parse, context))
    parts = [
        ("read the kubeconfig (YAML, base64)", _fine(parsed)),
        ("its TLS context (the CA, the key pair through a memfd)", _fine(built)),
        ("connection, TLS handshake, three GETs (the rest)", _fine(whole - parsed - built)),
        ("the whole probe", _fine(whole)),
    ]
    return [
        table(
            f"Ready's proof: one probe (3 GETs over a new TLS connection) of {args.vclusters} vClusters, "
            f"{args.probes} probes, ms",
            ("percentile", "ms"),
            rows,
            (
                "Each probe builds its TLS context in memory (the kubeconfig's CA; its key pair through a memfd), "
                "opens one TLS connection through the service proxy's CONNECT tunnel, and asks /readyz and the "
                "two Services.",
                "It is added once per check-ready poll that finds the vCluster booted; the poll interval "
                "(READY_POLL_SECONDS, 0-15 s of waiting) is unchanged.",
            ),
        ),
        table(
            "Ready's proof: the client's CPU per probe, by part (medians, ms)",
            ("part", "CPU ms"),
            parts,
            (
                "time.thread_time() of the thread that probes; the vCluster API stand-in and the service proxy "
                "run on threads of their own and are not in it. The parts are timed apart from the whole probe "
                "(a kubeconfig read without its cache, a context built and dropped).",
                "The stand-in's certificates are EC P-256 (testbed.controlplane.pki).",
            ),
        ),
    ]
