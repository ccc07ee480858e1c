"""resync: every Tenant converges, whatever events were lost.

An event is a hint, and Knative forgets: the ApiServerSource misses what changes while it is
down, an in-memory broker loses what it holds when it restarts, and a retry budget can run out
(design.md section 4). The PingSource ``tenant-resync`` ticks (``dev.knative.sources.ping``);
on each tick this function lists the Tenants (one LIST, a page at a time) and, for each one
that is not where it should be, re-drives the step it waits for by sending that step's event to
the broker (``K_SINK``), exactly as the chain would have:

========================================================  =========================================
the Tenant                                                re-drive
========================================================  =========================================
Pending (a new Tenant's is the CRD's default), a          ``io.kubeopera.tenant.install``
generation not yet observed, or settled by the version
before ownership (no finalizer)
Provisioning at its generation, its poll quiet (no          ``io.kubeopera.tenant.provisioning``
``lastPolledAt`` or ``lastSyncedAt`` for 6 polls)
Provisioning, or Pending (install never got it to         resync fails it (``ProvisionTimeout``)
Provisioning), past ``PROVISION_TIMEOUT_SECONDS``
Ready, its release gone (no vCluster StatefulSet), or     phase Pending, then ``...install``
one of the chart's namespace policies gone                (helm's upgrade makes it again)
Ready, the kubeconfig Secret missing or not vcluster's    ``io.kubeopera.tenant.ready``
Ready, ``CallbackDelivered=False``                        ``io.kubeopera.tenant.kubeconfig.stored``
Ready, its reads in the Tenant's namespace refused (403)  ``io.kubeopera.tenant.install``
being deleted, cleanup never started or stalled           ``io.kubeopera.tenant.cleanup``
gone, its vcluster-* namespace left behind (a finalizer    ``io.kubeopera.tenant.cleanup`` with
removed by hand), older than ``ORPHAN_GRACE_SECONDS``      ``orphan``: cleanup removes it
its namespace without a label install keeps there (Pod    ``io.kubeopera.tenant.install``, which
Security, ``kubeopera.io/managed-by``)                    puts it back
Failed (waiting for a person), or Ready with no drift     nothing
========================================================  =========================================

The decision (``decide``) is pure. A pass over settled Tenants writes nothing and runs no helm.
It reads the fleet in a fixed number of LISTs (``FleetReads``: the vCluster StatefulSets, the
stored kubeconfigs, the chart's namespace policies: ResourceQuota, LimitRange, NetworkPolicies,
``shared.model.isolation``), then, ``OBSERVERS`` Tenants at a time (a pass is bound by CPU, this
process's most: ``bench resync`` prints where it goes), takes a close look at each Ready Tenant:
its vcluster Secret (the one read of its own; no identity of ours may list Secrets in a Tenant's
namespace) and its vCluster's API (``shared.adapters.vcluster_api``). With
``VCLUSTER_LOOK_PASSES`` above 1 a pass looks closely only at its share of the fleet
(``shared.model.cadence``), and each Tenant gets a close look once in that many ticks. resync
reads in a Tenant's namespace only what install grants it there (``shared.steps.access``:
vcluster's Secret, by name; a StatefulSet the fleet's LIST did not find it asks for by name
through its ClusterRole); a Tenant made before that grant existed has none, and its read is refused: resync
sends it to install, which makes it (and changes nothing else of a settled Tenant), and looks
again on the next tick. A Tenant being worked on at that moment may get a duplicate event, which
the steps' idempotence and resourceVersion guards make harmless. A failure to send is temporary:
the tick is re-delivered and the pass runs again.

Each pass also counts the Ready Tenants whose stored kubeconfig's client certificate expires
within 30 days (``kubeopera_tenant_kubeconfigs_expiring``, with the seconds to the soonest; alert
``KubeoperaTenantKubeconfigExpiring``), from the stored kubeconfigs it lists anyway
(``shared.steps.certificates``), and logs a warning naming each of them: ``kubeopera-tenants
rotate`` re-issues its certificates.
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import functools
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

from shared.adapters.vcluster_api import VClusterProbe
from shared.delivery import events
from shared.delivery.http import Step, function_app
from shared.errors import Forbidden, ProvisionTimeout, TenantError
from shared.model import cadence, event_types, health, lifecycle, rollout, service_range
from shared.model.cluster import OwnedNamespace, Rollout
from shared.model.isolation import PolicyObject, policy_objects
from shared.model.naming import (
    KUBECONFIG_KEY,
    LABEL_MANAGED_BY,
    LABEL_TENANT_ID,
    MANAGED_BY,
    VCLUSTER_CONFIG_KEY,
    tenant_name_in,
)
from shared.model.ownership import orphaned_by, owner_of
from shared.model.rbac import label_drift
from shared.model.tenant import COND_CALLBACK, Phase, StatusUpdate, Tenant, TenantRef, parse_time, rfc3339, utcnow
from shared.observability import logs, metrics
from shared.runtime import Cluster, EventSender, Runtime
from shared.settings import Settings
from shared.steps import availability, certificates
from shared.steps import rollout as waves
from shared.steps.reconcile import mark_failed, write_status

NAME = "resync"
log = logging.getLogger(__name__)

# A deletion still in phase Deleting this long after cleanup started (lastSyncedAt) is re-driven.
# Cleanup does not write while it polls, so a slow but live one gets a duplicate event, which is
# harmless (every cleanup step may repeat); a dead one is picked up.
CLEANUP_STALL_SECONDS = 60


class Redrive(enum.Enum):
    """What resync does for a Tenant: send a step's re-drive event (``lifecycle.STEPS``), or more."""

    INSTALL = lifecycle.INSTALL.redrive
    CHECK = lifecycle.CHECK_READY.redrive
    STORE = lifecycle.STORE_KUBECONFIG.redrive
    NOTIFY = lifecycle.NOTIFY_API.redrive
    CLEANUP = lifecycle.CLEANUP.redrive
    TIMEOUT = "fail: provision timeout"
    REINSTALL = "phase Pending, then install"


