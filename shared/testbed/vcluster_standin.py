"""The vCluster stand-in: plays the part of the vcluster pod, which nothing can run here.

No kubelet runs on the test bed, so the StatefulSet that helm creates never starts a pod. This
process does the one thing the rest of the system observes of a booted vCluster: a configurable
time after a release first shows up as ``deployed`` it writes Secret ``vc-<release>`` into the
release namespace, with key ``config`` holding a well-formed kubeconfig, as vcluster 0.21 does
(plus ``certificate-authority``, ``client-certificate`` and ``client-key``). The kubeconfig's
server is ``exportKubeConfig.server`` from the release's values, or vcluster's default
``https://localhost:8443``; the values are read from helm's own release record (Secret
``sh.helm.release.v1.<release>.v<revision>``: base64 of gzipped JSON).

Run: ``python -m shared.testbed.vcluster_standin --kubeconfig PATH --boot-seconds 20`` (and
``--never-boot REGEX`` for releases that must never come up, the fault of a vCluster that does
not boot).
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import logging
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from shared import logs
from shared.errors import TemporaryError, TenantError
from shared.kube import Kube

log = logging.getLogger(__name__)

DEFAULT_SERVER = "https://localhost:8443"
RELEASE_SELECTOR = "owner=helm,status=deployed"
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
    """Watches deployed helm releases and 'boots' each one after ``boot_seconds``."""

    def __init__(self, kube: Kube, boot_seconds: float, poll_seconds: float = 0.5, never_boot: str = "") -> None:
        self._kube = kube
        self._boot_seconds = boot_seconds
        # Releases whose name matches never boot: the fault "the vCluster never comes up".
        self._never_boot = re.compile(never_boot) if never_boot else None
        self._poll = poll_seconds
        # Keyed by the uid of helm's release record, so a release installed again under the same
        # name (a Tenant deleted and re-created) boots again, after its own boot delay.
        self._first_seen: dict[str, float] = {}
        self._booted: set[str] = set()
        self._stop = threading.Event()

    def step(self, now: float | None = None) -> list[str]:
        """One poll; returns the Secrets written in it as ``namespace/name``."""
        moment = time.monotonic() if now is None else now
        written = []
        for namespace, secret_name, uid, labels in self._kube.list_secrets(RELEASE_SELECTOR):
            release = labels.get("name", "")
            if not release.startswith("vc-") or (self._never_boot and self._never_boot.fullmatch(release)):
                continue
            self._first_seen.setdefault(uid, moment)
            if moment - self._first_seen[uid] < self._boot_seconds or uid in self._booted:
                continue
            try:
                server = self._boot(namespace, release, secret_name)
            except TenantError as err:  # e.g. a namespace being deleted: skip it, keep the others
                log.warning("could not boot", extra={"namespace": namespace, "release": release, "error": str(err)})
                continue
            if server is None:
                continue
            self._booted.add(uid)
            written.append(f"{namespace}/vc-{release}")
            log.info("vCluster booted", extra={"namespace": namespace, "release": release, "server": server})
        return written

    def _boot(self, namespace: str, release: str, secret_name: str) -> str | None:
        """Write ``vc-<release>`` as vcluster would; return the server it names."""
        record = self._kube.read_secret_key(namespace, secret_name, "release")
        if record is None:
            return None
        server = exported_server(release_values(record))
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
            except TemporaryError as err:
                log.warning("poll failed; trying again", extra={"error": str(err)})
            self._stop.wait(self._poll)

    def stop(self) -> None:
        self._stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--boot-seconds", type=float, default=5.0)
    parser.add_argument("--poll-seconds", type=float, default=0.5)
    parser.add_argument("--never-boot", default="", help="regular expression: releases it matches never boot")
    args = parser.parse_args(argv)
    logs.configure("INFO", component="vcluster-standin")
    standin = VClusterStandIn(Kube.connect(args.kubeconfig), args.boot_seconds, args.poll_seconds, args.never_boot)
    signal.signal(signal.SIGTERM, lambda *_: standin.stop())
    signal.signal(signal.SIGINT, lambda *_: standin.stop())
    log.info("vCluster stand-in running", extra={"boot_seconds": args.boot_seconds})
    standin.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
