"""install: turn a Tenant's spec into a vCluster Helm release, then hand over to check-ready.

Takes ``io.kubeopera.tenant.install``: the router's (a Tenant change that is work for install,
``shared.model.lifecycle.next_step``) and resync's. Re-reads the Tenant and leaves it alone when it is
Failed (it waits for a patch to Pending), being deleted (cleanup's work), or already provisioned
for its current generation (``lifecycle.install_skip_reason``). Otherwise, in this order:

1. a Failed Tenant patched to Pending by hand is marked as a retry (``reconcile.accept_retry``);
   a new one needs no status write, since it reads Pending from the CRD's default;
2. the finalizer ``kubeopera.io/cleanup`` is added, before anything is created, so a deletion
   always waits for cleanup; then steps 3 to 7 run holding the namespace's work lock
   (``shared.steps.locks``: one install or cleanup of ``vcluster-{tenantName}`` at a time across every
   pod), after reading the Tenant again under it: one being deleted by then is left to cleanup,
   and one another delivery provisioned meanwhile is left as it is;
3. ownership (design.md section 1): an older Tenant asking for the same ``tenantName`` or
   ``cloudSpaceID``, another Tenant's claim of the ``cloudSpaceID`` (a Lease only one Tenant can
   create, ``claims.claim_cloud_space``: of two Tenants created in one second, one goes on), or a
   namespace or release that carries another owner (or none of ours), fails this Tenant with a
   message naming the owner, and nothing of theirs is touched;
4. namespace ``vcluster-{tenantName}`` is created with the owner labels and the Pod Security
   labels (``shared.model.isolation``; made by this very Tenant before ownership labels existed, it is
   given them once; a Pod Security label, or ``kubeopera.io/managed-by`` (by which the helm-records
   admission policy finds the namespaces it guards), removed or changed since is put back), and in it,
   first, install's own RoleBinding (its helm and chart rights: it holds none cluster-wide), then
   the Roles and RoleBindings that let check-ready, store-kubeconfig, cleanup and resync read
   what they need there, and only there (``shared.steps.access``), before anything that needs them
   runs: nothing before this step reads a Secret (or anything else) in the namespace;
5. helm's history of the release is read once, by the helm adapter before it runs anything
   (``shared.adapters.release``): a Secret that carries the release's labels but is not a record
   helm wrote fails the Tenant with reason ``ReleaseTampered`` (a Warning Event naming the
   Secret, its type and labels), and no helm operation runs;
6. release ``vc-{tenantName}`` is installed or upgraded with ``wait=False`` (not touched at all
   if it already has these values), its values under the plan ``spec.plan`` names
   (``shared.steps.plans``; an unknown plan fails the Tenant before step 3); a release a killed
   helm left pending for longer than ``STUCK_RELEASE_SECONDS`` is recovered first
   (``shared.adapters.helm``);
7. phase Provisioning, and the reply ``io.kubeopera.tenant.provisioning``.

A Ready Tenant that runs another chart version or other values than install computes now (the
setting ``VCLUSTER_CHART_VERSION``, a plan, the base values changed: a *fleet change*,
``shared.model.rollout.behind``) is upgraded in waves: only while it holds one of the
``ROLLOUT_MAX_PARALLEL`` rollout slots (``shared.steps.rollout.admit``: taken here, held until it is
Ready again), and not at all while the rollout is halted; otherwise the delivery answers that
there is nothing to do, and the Tenant stays Ready as it is (resync sends it again). A Tenant's own
change (a new generation: a quota) goes at once, without a slot. A fleet upgrade writes phase
Provisioning (``status.rollout: Upgrading``) before helm runs: a Ready Tenant is never failed, and
one whose upgrade helm refuses must be Failed, so that the rollout halts there. Step 7 records what
the release runs now: ``status.chartVersion`` and ``status.valuesDigest``.

A delivery that leaves the Tenant alone still ensures step 4's grants and kept labels
when the namespace is this Tenant's (``access.grant_if_ours``): a Tenant made before they
existed gets them on its next delivery (resync sends one when its own reads there are refused,
and one with each re-drive of a stalled deletion, so its cleanup can work), and a label changed
by hand comes back (once ``access.RECHECK_SECONDS`` have passed since this process last checked).
That is best effort: a refusal is logged, never a reason to fail a Tenant install otherwise
leaves alone.
"""

from __future__ import annotations

import dataclasses
import logging

from cloudevents.core.base import BaseCloudEvent
from flask import Flask