@dataclass(frozen=True)
class Drift:
    """What resync saw of a Ready Tenant's vCluster."""

    release_present: bool  # the vCluster StatefulSet exists
    kubeconfig_current: bool  # the stored kubeconfig exists and is what vcluster wrote
    policies_missing: tuple[str, ...] = ()  # the chart's namespace policies that are gone
    granted: bool = True  # False: the reads in the Tenant's namespace were refused (the rest unknown)
    expires: datetime | None = None  # when the stored kubeconfig's client certificate expires
    rollout: Rollout | None = None  # the StatefulSet as its controller reports it (health.availability)
    api_missing: str | None = None  # what its API lacked through the stored kubeconfig (None: it answered)
    # False: this pass read neither vcluster's Secret nor the API (shared.model.cadence); then
    # ``kubeconfig_current`` means only "stored", ``granted`` is not known, ``api_missing`` is None
    looked_closely: bool = True
    # False: the API was not asked though a probe is at hand (no close look, no stored kubeconfig
    # to ask with, no ready pod): what asking found before stays (health.unasked). True also when
    # there is no probe at all (``vcluster`` None): the pod alone judges then
    api_judged: bool = True

    def reinstall_reason(self, tenant: Tenant) -> str:
        names = tenant.spec.names
        if not self.release_present:
            return f"helm release {names.release} is gone; provisioning it again"
        return f"{', '.join(self.policies_missing)} gone from {names.namespace}; provisioning it again"


def decide(tenant: Tenant, now: datetime, settings: Settings, drift: Drift | None) -> Redrive | None:
    """What this Tenant waits for, if anything. ``drift`` is observed for Ready Tenants only."""
    status = tenant.status
    since = parse_time(status.last_synced_at)
    idle = (now - since).total_seconds() if since else float("inf")
    if tenant.deleting:
        if not lifecycle.wants_cleanup(tenant):
            return None
        if status.phase != Phase.DELETING or idle > CLEANUP_STALL_SECONDS:
            return Redrive.CLEANUP
        return None
    if status.phase == Phase.FAILED:
        return None
    if lifecycle.wants_install(tenant):  # Pending, a new generation, or no finalizer
        if status.phase == Phase.PENDING and lifecycle.timed_out(tenant, now, settings.provision_timeout_seconds):
            return Redrive.TIMEOUT  # install was asked, and never got it to Provisioning
        return Redrive.INSTALL
    if status.phase == Phase.PROVISIONING:
        # A status with no start time (edited by hand) is never timed out, and its poll counts as lost.
        if lifecycle.timed_out(tenant, now, settings.provision_timeout_seconds) is not None:
            return Redrive.TIMEOUT
        return Redrive.CHECK if lifecycle.poll_chain_lost(tenant, now, settings.ready_poll_seconds) else None
    if status.phase == Phase.READY and drift is not None:
        if not drift.granted:
            return Redrive.INSTALL  # install grants resync its reads there (access.grant_if_ours)
        if not drift.release_present or drift.policies_missing:
            return Redrive.REINSTALL
        if not drift.kubeconfig_current:
            return Redrive.STORE
        callback = status.condition(COND_CALLBACK)
        if callback is not None and callback.status == "False":
            return Redrive.NOTIFY
    return None


# Ready Tenants whose vCluster is read at once: each read and probe waits on a server (the API
# server, the vCluster), so a few in flight keep this process busy; its CPU (the probe's TLS,
# mostly) is what bounds a pass. The kubernetes client keeps 5 connections per core, so on two
# cores eight never wait for one.
OBSERVERS = 8


