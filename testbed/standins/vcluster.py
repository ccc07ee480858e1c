"""The vCluster stand-in: plays the part of the vcluster pod, which nothing can run here.

No kubelet and no StatefulSet controller run on the test bed, so the StatefulSet that helm
creates never starts a pod and nobody reports on it. This process does what the rest of the
system observes of a booted vCluster, for every StatefulSet labelled ``app=vcluster``:

- a configurable time after it first sees a generation of the StatefulSet's spec (a new install,
  or an upgrade that changed the pod template), it writes the StatefulSet's status as the
  StatefulSet controller and the kubelet would once that generation's pod is ready
  (``observedGeneration``, ``replicas``, ``readyReplicas``, ``updatedReplicas``, revisions);
- then it writes Secret ``vc-<release>`` into the release namespace, with key ``config`` holding
  a well-formed kubeconfig, as vcluster 0.21 does (plus ``certificate-authority``,
  ``client-certificate`` and ``client-key``). The kubeconfig's server is
  ``exportKubeConfig.server`` from the release's values, or vcluster's default
  ``https://localhost:8443``; the values are read from helm's own record of the deployed release
  (Secret ``sh.helm.release.v1.<release>.v<revision>``: base64 of gzipped JSON).

It refuses to boot where the real vcluster 0.21.2 does not: its syncer gives the virtual
``kubernetes`` Service the cluster IP the host gave Service ``<release>``, and the virtual API
server allocates it from the values' ``serviceCIDR``. Without one, the syncer's detection fails on
an API server of 1.33+ and falls back to 10.96.0.0/12. When the host's IP is outside that range
the real syncer crash-loops; so does this stand-in: it logs the syncer's two messages once per
generation and never reports the StatefulSet ready nor writes its Secret.

Run: ``python -m testbed.standins.vcluster --kubeconfig PATH --boot-seconds 20`` (and
``--never-boot REGEX`` for releases that must never come up, the fault of a vCluster that does
not boot).
"""

from __future__ import annotations

import argparse
import base64
import gzip
import ipaddress
import json
import logging
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Self

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from shared import logs
from shared.errors import TemporaryError, TenantError
from shared.kube import Kube
from testbed.processes import ProcessSpec

log = logging.getLogger(__name__)

DEFAULT_SERVER = "https://localhost:8443"
RELEASE_SELECTOR = "owner=helm,status=deployed"
SELECTOR = "app=vcluster"  # the chart's StatefulSet
_FAKE_PEM = "-----BEGIN CERTIFICATE-----\nc3RhbmQtaW4gY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
_FAKE_KEY = "-----BEGIN PRIVATE KEY-----\nc3RhbmQtaW4ga2V5\n-----END PRIVATE KEY-----\n"


def release_values(record: bytes) -> dict[str, Any]:
    """The user-supplied values inside helm's release record (the Secret's ``release`` key)."""
    release = json.loads(gzip.decompress(base64.b64decode(record)))
    config = release.get("config") or {}
    return dict(config) if isinstance(config, dict) else {}


def exported_server(values: dict[str, Any]) -> str:
    export = values.get("exportKubeConfig") or {}
    server = export.get("server") if isinstance(export, dict) else None
    return str(server) if server else DEFAULT_SERVER


# What vcluster 0.21.2 falls back to when it cannot detect the host's Service range.
FALLBACK_SERVICE_CIDR = "10.96.0.0/12"


def boot_refusal(values: dict[str, Any], host_ip: str) -> list[str]:
    """What the real syncer logs before it crash-loops with these values, given the cluster IP the
    host gave the vCluster's Service; empty when it would boot."""
    given = str(values.get("serviceCIDR") or "")
    lines = []
    if not given:
        lines.append(
            f"failed to detect service CIDR, will fallback to {FALLBACK_SERVICE_CIDR}, however this is probably "
            "wrong, please make sure the host cluster service cidr and virtual cluster service cidr match"
        )
    ranges = [ipaddress.ip_network(c.strip(), strict=False) for c in (given or FALLBACK_SERVICE_CIDR).split(",")]
    address = ipaddress.ip_address(host_ip)
    if not any(address.version == r.version and address in r for r in ranges):
        lines.append(
            f'sync kubernetes service: Service "kubernetes" is invalid: spec.clusterIPs: Invalid value: ["{host_ip}"]: '
            f"failed to allocate IP {host_ip}: the provided network does not match the current range"
        )
        return lines
    return []


