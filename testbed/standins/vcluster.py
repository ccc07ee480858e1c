"""The vCluster stand-in: plays the part of the vcluster pod, which nothing can run here.

No kubelet and no StatefulSet controller run on the test bed, so the StatefulSet that helm
creates never starts a pod and nobody reports on it. This process does what the rest of the
system observes of a booted vCluster, for every StatefulSet labelled ``app=vcluster``:

- a configurable time after it first sees a generation of the StatefulSet's spec (a new install,
  or an upgrade that changed the pod template), it writes the StatefulSet's status as the
  StatefulSet controller and the kubelet would once that generation's pod is ready
  (``observedGeneration``, ``replicas``, ``readyReplicas``, ``updatedReplicas``, revisions);
- each boot takes the vCluster's certificates from Secret ``<release>-certs`` (keys ``ca.crt``,
  ``ca.key``, ``admin.conf``), or, when there is none, makes a new CA and a ``system:masters``
  client certificate of it, both valid for 10 years, and creates that Secret: what vcluster
  0.21.2's ``EnsureCerts`` does, whose certificate folder ``/pki`` is an emptyDir, so the Secret is
  the only copy (owned by the vCluster's Service, as ``experimental.syncSettings.setOwner`` says by
  default: helm's uninstall takes it along). A pod keeps the certificates it booted with;
  deleting the Secret changes nothing until the next boot, which then issues new ones
  (``kubeopera-tenants rotate``);
- then it writes Secret ``vc-<release>`` into the release namespace, with key ``config`` holding
  the kubeconfig vcluster 0.21 exports (plus ``certificate-authority``, ``client-certificate`` and
  ``client-key``): the server is ``exportKubeConfig.server`` from the release's values, or
  vcluster's default ``https://localhost:8443``, with that CA and client certificate. The values
  are read from helm's own record of the deployed release (Secret
  ``sh.helm.release.v1.<release>.v<revision>``: base64 of gzipped JSON);
- and its API answers through that kubeconfig (:mod:`testbed.standins.vcluster_api`): TLS with
  the real chart's certificate names (``<release>``, ``<release>.<namespace>``, ``localhost``,
  the Service's cluster IP, and ``controlPlane.proxy.extraSANs``), ``/readyz``, and the
  ``kubernetes`` and ``kube-dns`` Services. With ``--endpoints`` it also points the release's
  Service at that port with an EndpointSlice, so pods on the cluster tier reach it through real
  kube-proxy.

It refuses to boot where the real vcluster 0.21.2 does not: its syncer gives the virtual
``kubernetes`` Service the cluster IP the host gave Service ``<release>``, and the virtual API
server allocates it from the values' ``serviceCIDR``. Without one, the syncer's detection fails on
an API server of 1.33+ and falls back to 10.96.0.0/12. When the host's IP is outside that range
the real syncer crash-loops; so does this stand-in: it logs the syncer's two messages once per
generation and never reports the StatefulSet ready nor writes its Secret (its certificates are
made before that, as the real one's are). Like the real one, a
vCluster that crashed so keeps the wrong range: a later generation with the right ``serviceCIDR``
boots, but its API has no ``kubernetes`` Service and no cluster DNS.

Faults, by regular expressions on the release name: ``--never-boot`` (never comes up),
``--api-down`` (boots, writes its Secret, but its API refuses every connection) and
``--short-names`` (its certificate ignores ``controlPlane.proxy.extraSANs``, as the chart's default
certificate does). And one a test switches on and off while the vCluster runs: the annotation
``standin.kubeopera.io/control-plane: not-ready`` on its StatefulSet makes the stand-in report no
ready pod (``readyReplicas`` 0, as the StatefulSet controller reports a crash-looping pod); without
it the pod is ready again. ``standin.kubeopera.io/api: down`` makes its API refuse every connection
(as ``--api-down`` does from the start), its pod still ready; without it the API answers again.

Run: ``python -m testbed.standins.vcluster --kubeconfig PATH --boot-seconds 20 --api-port 0``.
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Self

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from shared.errors import TemporaryError, TenantError
from shared.observability import logs
from testbed.admin_kube import AdminKube
from testbed.controlplane import pki
from testbed.processes import ProcessSpec
from testbed.standins.vcluster_api import VirtualApi, VirtualApiServer

log = logging.getLogger(__name__)

DEFAULT_SERVER = "https://localhost:8443"
RELEASE_SELECTOR = "owner=helm,status=deployed"
# On a booted vCluster's StatefulSet, "not-ready" takes its control plane down until it is removed.
CONTROL_PLANE_ANNOTATION = "standin.kubeopera.io/control-plane"
# ... and "down" here makes its API refuse every connection, its pod still ready.
API_ANNOTATION = "standin.kubeopera.io/api"
SELECTOR = "app=vcluster"  # the chart's StatefulSet
TEN_YEARS = timedelta(days=3650)  # what vcluster 0.21.2 gives its CA and the exported client certificate
ADMIN_USER, ADMIN_GROUP = "kube-admin", "system:masters"
ENDPOINTS_MANAGER = "vcluster-standin.kubeopera.io"  # endpointslice.kubernetes.io/managed-by
# Secret <release>-certs: vcluster's names for the files of its certificate folder, and its labels.
CA_CERT_KEY, CA_KEY_KEY, ADMIN_CONF_KEY = "ca.crt", "ca.key", "admin.conf"
ADMIN_CONF_SERVER = "https://127.0.0.1:6443"  # the server vcluster writes into admin.conf


@dataclass(frozen=True)
class Faults:
    """Releases (regular expressions on the name; empty: none) that fail as a real vCluster can."""

    never_boot: str = ""
    api_down: str = ""
    short_names: str = ""

    def matches(self, fault: str, release: str) -> bool:
        pattern = str(getattr(self, fault))
        return bool(pattern) and re.fullmatch(pattern, release) is not None


@dataclass(frozen=True)
class Identity:
    """A vCluster's certificates: its CA and the admin credential it exports."""

    ca: pki.CertificateAuthority
    admin: pki.CertKey

    @classmethod
    def new(cls, release: str) -> Identity:
        ca = pki.new_ca(f"vcluster-ca-{release}", validity=TEN_YEARS)
        return cls(ca, ca.issue_client(ADMIN_USER, [ADMIN_GROUP], validity=TEN_YEARS))

    def to_secret_data(self) -> dict[str, bytes]:
        """The keys of Secret ``<release>-certs`` this stand-in reads back (of the real one's many)."""
        admin = kubeconfig_for(ADMIN_CONF_SERVER, self, context="kubernetes-admin")
        return {CA_CERT_KEY: self.ca.cert_pem, CA_KEY_KEY: self.ca.key_pem, ADMIN_CONF_KEY: admin}

    @classmethod
    def from_secret_data(cls, data: Mapping[str, bytes]) -> Identity:
        user = yaml.safe_load(data[ADMIN_CONF_KEY])["users"][0]["user"]
        admin = pki.CertKey(
            base64.b64decode(user["client-certificate-data"]), base64.b64decode(user["client-key-data"])
        )
        return cls(pki.CertificateAuthority(data[CA_CERT_KEY], data[CA_KEY_KEY]), admin)