def observed(tenant: Tenant) -> bool:
    """Whether resync reads this Tenant's vCluster: settled Ready at its generation, ours, alive."""
    return tenant.ready_at_generation() and tenant.has_finalizer and not tenant.deleting


@dataclass(frozen=True)
class FleetReads:
    """What a pass reads of every Tenant at once, in a fixed number of LISTs (a page of
    ``PAGE`` at a time), so that a settled Tenant costs no request of its own on the API server
    but its vcluster Secret's on a close look: the chart's namespace policies by namespace (one
    set a namespace, folded in as the LISTs are read: 0.7 KB a Tenant where one entry an object
    was 1.3), the vCluster StatefulSets by (namespace, name) (every StatefulSet carrying
    ``kubeopera.io/tenant-id``, as install's values label it; the label on every release this
    project has made), and the stored kubeconfigs in the Tenants' namespace by name
    (``managed-by``, the spec's label), each kept as the digest of its ``kubeconfig`` key and its
    client certificate's expiry (``StoredCopy``): about 2 KB a Tenant in all, never a whole
    object. What a list lacks, ``observe`` asks for by name: a LIST is a snapshot, and "not
    listed" proves nothing about an object made since or labelled otherwise."""

    policies: Mapping[str, frozenset[PolicyObject]]
    rollouts: Mapping[tuple[str, str], Rollout]
    stored: Mapping[str, StoredCopy]

    @classmethod
    def read(cls, kube: Cluster, settings: Settings) -> FleetReads:
        found: dict[str, set[PolicyObject]] = {}
        for namespace, obj in kube.iter_policy_objects():
            found.setdefault(namespace, set()).add(obj)
        policies = {namespace: frozenset(objects) for namespace, objects in found.items()}
        del found
        rollouts = kube.list_rollouts(LABEL_TENANT_ID)
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
        kubeconfigs = kube.iter_secrets(settings.tenant_namespace, selector, (KUBECONFIG_KEY,))
        stored = {name: StoredCopy.of(secret.data.get(KUBECONFIG_KEY)) for name, secret in kubeconfigs}
        return cls(policies=policies, rollouts=rollouts, stored=stored)


def digest(config: bytes | None) -> str | None:
    """What a pass keeps of a kubeconfig to compare it: its SHA-256 (None for none)."""
    return None if config is None else hashlib.sha256(config).hexdigest()


@dataclass(frozen=True, slots=True)
class StoredCopy:
    """What a pass keeps of a stored kubeconfig: its digest, and when the client certificate in it
    expires (the credential kubeopera-api hands out; None: none to read)."""

    digest: str | None
    expires: datetime | None

    @classmethod
    def of(cls, config: bytes | None) -> StoredCopy:
        expires = certificates.client_certificate_expiry(config) if config is not None else None
        return cls(digest(config), expires)


def observe_all(
    kube: Cluster,
    settings: Settings,
    tenants: Sequence[Tenant],
    vcluster: VClusterProbe | None = None,
    tick: datetime | None = None,
    fleet: Callable[[], FleetReads] | None = None,
) -> dict[str, Drift]:
    """``observe`` of each Tenant that is ``observed``, ``OBSERVERS`` at a time, by key, after
    the fleet's reads (``FleetReads``; ``fleet`` gives them when a pass reads them once for all
    its pages, else they are read here); closely those ``shared.model.cadence`` gives the tick at
    ``tick`` (all of them by default). Each read runs in a copy of this context, so its span is a
    child of the tick's. A Tenant whose reads fail is left out (logged; the next pass looks
    again): one odd Tenant never stops the pass."""
    wanted = [t for t in tenants if observed(t)]
    if not wanted:
        return {}
    at, passes = tick or utcnow(), settings.vcluster_look_passes
    reads = fleet() if fleet is not None else FleetReads.read(kube, settings)
    with ThreadPoolExecutor(max_workers=min(OBSERVERS, len(wanted)), thread_name_prefix="resync-observe") as pool:
        futures = [
            pool.submit(
                contextvars.copy_context().run,
                _observe_or_none,
                kube,
                settings,
                t,
                reads,
                vcluster,
                cadence.closely(t.uid, at, settings.resync_tick_seconds, passes),
            )
            for t in wanted
        ]
        found = {t.key: f.result() for t, f in zip(wanted, futures, strict=True)}
    return {key: drift for key, drift in found.items() if drift is not None}


def _observe_or_none(
    kube: Cluster,
    settings: Settings,
    tenant: Tenant,
    fleet: FleetReads,
    vcluster: VClusterProbe | None,
    closely: bool,
) -> Drift | None:
    try:
        return observe(kube, settings, tenant, fleet, vcluster, closely)
    except TenantError as err:
        extra = {"tenant": tenant.key, "error": str(err)}
        log.warning("could not read the Tenant's vCluster; the next pass looks again", extra=extra)
        return None