# helm's client (pyhelm3) loads with this module, when a worker starts, not at the first delivery
# (bench/coldstart.py); the types install uses are the runtime's protocols.
import shared.adapters.helm  # noqa: F401
from shared.delivery import events
from shared.delivery.http import Step, function_app
from shared.errors import NamespaceTerminating, PermanentError
from shared.model import event_types, lifecycle, rollout, service_range
from shared.model.isolation import policy_objects
from shared.model.ownership import Claim, Verdict, namespace_labels
from shared.model.rollout import Target
from shared.model.tenant import (
    COND_READY,
    COND_RELEASE_INSTALLED,
    Condition,
    Phase,
    StatusUpdate,
    Tenant,
    TenantRef,
    rfc3339,
    utcnow,
)
from shared.model.values import keep_distro
from shared.observability import tracing
from shared.runtime import Cluster, HelmRuns, Runtime
from shared.settings import Settings
from shared.steps import access, claims, plans
from shared.steps import rollout as waves
from shared.steps.locks import installing, work_lock
from shared.steps.reconcile import accept_retry, live_tenant, write_status

NAME = "install"
log = logging.getLogger(__name__)


def handle(kube: Cluster, helm: HelmRuns, settings: Settings, ref: TenantRef) -> BaseCloudEvent | None:
    tenant = live_tenant(kube, ref)
    if tenant is None:
        return None
    skip = lifecycle.install_skip_reason(tenant)
    # A Ready Tenant behind the fleet (another chart version or values: a fleet change) is upgraded
    # only in a rollout slot; without one it stays Ready as it is (resync sends it again).
    fleet = False
    if skip is None:
        wanted = waves.target(tenant, settings)
    elif (rollout.in_fleet(tenant) or tenant.status.rollout == rollout.UPGRADING_MARK) and (
        rollout.behind(tenant, wanted := waves.target(tenant, settings)) or rollout.upgrade_begun(tenant, wanted)
    ):
        if not waves.admit(kube, settings, tenant, wanted):
            return None
        fleet = True
    else:
        log.info(skip)
        _grant_if_ours(kube, tenant, settings)
        return None
    with installing(tenant.uid, tenant.generation) as mine:
        if not mine:
            log.info("another delivery in this process is installing this generation; nothing to add")
            return None
        return _provision(kube, helm, settings, tenant, wanted, fleet)


def _provision(
    kube: Cluster, helm: HelmRuns, settings: Settings, tenant: Tenant, wanted: Target, fleet: bool
) -> BaseCloudEvent | None:
    tenant = accept_retry(kube, tenant)
    if not tenant.has_finalizer:
        tenant = kube.set_finalizer(tenant, present=True)
    with work_lock(kube, settings.tenant_namespace, tenant.spec.names):
        # The Tenant as it is now that no cleanup (or other install) of its namespace can run: one
        # whose deletion began meanwhile is cleanup's, which waits for this lock, and one another
        # delivery provisioned while this one waited needs nothing from helm.
        fresh = live_tenant(kube, tenant.ref)
        if fresh is None or fresh.deleting:
            log.info("the tenant is being deleted; that is cleanup's work, and nothing of it is made")
            return None
        if (
            lifecycle.is_settled(fresh)
            and fresh.has_finalizer
            and not rollout.behind(fresh, wanted)
            and not (fleet and rollout.upgrade_begun(fresh, wanted))
        ):
            log.info("provisioned by another delivery meanwhile; nothing to add")
            return None
        return _install(kube, helm, settings, tenant, wanted, fleet)