def certs_secret(release: str) -> str:
    """vcluster's ``CertSecretName``: where it keeps its certificates."""
    return f"{release}-certs"


@dataclass
class _Life:
    """One StatefulSet's life (its uid): the certificates its running pod booted with, and the
    Service range its first boot kept (on its PVC)."""

    identity: Identity | None = None
    wrong_range: bool = False
    booted: set[int] = field(default_factory=set)


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


def kubeconfig_for(server: str, identity: Identity, context: str = "my-vcluster") -> bytes:
    """The kubeconfig vcluster exports: its server, its CA, the admin's client certificate, inline."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": context, "cluster": {"server": server, "certificate-authority-data": _b64(identity.ca.cert_pem)}}
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "preferences": {},
        "users": [
            {
                "name": context,
                "user": {
                    "client-certificate-data": _b64(identity.admin.cert_pem),
                    "client-key-data": _b64(identity.admin.key_pem),
                },
            }
        ],
    }
    return yaml.safe_dump(doc, sort_keys=False).encode()


def serving_names(release: str, namespace: str, values: dict[str, Any]) -> list[str]:
    """The DNS names of the real chart's serving certificate, ``controlPlane.proxy.extraSANs`` last."""
    proxy = (values.get("controlPlane") or {}).get("proxy") or {}
    extra = [str(n) for n in proxy.get("extraSANs") or []] if isinstance(proxy, dict) else []
    names = [release, f"{release}.{namespace}", "localhost"]
    return names + [n for n in extra if n not in names]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class VClusterStandIn:
    """Boots each StatefulSet generation of a vCluster ``boot_seconds`` after it first sees it."""

    def __init__(
        self,
        kube: AdminKube,
        apps: Any,
        core: Any,
        boot_seconds: float,
        poll_seconds: float = 0.5,
        faults: Faults = Faults(),
        api: VirtualApiServer | None = None,
        discovery: Any = None,
        endpoint_host: str = "",
    ) -> None:
        self._kube = kube
        self._apps = apps  # kubernetes.client.AppsV1Api: the StatefulSet controller's part
        self._core = core  # kubernetes.client.CoreV1Api: the cluster IP of the vCluster's Service
        self._discovery = discovery  # kubernetes.client.DiscoveryV1Api: EndpointSlices, with --endpoints
        self._endpoint_host = endpoint_host
        self._api = api
        self._crashed: set[tuple[str, int]] = set()  # generations whose crash was logged
        self._boot_seconds = boot_seconds
        self._faults = faults
        self._poll = poll_seconds
        # Keyed by StatefulSet uid and generation: a new generation (an upgrade) boots again, and
        # so does a release installed again under the same name (a new uid).
        self._first_seen: dict[tuple[str, int], float] = {}
        self._lives: dict[str, _Life] = {}  # by StatefulSet uid
        self._stop = threading.Event()

    @classmethod
    def connect(
        cls,
        kubeconfig: Path,
        boot_seconds: float,
        poll_seconds: float = 0.5,
        faults: Faults = Faults(),
        api: VirtualApiServer | None = None,
        endpoint_host: str = "",
    ) -> Self:
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        client = k8s.ApiClient(configuration)
        return cls(
            AdminKube.connect(kubeconfig),
            k8s.AppsV1Api(client),
            k8s.CoreV1Api(client),
            boot_seconds,
            poll_seconds,
            faults,
            api,
            k8s.DiscoveryV1Api(client) if endpoint_host else None,
            endpoint_host,
        )

    def identity(self, uid: str) -> Identity | None:
        """The CA and admin credential of the StatefulSet ``uid``'s vCluster, once it has booted."""
        life = self._lives.get(uid)
        return life.identity if life is not None else None

    def step(self, now: float | None = None) -> list[str]:
        """One poll; returns the ``vc-<release>`` Secrets written in it as ``namespace/name``."""
        moment = time.monotonic() if now is None else now
        written = []
        for sts in self._apps.list_stateful_set_for_all_namespaces(label_selector=SELECTOR).items:
            namespace, release, uid = sts.metadata.namespace, sts.metadata.name, str(sts.metadata.uid)
            generation = int(sts.metadata.generation or 0)
            key = (uid, generation)
            self._first_seen.setdefault(key, moment)
            life = self._lives.get(uid)
            if life is not None and generation in life.booted:
                self._keep_readiness(namespace, release, sts)
                continue
            if moment - self._first_seen[key] < self._boot_seconds:
                continue
            if self._faults.matches("never_boot", release):
                continue
            try:
                server = self._boot(namespace, release, sts)
            except (TenantError, ApiException) as err:  # e.g. a namespace being deleted: skip it
                log.warning("could not boot", extra={"namespace": namespace, "release": release, "error": str(err)})
                continue
            if server is None:
                continue
            self._lives[uid].booted.add(generation)
            written.append(f"{namespace}/vc-{release}")
            log.info(
                "vCluster booted",
                extra={"namespace": namespace, "release": release, "generation": generation, "server": server},
            )
        return written

    def _keep_readiness(self, namespace: str, release: str, sts: Any) -> None:
        """A booted vCluster's pod ready, or not while ``CONTROL_PLANE_ANNOTATION`` says ``not-ready``;
        its API answering, or refusing while ``API_ANNOTATION`` says ``down``."""
        annotations = sts.metadata.annotations or {}
        if self._api is not None:
            api_down = annotations.get(API_ANNOTATION) == "down" or self._faults.matches("api_down", release)
            if self._api.set_down(namespace, release, api_down):
                log.info("API down" if api_down else "API up again", extra={"namespace": namespace, "release": release})
        replicas = sts.spec.replicas if sts.spec.replicas is not None else 1
        down = annotations.get(CONTROL_PLANE_ANNOTATION) == "not-ready"
        wanted = 0 if down else replicas
        if int((sts.status.ready_replicas if sts.status else 0) or 0) == wanted:
            return
        status = {"readyReplicas": wanted, "availableReplicas": wanted}
        self._apps.patch_namespaced_stateful_set_status(release, namespace, {"status": status})
        log.info(
            "control plane down" if down else "control plane ready again",
            extra={"namespace": namespace, "release": release, "readyReplicas": wanted},
        )

    def _boot(self, namespace: str, release: str, sts: Any) -> str | None:
        """Report the generation rolled out and ready, then write ``vc-<release>`` as vcluster
        would and serve its API; return the server it names (None: helm has not recorded the
        release deployed, or the vCluster crash-loops)."""
        records = [
            name
            for ns, name, _, labels in self._kube.list_secrets_everywhere(f"{RELEASE_SELECTOR},name={release}")
            if ns == namespace
        ]
        if not records:
            return None
        record = self._kube.read_secret_key(namespace, sorted(records, key=_revision)[-1], "release")
        if record is None:
            return None
        values = release_values(record)
        service = self._core.read_namespaced_service(release, namespace)
        host_ip = str(service.spec.cluster_ip)
        uid = str(sts.metadata.uid)
        life = self._lives.setdefault(uid, _Life())
        life.identity = self._certificates(namespace, release, service, values)
        refusal = boot_refusal(values, host_ip)
        if refusal:
            life.wrong_range = True  # the first boot's range is on the PVC from now on
            key = (uid, int(sts.metadata.generation or 0))
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
        self._serve(namespace, release, values, host_ip, life)
        server = exported_server(values)
        identity = life.identity
        assert identity is not None
        data = {
            "config": kubeconfig_for(server, identity),
            "certificate-authority": identity.ca.cert_pem,
            "client-certificate": identity.admin.cert_pem,
            "client-key": identity.admin.key_pem,
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

    def _certificates(self, namespace: str, release: str, service: Any, values: dict[str, Any]) -> Identity:
        """What a booting pod's ``EnsureCerts`` ends with: the certificates of Secret
        ``<release>-certs``, or new ones, stored there first (the pod's /pki is an emptyDir). With
        ``experimental.syncSettings.setOwner`` (true by default) the Secret is owned by the
        vCluster's Service, so it goes when helm uninstalls the release."""
        name = certs_secret(release)
        stored = self._kube.get_secret(namespace, name)
        if stored is not None:
            return Identity.from_secret_data(stored.data)
        identity = Identity.new(release)
        sync = ((values.get("experimental") or {}).get("syncSettings") or {}) if isinstance(values, dict) else {}
        owners = []
        if sync.get("setOwner", True):
            owners = [k8s.V1OwnerReference(api_version="v1", kind="Service", name=release, uid=service.metadata.uid)]
        body = k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(
                name=name,
                namespace=namespace,
                labels={"app": "vcluster", "vcluster-name": release},
                owner_references=owners or None,
            ),
            type="Opaque",
            data={k: base64.b64encode(v).decode() for k, v in identity.to_secret_data().items()},
        )
        self._core.create_namespaced_secret(namespace, body)
        log.info("certificates made", extra={"namespace": namespace, "secret": name})
        return identity

    def _serve(self, namespace: str, release: str, values: dict[str, Any], host_ip: str, life: _Life) -> None:
        """Publish the vCluster's API (and, on the cluster tier, point its Service at it)."""
        if self._api is None or life.identity is None:
            return
        names = serving_names(release, namespace, {} if self._faults.matches("short_names", release) else values)
        serving = life.identity.ca.issue_serving(names, [host_ip, "127.0.0.1"], validity=TEN_YEARS)
        self._api.publish(
            VirtualApi(
                namespace=namespace,
                release=release,
                names=tuple(names),
                ca=life.identity.ca,
                serving=serving,
                kubernetes_ip=None if life.wrong_range else host_ip,
                down=self._faults.matches("api_down", release),
            )
        )
        if self._discovery is not None:
            self._point_service(namespace, release)

    def _point_service(self, namespace: str, release: str) -> None:
        """An EndpointSlice of Service ``release`` (port ``https``) at this process's API port."""
        assert self._api is not None
        name = f"{release}-standin"
        body = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    "kubernetes.io/service-name": release,
                    "endpointslice.kubernetes.io/managed-by": ENDPOINTS_MANAGER,
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self._endpoint_host], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": self._api.port, "protocol": "TCP"}],
        }
        try:
            self._discovery.create_namespaced_endpoint_slice(namespace, body)
        except ApiException as err:
            if err.status != 409:
                raise
            self._discovery.replace_namespaced_endpoint_slice(name, namespace, body)

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except (TemporaryError, ApiException, OSError) as err:
                log.warning("poll failed; trying again", extra={"error": str(err)})
            self._stop.wait(self._poll)

    def stop(self) -> None:
        self._stop.set()