def observe(
    kube: Cluster,
    settings: Settings,
    tenant: Tenant,
    fleet: FleetReads,
    vcluster: VClusterProbe | None = None,
    closely: bool = True,
) -> Drift:
    """The Tenant's vCluster as it is: its StatefulSet and stored kubeconfig as the fleet's reads
    found them (asked for by name when they did not), and what the chart rendered in its
    namespace. ``closely`` (``shared.model.cadence``) adds vcluster's Secret (one read) and, with
    ``vcluster``, its API asked through the stored kubeconfig when a control-plane pod is ready
    (one TLS connection; None: not asked, availability then follows the pod alone)."""
    names = tenant.spec.names
    stored = _stored(kube, settings, fleet, names.kubeconfig_secret)  # in the Tenants' namespace
    try:  # the Secret through the Role install makes in the namespace (shared.steps.access)
        rollout = fleet.rollouts.get((names.namespace, names.release)) or kube.get_rollout(
            names.namespace, names.release
        )
        written = kube.read_secret_key(names.namespace, names.vcluster_secret, VCLUSTER_CONFIG_KEY) if closely else None
    except Forbidden as err:
        refused = {"tenant": tenant.key, "error": str(err)}
        log.warning("reads in the Tenant's namespace refused; install grants them", extra=refused)
        return Drift(
            release_present=True,
            kubeconfig_current=True,
            granted=False,
            expires=stored.copy.expires,
            looked_closely=closely,
            api_judged=False,
        )
    current = stored.present and (written is None or stored.copy.digest == digest(written))
    present = fleet.policies.get(names.namespace, frozenset())
    missing = tuple(str(o) for o in policy_objects(names.release) if o not in present)
    api_missing, judged = None, vcluster is None
    if closely and vcluster is not None and stored.present and rollout is not None and rollout.ready_replicas > 0:
        # the stored kubeconfig, as kubeopera-api hands it out: when it is vcluster's, the bytes
        # just read; otherwise read by name (a drifted Tenant, or vcluster's Secret being rewritten)
        config = written if current and written is not None else stored.config(kube, settings.tenant_namespace)
        if config is not None:
            api_missing, judged = vcluster.missing(config), True
    return Drift(
        release_present=rollout is not None,
        kubeconfig_current=current,
        policies_missing=missing,
        expires=stored.copy.expires,
        rollout=rollout,
        api_missing=api_missing,
        looked_closely=closely,
        api_judged=judged,
    )


@dataclass(frozen=True)
class _Stored:
    """A Tenant's stored kubeconfig as a pass knows it: whether the Secret exists, what the pass
    keeps of its key, and its bytes when they were read by name (``config`` reads them if not)."""

    name: str
    present: bool
    copy: StoredCopy
    fetched: bool = False  # read by name: ``read`` holds its key's bytes (None: no such key)
    read: bytes | None = field(default=None, repr=False)

    def config(self, kube: Cluster, namespace: str) -> bytes | None:
        if self.fetched or not self.present:
            return self.read
        found = kube.get_secret(namespace, self.name)
        return found.data.get(KUBECONFIG_KEY) if found is not None else None


def _stored(kube: Cluster, settings: Settings, fleet: FleetReads, name: str) -> _Stored:
    """The stored kubeconfig ``name`` as the fleet's LIST found it, or as a read by name finds it."""
    if name in fleet.stored:
        return _Stored(name, True, fleet.stored[name])
    found = kube.get_secret(settings.tenant_namespace, name)  # made since the LIST, or labelled otherwise
    config = found.data.get(KUBECONFIG_KEY) if found is not None else None
    return _Stored(name, found is not None, StoredCopy.of(config), fetched=True, read=config)


def resync(
    kube: Cluster,
    sink: EventSender,
    settings: Settings,
    now: datetime | None = None,
    vcluster: VClusterProbe | None = None,
    tick: datetime | None = None,
) -> dict[str, int]:
    """One pass; returns how many Tenants got each re-drive (for the log and the tests). With
    ``vcluster``, the API of each Ready Tenant looked at closely is asked through its stored
    kubeconfig (``observe``); which those are follows ``tick``, the tick event's time (``now``
    when not given; ``shared.model.cadence``).

    The Tenants come a LIST page at a time, and each page is done before the next is asked for:
    observed, re-driven, its availability kept, its place in the fleet upgrade taken
    (``Wave``). Past its page the pass keeps of a Tenant its uid, phase and expiry (``Tally``),
    besides what the fleet's reads hold of it (``FleetReads``): about 2 KB a Tenant in all, where
    the Tenants themselves with their Drifts were 14 (``bench resync``)."""
    moment = now or utcnow()
    began = time.monotonic()
    counts: Counter[str] = Counter()
    tally = Tally()
    wave = Wave.begin(kube, settings)
    fleet = functools.cache(lambda: FleetReads.read(kube, settings))  # at the first page with a Ready Tenant
    for page in kube.tenant_pages(settings.tenant_namespace):
        drifts = observe_all(kube, settings, page, vcluster, tick or moment, fleet)
        counts.update(converge_all(kube, sink, settings, page, moment, drifts, wave, tally))
        tally.add(page, drifts)
        del page, drifts  # before the next page is asked for
    counts.update(namespaces(kube, sink, settings, tally, moment))
    counts.update(wave.finish(kube, sink))
    tally.count(moment)
    seconds = time.monotonic() - began
    metrics.RESYNC_PASS.set(seconds)  # alert KubeoperaTenantResyncSlow: the Service cuts a pass at 600 s
    log.info(
        "resync pass done",
        extra={
            "tenants": len(tally.uids),
            "lookedClosely": tally.looked_closely,
            "redriven": dict(counts),
            "seconds": round(seconds, 3),
        },
    )
    return dict(counts)


