"""What a function works with: its settings and its clients, built once per process.

Two ways to build a ``Runtime``, and only two:

- ``Runtime.from_env(function)``: what ``functions.<name>.create_app()`` does when gunicorn
  calls it with no argument. Settings come from the environment (a bad one fails the process
  start with ``ConfigError`` instead of failing requests later), logs are set up, and the
  Kubernetes client uses the pod's credentials (or ``$KUBECONFIG``); tracing is set up when
  the ``OTEL_*`` variables ask for it (``shared.observability.tracing``).
- ``Runtime(settings=..., kube=..., helm=..., ...)``: the parts as given, with no environment
  read and no connection made; the unit tests pass ``create_app`` one made of in-memory stand-ins.

The clients only some functions use (helm, kubeopera-api, the broker's sink, a vCluster's own API)
are optional parts: a function asks for one with ``helm_client()``, ``kubeopera_api_client()``,
``sink_client()`` or ``vcluster_api_client()``,
which returns the given part or makes it from the settings. So a function that never asks for
helm never starts a helm process, nor imports pyhelm3 (and pydantic): store-kubeconfig,
notify-api, dead-letter and resync start faster and hold less memory. Each function asks
once, in ``create_app``, and its threads share the clients.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from shared.adapters.kube import Kube
from shared.adapters.kubeopera_api import CallbackResult, CloudSpaceUpdate, KubeoperaApi
from shared.adapters.release import RecordSource, ReleaseRecords, Releases
from shared.adapters.vcluster_api import VClusterApi, VClusterProbe
from shared.delivery.senders import Review, SenderCheck, SenderPolicy
from shared.delivery.sink import Sink
from shared.errors import PermanentError, TemporaryError
from shared.model.cluster import OwnedNamespace, Rollout, StoredSecret, Volume
from shared.model.isolation import PolicyObject
from shared.model.release import ReleaseState
from shared.model.tenant import Tenant, TenantRef
from shared.model.vcluster_watch import Change, Key, Seen
from shared.observability import logs, tracing
from shared.settings import Settings
from shared.steps.access import AccessApi
from shared.steps.claims import ClaimSource
from shared.steps.locks import Leases
from shared.steps.plans import ChartSource
from shared.steps.reconcile import TenantStore, mark_failed
from shared.steps.rollout import RolloutKube
from shared.steps.rotation import RotationKube

if TYPE_CHECKING:  # imported by helm_client: a function that never asks for helm never loads pyhelm3
    from cloudevents.core.base import BaseCloudEvent

    from shared.adapters.helm import Guard, Keep


class Cluster(AccessApi, ClaimSource, Leases, RecordSource, RolloutKube, RotationKube, TenantStore, Protocol):
    """Every call a function makes through the Kubernetes adapter (``shared.adapters.kube.Kube``):
    what the steps' building blocks need (their own protocols), and the functions' own calls. The
    unit tests' ``FakeKube`` is checked against it (mypy over ``tests/unit/fakes.py``)."""

    def set_finalizer(self, tenant: Tenant, present: bool) -> Tenant: ...
    def tenant_pages(self, namespace: str) -> Iterator[list[Tenant]]: ...
    def list_owned_namespaces(self) -> list[OwnedNamespace]: ...
    def create_namespace(self, name: str, labels: Mapping[str, str]) -> bool: ...
    def delete_namespace(self, name: str) -> None: ...
    def get_rollout(self, namespace: str, name: str) -> Rollout | None: ...
    def list_rollouts(self, label_selector: str) -> dict[tuple[str, str], Rollout]: ...
    def list_seen(self, label_selector: str) -> tuple[dict[Key, Seen], str]: ...
    def watch_seen(self, label_selector: str, resource_version: str, timeout_seconds: int) -> Iterator[Change]: ...
    def iter_secrets(
        self, namespace: str, label_selector: str, keys: Collection[str]
    ) -> Iterator[tuple[str, StoredSecret]]: ...
    def iter_policy_objects(self, namespace: str | None = None) -> Iterator[tuple[str, PolicyObject]]: ...
    def volumes_claimed_in(self, namespace: str) -> list[Volume]: ...
    def delete_volume(self, name: str, resource_version: str) -> None: ...
    def service_cidrs(self) -> list[tuple[str, list[str]]] | None: ...
    def write_secret(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, bytes],
        labels: Mapping[str, str],
        resource_version: str | None,
    ) -> None: ...
    def review_token(self, token: str, audience: str) -> Review: ...