def kubeconfig_for(server: str, context: str = "my-vcluster") -> bytes:
    """A kubeconfig shaped like the one vcluster exports (credentials are placeholders)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server, "certificate-authority-data": _b64(_FAKE_PEM)}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "preferences": {},
        "users": [
            {"name": context, "user": {"client-certificate-data": _b64(_FAKE_PEM), "client-key-data": _b64(_FAKE_KEY)}}
        ],
    }
    return yaml.safe_dump(doc, sort_keys=False).encode()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class VClusterStandIn:
    """Boots each StatefulSet generation of a vCluster ``boot_seconds`` after it first sees it."""

    def __init__(
        self, kube: Kube, apps: Any, core: Any, boot_seconds: float, poll_seconds: float = 0.5, never_boot: str = ""
    ) -> None:
        self._kube = kube
        self._apps = apps  # kubernetes.client.AppsV1Api: the StatefulSet controller's part
        self._core = core  # kubernetes.client.CoreV1Api: the cluster IP of the vCluster's Service
        self._crashed: set[tuple[str, int]] = set()  # generations whose crash was logged
        self._boot_seconds = boot_seconds
        # Releases whose name matches never boot: the fault "the vCluster never comes up".
        self._never_boot = re.compile(never_boot) if never_boot else None
        self._poll = poll_seconds
        # Keyed by StatefulSet uid and generation: a new generation (an upgrade) boots again, and
        # so does a release installed again under the same name (a new uid).
        self._first_seen: dict[tuple[str, int], float] = {}
        self._booted: set[tuple[str, int]] = set()
        self._stop = threading.Event()

    @classmethod
    def connect(cls, kubeconfig: Path, boot_seconds: float, poll_seconds: float = 0.5, never_boot: str = "") -> Self:
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        client = k8s.ApiClient(configuration)
        return cls(
            Kube.connect(kubeconfig),
            k8s.AppsV1Api(client),
            k8s.CoreV1Api(client),
            boot_seconds,
            poll_seconds,
            never_boot,
        )

    def step(self, now: float | None = None) -> list[str]:
        """One poll; returns the ``vc-<release>`` Secrets written in it as ``namespace/name``."""
        moment = time.monotonic() if now is None else now
        written = []
        for sts in self._apps.list_stateful_set_for_all_namespaces(label_selector=SELECTOR).items:
            namespace, release = sts.metadata.namespace, sts.metadata.name
            key = (sts.metadata.uid, int(sts.metadata.generation or 0))
            self._first_seen.setdefault(key, moment)
            if key in self._booted or moment - self._first_seen[key] < self._boot_seconds:
                continue
            if self._never_boot and self._never_boot.fullmatch(release):
                continue
            try:
                server = self._boot(namespace, release, sts)
            except (TenantError, ApiException) as err:  # e.g. a namespace being deleted: skip it
                log.warning("could not boot", extra={"namespace": namespace, "release": release, "error": str(err)})
                continue
            if server is None:
                continue
            self._booted.add(key)
            written.append(f"{namespace}/vc-{release}")
            log.info(
                "vCluster booted",
                extra={"namespace": namespace, "release": release, "generation": key[1], "server": server},
            )
        return written

    def _boot(self, namespace: str, release: str, sts: Any) -> str | None:
        """Report the generation rolled out and ready, then write ``vc-<release>`` as vcluster
        would; return the server it names (None: helm has not recorded the release deployed)."""
        records = [
            name
            for ns, name, _, labels in self._kube.list_secrets(f"{RELEASE_SELECTOR},name={release}")
            if ns == namespace
        ]
        if not records:
            return None
        record = self._kube.read_secret_key(namespace, sorted(records, key=_revision)[-1], "release")
        if record is None:
            return None
        values = release_values(record)
        service = self._core.read_namespaced_service(release, namespace)
        refusal = boot_refusal(values, str(service.spec.cluster_ip))
        if refusal:
            key = (str(sts.metadata.uid), int(sts.metadata.generation or 0))
            if key not in self._crashed:
                self._crashed.add(key)
                for line in refusal:
                    log.error(line, extra={"namespace": namespace, "release": release, "generation": key[1]})
            return None
        replicas = sts.spec.replicas if sts.spec.replicas is not None else 1
        revision = f"{release}-{sts.metadata.generation}"
        status = {
            "observedGeneration": sts.metadata.generation,
            "replicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "updatedReplicas": replicas,
            "currentReplicas": replicas,
            "currentRevision": revision,
            "updateRevision": revision,
        }
        self._apps.patch_namespaced_stateful_set_status(release, namespace, {"status": status})
        server = exported_server(values)
        data = {
            "config": kubeconfig_for(server),
            "certificate-authority": _FAKE_PEM.encode(),
            "client-certificate": _FAKE_PEM.encode(),
            "client-key": _FAKE_KEY.encode(),
        }
        current = self._kube.get_secret(namespace, f"vc-{release}")
        if current is None or current.data != data:
            self._kube.write_secret(
                namespace,
                f"vc-{release}",
                data,
                {"app": "vcluster", "release": release, "vcluster.loft.sh/managed-by": release},
                None if current is None else current.resource_version,
            )
        return server

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except (TemporaryError, ApiException, OSError) as err:
                log.warning("poll failed; trying again", extra={"error": str(err)})
            self._stop.wait(self._poll)

    def stop(self) -> None:
        self._stop.set()


def process_spec(kubeconfig: Path, boot_seconds: float, never_boot: str = "") -> ProcessSpec:
    """This stand-in as a process of the test bed (``python -m testbed.standins.vcluster``)."""
    return ProcessSpec(
        name="vcluster-standin",
        argv=(
            sys.executable,
            "-m",
            "testbed.standins.vcluster",
            "--kubeconfig",
            str(kubeconfig),
            "--boot-seconds",
            str(boot_seconds),
            "--never-boot",
            never_boot,
        ),
    )


def _revision(record_name: str) -> int:
    """sh.helm.release.v1.<release>.v<N> -> N"""
    return int(record_name.rsplit(".v", 1)[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--boot-seconds", type=float, default=5.0)
    parser.add_argument("--poll-seconds", type=float, default=0.5)
    parser.add_argument("--never-boot", default="", help="regular expression: releases it matches never boot")
    args = parser.parse_args(argv)
    logs.configure("INFO", component="vcluster-standin")
    standin = VClusterStandIn.connect(args.kubeconfig, args.boot_seconds, args.poll_seconds, args.never_boot)
    signal.signal(signal.SIGTERM, lambda *_: standin.stop())
    signal.signal(signal.SIGINT, lambda *_: standin.stop())
    log.info("vCluster stand-in running", extra={"boot_seconds": args.boot_seconds})
    standin.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
