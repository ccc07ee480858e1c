"""What proving Ready costs: check-ready's probe of a vCluster's API through the stored kubeconfig.

check-ready asks a booted vCluster three questions over TLS with its own CA and client certificate
(``shared.adapters.vcluster_api``): ``/readyz``, Service ``default/kubernetes``, Service
``kube-system/kube-dns``. This times ``VClusterApi().missing()`` against the vCluster stand-in's API
(``testbed.standins.vcluster_api``), reached as on the fast tier through the service proxy's
CONNECT tunnel, for vClusters with a CA and certificates each: the share of the Secret-written to
Ready time that the proof adds, once per poll that finds the vCluster booted.

``python -m bench readiness [--vclusters 20] [--probes 200]``
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

from shared.adapters.vcluster_api import VClusterApi
from testbed.standins.service_proxy import ServiceProxy
from testbed.standins.vcluster import Identity, kubeconfig_for, serving_names
from testbed.standins.vcluster_api import VirtualApi, VirtualApiServer

from .report import Table, ms, percentile, table


def main(argv: Sequence[str]) -> list[Table]:
    parser = argparse.ArgumentParser(prog="python -m bench readiness", description=__doc__.splitlines()[0])
    parser.add_argument("--vclusters", type=int, default=20)
    parser.add_argument("--probes", type=int, default=200)
    args = parser.parse_args(argv)

    server = VirtualApiServer().start()
    proxy = ServiceProxy()
    proxy.start()
    proxy.tunnels.add_suffix(".svc", server.port)
    saved = {k: os.environ.get(k) for k in ("HTTPS_PROXY", "NO_PROXY")}
    os.environ["HTTPS_PROXY"], os.environ["NO_PROXY"] = proxy.url, "127.0.0.1,localhost"
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
        samples = []
        for i in range(args.probes):
            began = time.perf_counter()
            missing = api.missing(configs[i % len(configs)])
            samples.append(time.perf_counter() - began)
            assert missing is None, missing
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        proxy.stop()
        server.stop()
    rows = [
        ("p50", ms(percentile(samples, 50))),
        ("p95", ms(percentile(samples, 95))),
        ("max", ms(max(samples))),
    ]
    return [
        table(
            f"Ready's proof: one probe (3 GETs over a new TLS connection) of {args.vclusters} vClusters, "
            f"{args.probes} probes, ms",
            ("percentile", "ms"),
            rows,
            (
                "Each probe writes the kubeconfig's CA and key to a private temporary folder, opens one TLS "
                "connection through the service proxy's CONNECT tunnel, and asks /readyz and the two Services.",
                "It is added once per check-ready poll that finds the vCluster booted; the poll interval "
                "(READY_POLL_SECONDS, 0-15 s of waiting) is unchanged.",
            ),
        )
    ]