class HelmRuns(Releases, ChartSource, Protocol):
    """What install and cleanup ask of helm (``shared.adapters.helm.Helm``)."""

    def chart(self) -> Any: ...
    def install_or_upgrade(
        self,
        name: str,
        namespace: str,
        values: Mapping[str, Any],
        guard: Guard = None,
        *,
        reapply: Callable[[], bool] | None = None,
        keep: Keep = None,
    ) -> ReleaseState: ...
    def uninstall(self, name: str, namespace: str, guard: Guard = None) -> bool: ...


class Callbacks(Protocol):
    """What notify-api and cleanup ask of kubeopera-api (``shared.adapters.kubeopera_api.KubeoperaApi``)."""

    def report(self, update: CloudSpaceUpdate) -> CallbackResult: ...


class EventSender(Protocol):
    """What resync asks of the broker's client (``shared.delivery.sink.Sink``)."""

    def send(self, event: BaseCloudEvent) -> None: ...

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Runtime:
    """A function's settings and clients; ``helm``, ``kubeopera_api`` and ``sink`` when given."""

    settings: Settings
    kube: Cluster
    helm: HelmRuns | None = None
    kubeopera_api: Callbacks | None = None
    sink: EventSender | None = None
    vcluster_api: VClusterProbe | None = None

    @classmethod
    def from_env(cls, function: str, *, deliveries: bool = True) -> Runtime:
        """Settings from the environment, logs configured, the Kubernetes client connected.
        ``deliveries``: the broker delivers to this process (every function but the vCluster
        watch), so it checks who sends (sender identity)."""
        settings = Settings.from_env(deliveries=deliveries)
        logs.configure(settings.log_level, function=function, environment=settings.environment)
        if deliveries and not settings.verify_senders:
            log.warning(
                "SENDER_IDENTITY=off: this function acts on any request that reaches it, not only the broker's; "
                "use it only on a cluster without Knative's authentication-oidc feature"
            )
        tracing.configure(function)
        return cls(settings=settings, kube=Kube.connect(component=f"tenant-{function}"))

    def helm_client(self) -> HelmRuns:
        if self.helm is not None:
            return self.helm
        from shared.adapters.helm import Helm

        return Helm(
            self.settings.chart_ref,
            self.settings.chart_version,
            self.settings.chart_cache_dir,
            records=ReleaseRecords(self.kube),  # the release as helm's record holds it: no helm process to read it
            executable=self.settings.helm_executable,
            stuck_after=self.settings.stuck_release_seconds,
            deadline=self.settings.helm_deadline_seconds,
            validate_manifests=self.settings.validate_manifests,
        )

    def kubeopera_api_client(self) -> Callbacks:
        if self.kubeopera_api is not None:
            return self.kubeopera_api
        return KubeoperaApi(
            self.settings.kubeopera_api_base_url,
            self.settings.internal_service_token,
            self.settings.callback_timeout_seconds,
        )

    def vcluster_api_client(self) -> VClusterProbe:
        """How check-ready asks a vCluster's API through the kubeconfig it is about to store."""
        return self.vcluster_api if self.vcluster_api is not None else VClusterApi()

    def sink_client(self) -> EventSender:
        if self.sink is not None:
            return self.sink
        if not self.settings.sink_url:
            # Temporary, not a configuration error: Knative's SinkBinding can inject K_SINK only
            # once the Service exists, so its first revision always starts without it.
            raise TemporaryError(
                "no sink yet: K_SINK is unset (Knative's SinkBinding sets it to the Broker's address)",
                retry_after=10,
            )
        return Sink(self.settings.sink_url, token_file=self.settings.sink_token_file)

    def sender_check(self) -> SenderCheck | None:
        """The check that only the broker delivers here, or None when SENDER_IDENTITY=off."""
        if not self.settings.verify_senders:
            return None
        policy = SenderPolicy(self.settings.sender_audience, self.settings.sender_subjects)
        return SenderCheck(policy, self.kube.review_token)

    def mark_failed(self, ref: TenantRef, err: PermanentError) -> None:
        mark_failed(self.kube, ref, str(err), err.reason)