def process_spec(
    kubeconfig: Path,
    boot_seconds: float,
    faults: Faults = Faults(),
    api_port: int = 0,
    api_host: str = "127.0.0.1",
    endpoints: bool = False,
) -> ProcessSpec:
    """This stand-in as a process of the test bed (``python -m testbed.standins.vcluster``); its
    vClusters' API on ``api_host:api_port`` (0: none served)."""
    argv = [
        sys.executable,
        "-m",
        "testbed.standins.vcluster",
        "--kubeconfig",
        str(kubeconfig),
        "--boot-seconds",
        str(boot_seconds),
        "--never-boot",
        faults.never_boot,
        "--api-down",
        faults.api_down,
        "--short-names",
        faults.short_names,
    ]
    if api_port:
        argv += ["--api-host", api_host, "--api-port", str(api_port)]
    if endpoints:
        argv.append("--endpoints")
    return ProcessSpec(name="vcluster-standin", argv=tuple(argv))


def _revision(record_name: str) -> int:
    """sh.helm.release.v1.<release>.v<N> -> N"""
    return int(record_name.rsplit(".v", 1)[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--boot-seconds", type=float, default=5.0)
    parser.add_argument("--poll-seconds", type=float, default=0.5)
    parser.add_argument("--never-boot", default="", help="regular expression: releases it matches never boot")
    parser.add_argument("--api-down", default="", help="regular expression: releases whose API refuses connections")
    parser.add_argument("--short-names", default="", help="regular expression: certificates without the extraSANs")
    parser.add_argument("--api-host", default="127.0.0.1", help="where the vClusters' API listens")
    parser.add_argument("--api-port", type=int, default=0, help="the vClusters' API port (0: no API served)")
    parser.add_argument("--endpoints", action="store_true", help="point each vCluster's Service at the API port")
    args = parser.parse_args(argv)
    logs.configure("INFO", component="vcluster-standin")
    api = VirtualApiServer(args.api_host, args.api_port).start() if args.api_port else None
    standin = VClusterStandIn.connect(
        args.kubeconfig,
        args.boot_seconds,
        args.poll_seconds,
        Faults(args.never_boot, args.api_down, args.short_names),
        api,
        args.api_host if args.endpoints else "",
    )
    signal.signal(signal.SIGTERM, lambda *_: standin.stop())
    signal.signal(signal.SIGINT, lambda *_: standin.stop())
    log.info("vCluster stand-in running", extra={"boot_seconds": args.boot_seconds, "api_port": args.api_port})
    try:
        standin.run()
    finally:
        if api is not None:
            api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