def converge_all(
    kube: Cluster,
    sink: EventSender,
    settings: Settings,
    tenants: Sequence[Tenant],
    now: datetime,
    drifts: Mapping[str, Drift],
    wave: Wave,
    tally: Tally,
) -> Counter[str]:
    """A page of Tenants, one at a time: its re-drive (``converge``), its ``VClusterAvailable``
    (``keep_available``), then its part in the fleet upgrade (``wave``), from the Tenant as that
    write left it, so that a Tenant's availability and its rollout mark both go in one pass."""
    counts: Counter[str] = Counter()
    for tenant in tenants:
        drift = drifts.get(tenant.key)
        done = converge(kube, sink, settings, tenant, now, drift)
        if done:
            tally.redriven.add(tenant.uid)
        counts.update(done)
        written, available = keep_available(kube, tenant, drift)
        if available is not None:
            tally.available[available] += 1
        if written is not None:
            counts["AVAILABILITY"] += 1
        wave.see(kube, written or tenant)
    return counts


def converge(
    kube: Cluster, sink: EventSender, settings: Settings, tenant: Tenant, now: datetime, drift: Drift | None
) -> dict[str, int]:
    """``decide`` for one Tenant and its re-drive (``_redrive``'s writes, then its events): the
    re-drive's name, or ``ERROR`` when its write failed (logged; the next pass tries again: one
    Tenant's error never stops the pass), or nothing. A failure to send raises: the broker down is
    every Tenant's failure, and the tick is re-delivered."""
    action = decide(tenant, now, settings, drift)
    if action is None:
        return {}
    with logs.bind(tenant=tenant.key):
        log.info("re-driving", extra={"redrive": action.name, "phase": str(tenant.status.phase)})
        try:
            sends = _redrive(kube, settings, tenant, action, now, drift)
        except TenantError as err:
            log.warning("re-drive not done; the next pass tries again", extra={"error": str(err)})
            return {"ERROR": 1}
        for each in sends:
            sink.send(each)
    return {action.name: 1}


@dataclass
class Tally:
    """What a pass keeps of each Tenant once its page is done, for the fleet's gauges and its
    namespaces (``namespaces``): its uid, whether it was re-driven, its phase, how its vCluster was
    found, its certificate's expiry."""

    uids: set[str] = field(default_factory=set)
    redriven: set[str] = field(default_factory=set)  # uids this pass re-drove (or tried to)
    phases: Counter[str] = field(default_factory=Counter)
    available: Counter[str] = field(default_factory=Counter)  # "true" / "false", of observed Tenants
    expiries: dict[str, datetime] = field(default_factory=dict)  # by Tenant key
    looked_closely: int = 0

    def add(self, tenants: Sequence[Tenant], drifts: Mapping[str, Drift]) -> None:
        for tenant in tenants:
            self.uids.add(tenant.uid)
            self.phases[tenant.status.phase.value] += 1
        for key, drift in drifts.items():
            self.looked_closely += drift.looked_closely
            if drift.expires is not None:
                self.expiries[key] = drift.expires

    def count(self, now: datetime) -> None:
        """The gauges, as of this pass: ``kubeopera_tenants{phase}`` (every phase, zero included),
        ``kubeopera_tenant_vclusters{available}``, the kubeconfigs expiring (``count_expiring``),
        and a warning naming each of those."""
        for phase in Phase:
            metrics.TENANTS.labels(phase.value).set(self.phases[phase.value])
        for state in ("true", "false"):
            metrics.VCLUSTERS.labels(state).set(self.available[state])
        count_expiring(list(self.expiries.values()), now)
        for key, expires in sorted(self.expiries.items()):
            if certificates.expiring([expires], now):
                log.warning(
                    "kubeconfig's client certificate expires soon; run kubeopera-tenants rotate",
                    extra={"tenant": key, "expires": rfc3339(expires)},
                )


