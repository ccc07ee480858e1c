"""Knative Eventing's six upstream binaries as host processes: for each, the binary the toolchain
built, the environment its pod would have, and how to tell it is ready; and the ports they take.

The in-memory channel dispatcher listens on ``:8080`` and ``:8443``, hard-coded, on every
interface; the other processes also try ``:8080`` for their health probes and only log the
failure. ``NO_PROXY`` keeps the API server (127.0.0.1) off the service proxy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from testbed.knative.names import KO, SYSTEM_NAMESPACE
from testbed.processes import HttpProbe, LogProbe, Probe

DISPATCHER_PORTS = (8080, 8443)  # hard-coded in the in-memory channel dispatcher

# Data-plane processes: what a Broker restart restarts.
DATA_PLANE = ("imc-dispatcher", "mt-broker-ingress", "mt-broker-filter")


@dataclass(frozen=True)
class Ports:
    ingress: int
    ingress_tls: int
    filter: int
    filter_tls: int
    imc_webhook: int


@dataclass(frozen=True)
class KnativeProcess:
    """One upstream binary as a host process: its name, binary and the environment of its pod."""

    name: str
    binary: str
    env: Mapping[str, str]
    probe: Probe


def pod_environment(kubeconfig: Path, proxy_url: str, ca_file: Path | None = None) -> dict[str, str]:
    """What every Knative pod gets: its namespace, config map names, the cluster's DNS (the proxy);
    with ``ca_file``, the test bed's CA as the trusted roots (``SSL_CERT_FILE``), which Knative's
    OIDC token verifier needs to fetch the issuer's keys from the API server (:mod:`.oidc`)."""
    env = {
        "KUBECONFIG": str(kubeconfig),
        "SYSTEM_NAMESPACE": SYSTEM_NAMESPACE,
        "CONFIG_LOGGING_NAME": "config-logging",
        "CONFIG_OBSERVABILITY_NAME": "config-observability",
        "HTTP_PROXY": proxy_url,
        "http_proxy": proxy_url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    if ca_file is not None:
        env["SSL_CERT_FILE"] = str(ca_file)
    return env


def process_table(ports: Ports) -> list[KnativeProcess]:
    """The six processes in start order, dispatcher first (it takes the fixed ports)."""
    image = KO.__add__
    return [
        KnativeProcess(
            "imc-dispatcher",
            "in_memory_channel_dispatcher",
            {
                "CONTAINER_NAME": "dispatcher",
                "METRICS_DOMAIN": "knative.dev/inmemorychannel-dispatcher",
                "MAX_IDLE_CONNS": "1000",
                "MAX_IDLE_CONNS_PER_HOST": "1000",
            },
            _health(DISPATCHER_PORTS[0]),
        ),
        KnativeProcess(
            "eventing-controller",
            "controller",
            {
                "METRICS_DOMAIN": "knative.dev/eventing",
                "APISERVER_RA_IMAGE": image("apiserver_receive_adapter"),
                "AUTH_PROXY_IMAGE": image("auth_proxy"),
            },
            LogProbe.matching("Starting controllers"),
        ),
        KnativeProcess(
            "mt-broker-controller",
            "mtchannel_broker",
            {"METRICS_DOMAIN": "knative.dev/eventing"},
            LogProbe.matching("Starting controllers"),
        ),
        KnativeProcess(
            "imc-controller",
            "in_memory_channel_controller",
            {
                "METRICS_DOMAIN": "knative.dev/inmemorychannel-controller",
                "WEBHOOK_NAME": "inmemorychannel-webhook",
                "WEBHOOK_PORT": str(ports.imc_webhook),
                "DISPATCHER_IMAGE": image("in_memory/channel_dispatcher"),
            },
            LogProbe.matching("Starting controllers"),
        ),
        KnativeProcess(
            "mt-broker-ingress",
            "broker_ingress",
            {
                "CONTAINER_NAME": "ingress",
                "NAMESPACE": SYSTEM_NAMESPACE,
                "METRICS_DOMAIN": "knative.dev/internal/eventing",
                "INGRESS_PORT": str(ports.ingress),
                "INGRESS_PORT_HTTPS": str(ports.ingress_tls),
            },
            _health(ports.ingress),
        ),
        KnativeProcess(
            "mt-broker-filter",
            "broker_filter",
            {
                "CONTAINER_NAME": "filter",
                "NAMESPACE": SYSTEM_NAMESPACE,
                "METRICS_DOMAIN": "knative.dev/internal/eventing",
                "FILTER_PORT": str(ports.filter),
                "FILTER_PORT_HTTPS": str(ports.filter_tls),
            },
            _health(ports.filter),
        ),
    ]


def _health(port: int) -> HttpProbe:
    # Knative's receivers answer a kubelet's probe (its User-Agent) on any path.
    return HttpProbe(
        f"http://127.0.0.1:{port}/healthz", headers={"User-Agent": "kube-probe/1.34"}, ok_statuses=frozenset({200, 204})
    )