def _install(
    kube: Cluster, helm: HelmRuns, settings: Settings, tenant: Tenant, wanted: Target, fleet: bool
) -> BaseCloudEvent:
    """Steps 3 to 7, under the Tenant namespace's work lock. ``fleet``: a fleet upgrade in a slot."""
    # The release's values under the Tenant's plan (``wanted`` is their digest), first: an unknown
    # plan fails the Tenant before anything is made.
    values = plans.release_values(tenant, settings)
    claims.check_rivals(kube, tenant)
    claims.claim_cloud_space(kube, tenant)
    names = tenant.spec.names
    kept = settings.isolation.kept_labels()
    labelled = namespace_labels(tenant) | kept
    # A Tenant that never had a namespace recorded creates it without reading first (one request
    # less per new Tenant); a 409 is judged as any namespace found. Any other reads first.
    created = not tenant.status.namespace and kube.create_namespace(names.namespace, labelled)
    namespace, labels = (Verdict(Claim.OURS), None) if created else claims.namespace_claim(kube, tenant)
    if namespace.claim == Claim.FREE:
        if created := kube.create_namespace(names.namespace, labelled):
            labels = None
        else:  # made by someone else just now: judge it
            namespace, labels = claims.namespace_claim(kube, tenant)
    if namespace.claim == Claim.ADOPT:
        kube.label_namespace(names.namespace, labelled)
        log.info("namespace made before ownership labels adopted", extra={"namespace": names.namespace})
    elif namespace.claim == Claim.OURS and labels is not None:
        access.keep_labels(kube, names.namespace, labels, kept)
    access.grant(kube, tenant, settings.tenant_namespace, fresh=created)  # just made: nothing in it to read

    # Pending again (a retry, or resync after the vCluster's StatefulSet or one of the chart's
    # namespace policies went away) with the release in place: upgrade it even if its values are
    # the same, so helm makes again what is gone.
    def reapply() -> bool:
        if tenant.status.phase != Phase.PENDING:
            return False
        if kube.get_rollout(names.namespace, names.release) is None:
            return True
        present = {o for _, o in kube.iter_policy_objects(names.namespace)}
        return not set(policy_objects(names.release)) <= present

    if fleet:
        # Out of Ready before helm runs: a Ready Tenant is never failed (reconcile.fail), and a
        # fleet upgrade that helm refuses must fail it, so that the rollout halts there.
        tenant = write_status(
            kube,
            tenant,
            StatusUpdate(
                phase=Phase.PROVISIONING,
                fields={
                    "lastSyncedAt": rfc3339(utcnow()),
                    "message": f"upgrading to chart {wanted.chart_version} (values {wanted.values_digest})",
                    "rollout": rollout.UPGRADING_MARK,
                },
                conditions=(
                    Condition(COND_READY, "False", lifecycle.PROVISIONING_REASON, "upgrading", tenant.generation),
                ),
            ),
        )

    # The adapter reads helm's history once, before any helm process: a tampered one (a Secret with
    # the release's labels that helm did not write) fails the Tenant with ReleaseTampered.
    release = helm.install_or_upgrade(
        names.release,
        names.namespace,
        values,
        guard=claims.release_guard(kube, tenant),
        reapply=reapply,
        keep=keep_distro,
    )
    message = f"helm release {names.release} revision {release.revision} is {release.status}; waiting for the vCluster"
    write_status(
        kube,
        tenant,
        StatusUpdate(
            phase=Phase.PROVISIONING,
            fields={
                "vclusterName": names.release,
                "namespace": names.namespace,
                "observedGeneration": tenant.generation,
                "lastSyncedAt": rfc3339(utcnow()),
                "message": message,
                # what it runs now (shared.model.rollout): the chart version and its values' digest
                **wanted.status_fields(),
                "rollout": rollout.UPGRADING_MARK if fleet else "",
                # the trace this provisioning is in: check-ready's look continues it (tracing on)
                **({"traceparent": trace} if (trace := tracing.current_traceparent()) else {}),
            },
            conditions=(
                Condition(COND_RELEASE_INSTALLED, "True", "Installed", message, tenant.generation),
                Condition(
                    COND_READY, "False", lifecycle.PROVISIONING_REASON, "waiting for the vCluster", tenant.generation
                ),
            ),
        ),
    )
    return events.make(event_types.PROVISIONING, NAME, tenant.ref)


def _grant_if_ours(kube: Cluster, tenant: Tenant, settings: Settings) -> None:
    """The grants of step 4 on a delivery that otherwise leaves the Tenant alone. A temporary
    error is raised (the broker re-delivers, and a repeat only reads); a namespace being deleted
    needs nothing; a refusal is logged and the Tenant left as it is."""
    try:
        access.grant_if_ours(kube, tenant, settings.tenant_namespace, settings.isolation.kept_labels())
    except NamespaceTerminating:
        log.info("namespace is being deleted; no access to grant there")
    except PermanentError as err:
        log.warning("could not grant the functions' access in the namespace", extra={"error": str(err)})


def create_app(runtime: Runtime | None = None) -> Flask:
    rt = runtime or Runtime.from_env(NAME)
    helm = rt.helm_client()
    # The host's Service range, in every release's values: the setting, or read from the cluster
    # once, here; without one install does not start (shared.model.service_range).
    settings = dataclasses.replace(
        rt.settings, service_cidr=service_range.resolve(rt.settings.service_cidr, rt.kube.service_cidrs)
    )
    log.info("host Service range", extra={"serviceCIDR": settings.service_cidr})

    # Ready once the chart is pulled and every plan passes its values.schema.json (shared.steps.plans).
    plan_check = plans.PlanCheck(settings, helm)

    return function_app(
        Step(
            name=NAME,
            namespace=settings.tenant_namespace,
            accepts=lifecycle.INSTALL.takes,
            handle=lambda event, ref: handle(rt.kube, helm, settings, ref),
            on_permanent=rt.mark_failed,
            ready=plan_check.ready,
        ),
        rt.sender_check(),
    )