def keep_available(kube: Cluster, tenant: Tenant, drift: Drift | None) -> tuple[Tenant | None, str | None]:
    """``VClusterAvailable`` of an observed Tenant, as its StatefulSet and, where this pass asked
    it, its API say now (``shared.model.health``; ``health.unasked`` where it did not): written,
    with an Event, only where it changed. Returns the Tenant as written (None: not written) and
    the availability to count in ``kubeopera_tenant_vclusters{available}`` ("true", "false"; None:
    not observed). A Tenant whose write fails is left for the next pass (logged), as a re-drive is."""
    if drift is None or drift.rollout is None:
        return None, None
    if drift.api_judged:
        wanted = health.availability(drift.rollout, tenant.generation, drift.api_missing)
    else:
        wanted = health.unasked(drift.rollout, tenant)
    written = None
    with logs.bind(tenant=tenant.key):
        try:
            written = availability.keep(kube, tenant, wanted)
        except TenantError as err:
            log.warning("availability not written; the next pass tries again", extra={"error": str(err)})
    return written, wanted.status.lower()


_halted_reported: set[str] = set()  # the Tenants this process last set kubeopera_tenant_rollout_halted for


def roll_out(kube: Cluster, sink: EventSender, settings: Settings, tenants: Iterable[Tenant]) -> dict[str, int]:
    """The fleet upgrade's next wave over ``tenants`` (``Wave``, which a pass feeds a page at a time)."""
    wave = Wave.begin(kube, settings)
    for tenant in tenants:
        wave.see(kube, tenant)
    return wave.finish(kube, sink)


@dataclass
class Wave:
    """The fleet upgrade's next wave (``shared.model.rollout``), a Tenant at a time: each Ready
    Tenant's target is what install computes (``rollout.target``, from the same settings); those
    behind it are upgraded by install, which takes a slot for each. The pass sends install for the
    Tenants holding a slot that are still Ready behind it (their event may have been lost), and for
    as many waiting Tenants as there are free slots, by name. A slot whose Tenant is Failed halts
    the rollout (recorded once, with an Event on it): nothing more is sent until ``rollout
    resume``. Waiting Tenants not sent now are marked ``status.rollout: Waiting`` (one write, when
    it changes; install clears it). ``kubeopera_tenant_rollout{state}`` and
    ``..._rollout_halted{tenant}`` are set.

    ``begin`` reads the slots' Leases and the halt record; ``see`` takes each Tenant in turn,
    writing the marks that cannot depend on later Tenants and keeping only the few that may be
    sent (those holding a slot, and the first waiting ones by name, no more than there are
    slots), and the slots' own Tenants; ``finish`` decides what the slots allow and sends. A
    Tenant's state needs its slot and the halt record only (``rollout.state``), so the
    states counted before the halt is recorded are the ones after."""

    settings: Settings
    found: waves.Slots  # as read at begin, without their Tenants
    states: Counter[rollout.State] = field(default_factory=Counter)
    holders: dict[str, Tenant] = field(default_factory=dict)  # the slots' Tenants, by name
    holding: list[Tenant] = field(default_factory=list)  # in progress and still behind: sent again
    waiting: list[Tenant] = field(default_factory=list)  # the first waiting by name, one a slot at most
    marked: int = 0

    @classmethod
    def begin(cls, kube: Cluster, settings: Settings) -> Wave:
        nobody: waves.Lookup = lambda _name: None  # noqa: E731 - the slots' Tenants come with the pages
        return cls(settings, waves.read(kube, settings.tenant_namespace, settings.rollout_max_parallel, nobody))

    def see(self, kube: Cluster, tenant: Tenant) -> None:
        if tenant.namespace != self.settings.tenant_namespace:
            return
        if any(slot is not None and slot.tenant == tenant.name for _, slot, _ in self.found.slots):
            self.holders[tenant.name] = tenant
        behind = _behind(tenant, self.settings)
        state = rollout.state(tenant, behind, self.found.held_by(tenant), self.found.halted)
        self.states[state] += 1
        if state == rollout.State.IN_PROGRESS and behind:
            self.holding.append(tenant)  # one a slot
            return
        if state == rollout.State.WAITING:
            self.waiting = sorted([*self.waiting, tenant], key=lambda t: t.name)
            if len(self.waiting) <= len(self.found.slots):
                return
            tenant = self.waiting.pop()  # past the first few by name: not sent on this pass
        self._mark(kube, tenant, behind)

    def finish(self, kube: Cluster, sink: EventSender) -> dict[str, int]:
        found = waves.Slots(
            tuple((name, slot, self.holders.get(slot.tenant) if slot else None) for name, slot, _ in self.found.slots),
            self.found.halted,
        )
        if found.halted is None and waves.record_halt(kube, found) is not None:
            found = waves.read(
                kube, self.settings.tenant_namespace, self.settings.rollout_max_parallel, self.holders.get
            )
        sends: list[Tenant] = []
        if found.halted is None and rollout.halted_by(found.slots) is None:
            free = sum(1 for _, slot, holder in found.slots if slot is None or rollout.slot_free(slot, holder))
            sends = self.holding + self.waiting[:free]
        for tenant in sends:
            sink.send(events.make(event_types.INSTALL, NAME, tenant.ref))
        sent = {t.key for t in sends}
        for tenant in self.holding + self.waiting:
            if tenant.key not in sent:
                self._mark(kube, tenant, True)
        _count_rollout(self.states, found.halted)
        log.info(
            "rollout pass",
            extra={
                "states": {s.value: self.states[s] for s in rollout.State},
                "halted": found.halted.tenant if found.halted else None,
                "sent": sorted(sent),
            },
        )
        return {k: v for k, v in (("ROLLOUT", len(sends)), ("ROLLOUT_MARK", self.marked)) if v}

    def _mark(self, kube: Cluster, tenant: Tenant, behind: bool) -> None:
        mark = rollout.waiting_mark(tenant, behind)
        if mark is None:  # right as it is
            return
        with logs.bind(tenant=tenant.key):
            try:
                write_status(kube, tenant, StatusUpdate(fields={"rollout": mark}))
                self.marked += 1
            except TenantError as err:
                log.warning("rollout mark not written; the next pass tries again", extra={"error": str(err)})


def _behind(tenant: Tenant, settings: Settings) -> bool:
    """``rollout.behind`` with install's target; a Tenant whose values cannot be computed (a spec
    install would refuse) is left out, logged: one odd Tenant never stops the pass."""
    if not rollout.in_fleet(tenant):
        return False
    try:
        return rollout.behind(tenant, waves.target(tenant, settings))
    except TenantError as err:
        log.warning("no rollout target for the Tenant", extra={"tenant": tenant.key, "error": str(err)})
        return False


def _count_rollout(states: Mapping[rollout.State, int], halted: rollout.Slot | None) -> None:
    for state in rollout.State:
        metrics.ROLLOUT.labels(state.name.lower()).set(states.get(state, 0))
    now = {halted.tenant} if halted is not None else set()
    for tenant in _halted_reported - now:
        metrics.ROLLOUT_HALTED.labels(tenant).set(0)
    for tenant in now:
        metrics.ROLLOUT_HALTED.labels(tenant).set(1)
    _halted_reported.clear()
    _halted_reported.update(now)


def namespaces(kube: Cluster, sink: EventSender, settings: Settings, tally: Tally, now: datetime) -> dict[str, int]:
    """The Tenants' vcluster-* namespaces, in one LIST by the owner label a pass (``tally``: the
    Tenants this pass listed, and those it re-drove):

    - a namespace of a live Tenant that lacks one of the labels install keeps there
      (``Isolation.kept_labels``: the Pod Security labels, and ``kubeopera.io/managed-by``, by
      which the helm-records admission policy guards it), removed or changed by hand or by
      another controller: its Tenant, unless this pass re-drove it already, is sent to install
      (``LABELS``), which puts them back
      (``access.grant_if_ours``; within ``access.RECHECK_SECONDS`` of its process's last check
      of that Tenant it reads nothing, and the next pass sends it again);
    - an orphan, whose owner Tenant no longer exists (``ownership.orphaned_by``): deleted without
      its cleanup, its finalizer removed by hand. Each older than ``ORPHAN_GRACE_SECONDS`` is
      sent to cleanup (``io.kubeopera.tenant.cleanup`` for the gone owner, with ``orphan``: the
      namespace), which removes it under the namespace's work lock. The grace covers a Tenant
      made after this pass listed the Tenants, whose namespace is then new."""
    found = sent = relabel = 0
    for namespace in kube.list_owned_namespaces():
        if namespace.terminating or tenant_name_in(namespace.name) is None:
            continue
        owner = orphaned_by(namespace.labels, settings.tenant_namespace, tally.uids)
        if owner is None:
            relabel += _keep_labels(sink, settings, namespace, tally.redriven)
            continue
        found += 1
        age = (now - namespace.created).total_seconds()
        extra = {"namespace": namespace.name, "owner": owner.key, "ownerUID": owner.uid, "ageSeconds": round(age)}
        if age < settings.orphan_grace_seconds:
            log.info(
                "namespace of a Tenant that no longer exists; removed once older than ORPHAN_GRACE_SECONDS", extra=extra
            )
            continue
        log.warning("namespace left behind by a Tenant that no longer exists; sending it to cleanup", extra=extra)
        ref = TenantRef(owner.namespace, owner.name, owner.uid, 0)
        sink.send(events.make(event_types.CLEANUP, NAME, ref, orphan=namespace.name))
        sent += 1
    metrics.ORPHANED_NAMESPACES.set(found)
    return {k: n for k, n in (("ORPHAN", sent), ("LABELS", relabel)) if n}


def _keep_labels(sink: EventSender, settings: Settings, namespace: OwnedNamespace, redriven: Collection[str]) -> int:
    """Send the live owner of ``namespace`` to install when a label it keeps there is missing or
    changed, unless this pass re-drove it already (install, or cleanup, has it then)."""
    owner = owner_of(namespace.labels)
    drift = label_drift(namespace.labels, settings.isolation.kept_labels())
    if owner is None or owner.namespace != settings.tenant_namespace or not drift or owner.uid in redriven:
        return 0
    extra = {"namespace": namespace.name, "owner": owner.key, "labels": drift}
    log.warning("a Tenant's namespace lost labels install keeps there; sending the Tenant to install", extra=extra)
    sink.send(events.make(event_types.INSTALL, NAME, TenantRef(owner.namespace, owner.name, owner.uid, 0)))
    return 1


def count_expiring(expiries: list[datetime], now: datetime) -> None:
    """``kubeopera_tenant_kubeconfigs_expiring{within="30d"}`` and the seconds to the soonest
    expiry (0 and a year's worth when there is none, so the alert's expression always has a value)."""
    metrics.KUBECONFIGS_EXPIRING.labels(f"{certificates.WARN_WITHIN.days}d").set(certificates.expiring(expiries, now))
    soonest = min(expiries, default=now + timedelta(days=365))
    metrics.KUBECONFIG_SOONEST_EXPIRY.set((soonest - now).total_seconds())


def _redrive(
    kube: Cluster, settings: Settings, tenant: Tenant, action: Redrive, now: datetime, drift: Drift | None
) -> tuple[BaseCloudEvent, ...]:
    """The writes a re-drive makes (raising the Tenant's own errors), and the events to send after."""
    names = tenant.spec.names
    if action == Redrive.TIMEOUT:
        elapsed = lifecycle.timed_out(tenant, now, settings.provision_timeout_seconds) or 0.0
        if tenant.status.phase == Phase.PENDING:
            detail, phase = f"found by resync; last: {tenant.status.message}", Phase.PENDING
        else:
            detail, phase = "found by resync", Phase.PROVISIONING
        message = lifecycle.timeout_message(elapsed, settings.provision_timeout_seconds, detail, phase)
        mark_failed(kube, tenant.ref, message, ProvisionTimeout.reason)
        return ()
    if action == Redrive.INSTALL and lifecycle.unwritten(tenant) and not tenant.deleting:
        # A Tenant no step has written (its events lost, the pipeline down when it was made): its
        # provision timeout counts from now, when install is asked for it, should install never
        # get to it (lifecycle.provision_started). Still Pending: no Event. (An install delivery at
        # work on it meanwhile meets a Conflict on its next status write and runs its step again.)
        write_status(
            kube,
            tenant,
            StatusUpdate(
                phase=Phase.PENDING, fields={"message": "waiting for install", "lastSyncedAt": rfc3339(utcnow())}
            ),
        )
    if action == Redrive.CLEANUP:
        # install first: for a Tenant made before install granted cleanup its reads in the
        # namespace, it grants them (access.grant_if_ours); for any other it reads and leaves.
        return (events.make(event_types.INSTALL, NAME, tenant.ref), events.make(event_types.CLEANUP, NAME, tenant.ref))
    if action == Redrive.REINSTALL and drift is not None:
        tenant = write_status(
            kube,
            tenant,
            StatusUpdate(
                phase=Phase.PENDING,
                fields={
                    "message": drift.reinstall_reason(tenant),
                    "lastSyncedAt": rfc3339(utcnow()),
                },
            ),
        )
        action = Redrive.INSTALL
    extra = {"kubeconfigSecret": names.kubeconfig_secret} if action == Redrive.NOTIFY else {}
    return (events.make(action.value, NAME, tenant.ref, **extra),)


def create_app(runtime: Runtime | None = None) -> Flask:
    rt = runtime or Runtime.from_env(NAME)
    # The host's Service range, as install resolves it: it is in the values whose digest says
    # whether a Tenant runs what install computes now (shared.steps.rollout.target).
    settings = dataclasses.replace(
        rt.settings, service_cidr=service_range.resolve(rt.settings.service_cidr, rt.kube.service_cidrs)
    )

    # The sink is asked for at the first tick, not at start: until the SinkBinding's revision
    # replaces this one (K_SINK unset), a tick is answered 503 and re-delivered instead of the pod
    # crash-looping (Runtime.sink_client). Once there, it is kept (an error is not cached).
    sink = functools.cache(rt.sink_client)

    vcluster = rt.vcluster_api_client()

    def tick(event: BaseCloudEvent) -> None:
        # the tick's ``time``, when mtping sent it (within a second of the schedule; the broker keeps
        # it on a re-delivery, which so looks at the same share)
        resync(rt.kube, sink(), settings, vcluster=vcluster, tick=event.get_time())

    return function_app(Step(name=NAME, accepts=lifecycle.RESYNC.takes, tick=tick), rt.sender_check())
