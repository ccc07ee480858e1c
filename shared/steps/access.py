"""The functions' access in a Tenant's namespace, install's own included: granted there by
install; and the namespace's own labels that install keeps true (``keep_labels``: its Pod
Security labels, ``shared.model.isolation``), checked on the same reads.

No function holds a Secret rule cluster-wide. Each reads Secrets only in ``vcluster-{tenantName}``,
which exists only once install made it, and where the Tenants live (their Roles in
kubeopera-system). install itself holds cluster-wide only what cannot wait for the namespace:
namespaces, RoleBindings, and ``bind`` on exactly the ClusterRoles named here
(``deploy/base/rbac/tenant-install.yaml``). So install, each time it makes or finds that
namespace, ensures there, in this order:

- RoleBinding ``kubeopera-tenants:tenant-install`` to ClusterRole
  ``kubeopera-tenants:tenant-install:vcluster-namespace``: its own rights there, everything helm and
  the chart need in the release namespace (Secrets, ConfigMaps, ..., the chart's Role's rules),
  first, since what follows needs it in force (``await_in_force``);
- Role and RoleBinding ``kubeopera-tenants:tenant-store-kubeconfig``: get Secret ``vc-<release>``,
  by name, and nothing else, for store-kubeconfig (which copies it) and resync (which compares it
  with the stored copy): the one Role both need, one binding to both (``KUBECONFIG_READERS``);
- RoleBinding ``kubeopera-tenants:tenant-check-ready`` to ClusterRole
  ``kubeopera-tenants:tenant-check-ready:vcluster-namespace``: get, list Secrets (helm's release
  record, listed by its labels, ``shared.adapters.release``; vcluster's ``vc-<release>``);
- RoleBinding ``kubeopera-tenants:tenant-cleanup`` to ClusterRole
  ``kubeopera-tenants:tenant-cleanup:vcluster-namespace``: get, list, update, delete Secrets
  (``helm uninstall``: the release's records, the chart's Secret).

resync asks for a StatefulSet by name through its own ClusterRole, which lists them all anyway.
Before issue 29 resync had a Role and a binding of its own in each namespace,
``kubeopera-tenants:tenant-resync``, with that Secret and the StatefulSet by name: one Role and one
binding more per new Tenant, each through RBAC's escalation check. Namespaces made before keep
them, granting nothing resync does not hold now, until they are deleted; their store-kubeconfig
binding gets resync as a second subject on install's next check there.

The ClusterRoles are in ``deploy/base/rbac/`` (``BOUND`` names them, ``NAMESPACE_RULES`` is what
check-ready's and cleanup's must hold; ``tests/deploy/test_namespace_access.py`` checks both).
RBAC lets install bind them because it has ``bind`` on these names alone. A Role is another
matter: RBAC's escalation check lets install make (or change) one, or bind one, only when it
holds every rule the Role grants in that namespace, which it does through its own binding there
once that is in force: a RoleBinding counts once the API server's RBAC cache has it. So before it
writes a Role or a binding to one, install waits (briefly) until the API server says it
holds its rights there (a SelfSubjectAccessReview, ``Kube.allowed``); not in force within
``IN_FORCE_SECONDS`` is temporary. The escalation check makes each such write wait about 100 ms
in the API server (a consistent read of its RBAC storage); writes of one kind go side by side
(``at_once``).

The objects carry the namespace's labels (the owner's uid, namespace and name, ``shared.model.ownership``)
and ``app.kubernetes.io/*`` naming the function. They have no ownerReferences: the Tenant lives in
another namespace, and the garbage collector reads an owner in another namespace as absent and
deletes the dependent. cleanup's deletion of the namespace takes them with it.

Each is read first and written only when missing or different, so a second run writes nothing.
In a namespace install has just made (``grant(..., fresh=True)``) there is nothing to read: each
is created at once, and only one that is there already (409: another delivery made it meanwhile)
is read and judged as above. That saves a new Tenant five reads (issue 29's request count).
A process remembers for ``RECHECK_SECONDS`` which Tenants' grants it has just ensured, and
``grant_if_ours`` does not read them again in that time: install deliveries that leave a settled
Tenant alone (the router's and resync's duplicates, resync's re-drives) would otherwise each read
the namespace, the Role and four RoleBindings. A grant changed by hand is therefore put back by
the first delivery after that window (or at once by a full install run, which always checks). A
Tenant made before a grant existed gets it the same way, on its next install delivery (resync
sends one when its own reads there are refused, ``functions.resync``).
A read in the namespace that the API server refuses (403) while the grant is not in force yet is
temporary (``granted_at_run_time``); see the note on 403 in ``shared.adapters.kube``.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from shared.errors import Conflict, Forbidden, TemporaryError
from shared.model.cluster import NamespaceInfo
from shared.model.ownership import Claim, judge, legacy_namespace_labels, namespace_labels
from shared.model.rbac import Role, RoleBinding, RoleRef, Rule, Subject, has_labels, label_drift
from shared.model.tenant import Tenant


class AccessApi(Protocol):
    """What granting access in a Tenant's namespace needs of the Kubernetes adapter
    (``shared.adapters.kube.Kube``): its Roles, RoleBindings and labels, and what we may do there."""

    def get_namespace(self, name: str) -> NamespaceInfo | None: ...
    def label_namespace(self, name: str, labels: Mapping[str, str]) -> None: ...
    def get_role(self, namespace: str, name: str) -> Role | None: ...
    def get_role_binding(self, namespace: str, name: str) -> RoleBinding | None: ...
    def create_role(self, role: Role) -> bool: ...
    def create_role_binding(self, binding: RoleBinding) -> bool: ...
    def patch_role(self, role: Role, resource_version: str) -> None: ...
    def patch_role_binding(self, binding: RoleBinding, resource_version: str) -> None: ...
    def delete_role_binding(self, namespace: str, name: str, resource_version: str) -> None: ...
    def allowed(self, namespace: str, verb: str, group: str, resource: str) -> bool: ...

log = logging.getLogger(__name__)

INSTALL = "tenant-install"
CHECK_READY = "tenant-check-ready"
STORE_KUBECONFIG = "tenant-store-kubeconfig"
CLEANUP = "tenant-cleanup"
RESYNC = "tenant-resync"
PREFIX = "kubeopera-tenants:"
# How long a function waits before asking again when its access is not in force yet.
ACCESS_RETRY_SECONDS = 5
# How long install waits, within one delivery, for its own binding in a namespace to be in force.
IN_FORCE_SECONDS = 5.0

# The functions whose ClusterRole ``cluster_role(service)`` install binds in every Tenant's
# namespace, its own first; install's ``bind`` (deploy/base/rbac/tenant-install.yaml) names
# exactly these ClusterRoles.
BOUND: tuple[str, ...] = (INSTALL, CHECK_READY, CLEANUP)

# What check-ready and cleanup may do in every Tenant's namespace: their ClusterRoles there.
# (install's own holds what helm and the chart need, deploy/base/rbac/tenant-install.yaml.)
NAMESPACE_RULES: Mapping[str, tuple[Rule, ...]] = {
    CHECK_READY: (Rule(("",), ("secrets",), ("get", "list")),),
    CLEANUP: (Rule(("",), ("secrets",), ("get", "list", "update", "delete")),),
}


def cluster_role(service: str) -> str:
    """The ClusterRole (deploy/base/rbac/<service>.yaml) install binds in each Tenant's namespace."""
    return f"{PREFIX}{service}:vcluster-namespace"


def kubeconfig_rules(tenant: Tenant) -> tuple[Rule, ...]:
    """vcluster's kubeconfig Secret, that one by name: store-kubeconfig copies it, resync compares
    it with the stored copy (``functions.resync.observe``)."""
    return (Rule(("",), ("secrets",), ("get",), (tenant.spec.names.vcluster_secret,)),)


# The Role in every Tenant's namespace whose rules name what they read there (known only per
# Tenant), named after its first reader, and the functions its one RoleBinding binds to it.
KUBECONFIG_ROLE = PREFIX + STORE_KUBECONFIG
KUBECONFIG_READERS: tuple[str, ...] = (STORE_KUBECONFIG, RESYNC)


@dataclass(frozen=True)
class Grants:
    """Everything install makes in one Tenant's namespace; ``bindings[0]`` is install's own."""

    roles: tuple[Role, ...]
    bindings: tuple[RoleBinding, ...]


def namespace_grants(tenant: Tenant, service_namespace: str) -> Grants:
    """The Roles and RoleBindings of ``tenant``'s namespace; the functions' ServiceAccounts live
    in ``service_namespace`` (TENANT_NAMESPACE: they run where the Tenants are)."""
    namespace = tenant.spec.names.namespace

    def labels(service: str) -> dict[str, str]:
        return namespace_labels(tenant) | {
            "app.kubernetes.io/name": "kubeopera-tenants",
            "app.kubernetes.io/component": service.removeprefix("tenant-"),
            "app.kubernetes.io/part-of": "kubeopera",
        }

    def binding(service: str, ref: RoleRef, *subjects: str) -> RoleBinding:
        bound = tuple(Subject(s, service_namespace) for s in subjects or (service,))
        return RoleBinding(namespace, PREFIX + service, ref, bound, labels(service))

    role = Role(namespace, KUBECONFIG_ROLE, kubeconfig_rules(tenant), labels(STORE_KUBECONFIG))
    return Grants(
        roles=(role,),
        bindings=(
            *(binding(service, RoleRef("ClusterRole", cluster_role(service))) for service in BOUND),
            binding(STORE_KUBECONFIG, RoleRef("Role", role.name), *KUBECONFIG_READERS),
        ),
    )


RECHECK_SECONDS = 300.0
_ensured: dict[tuple[str, str], float] = {}  # (namespace, Tenant uid) -> when (time.monotonic())
_ensured_guard = threading.Lock()


def recently_ensured(tenant: Tenant) -> bool:
    """Did this process ensure this Tenant's grants less than ``RECHECK_SECONDS`` ago?"""
    with _ensured_guard:
        at = _ensured.get((tenant.spec.names.namespace, tenant.uid))
    return at is not None and time.monotonic() - at < RECHECK_SECONDS


def forget_ensured() -> None:
    """Forget every remembered grant (the unit tests start each test from nothing)."""
    with _ensured_guard:
        _ensured.clear()


def _remember(tenant: Tenant) -> None:
    now = time.monotonic()
    with _ensured_guard:
        if len(_ensured) >= 4096:  # bounded: drop what is out of the window
            for key in [k for k, at in _ensured.items() if now - at >= RECHECK_SECONDS]:
                del _ensured[key]
        _ensured[(tenant.spec.names.namespace, tenant.uid)] = now


def grant(kube: AccessApi, tenant: Tenant, service_namespace: str, *, fresh: bool = False) -> int:
    """Make the namespace's Roles and RoleBindings what ``namespace_grants`` says (the namespace
    must be this Tenant's: the caller has judged it). install's own binding comes first, then the
    bindings to the other ClusterRoles it may bind, then the Roles, then the bindings to them;
    those of one kind are written side by side (``at_once``). Every Role and binding to a Role
    waits for install's own binding to be in force (``await_in_force``, asked at most once).
    ``fresh``: the caller has just created the namespace, so each is created without reading it
    first. Returns how many writes it took."""
    namespace = tenant.spec.names.namespace
    wanted = namespace_grants(tenant, service_namespace)
    own, *others = wanted.bindings
    in_force = _once(lambda: await_in_force(kube, namespace))
    # The bindings to the ClusterRoles install may ``bind`` by name need nothing of its rights in
    # the namespace: they go first, and give its own binding time to reach the RBAC cache before
    # the Roles (which go through the escalation check) ask whether it is in force.
    by_name = [b for b in others if b.role_ref.kind == "ClusterRole"]
    to_roles = [b for b in others if b.role_ref.kind == "Role"]
    writes = _ensure_binding(kube, own, _no_wait, fresh)
    writes += at_once([functools.partial(_ensure_binding, kube, b, _no_wait, fresh) for b in by_name])
    writes += at_once([functools.partial(_ensure_role, kube, role, in_force, fresh) for role in wanted.roles])
    writes += at_once([functools.partial(_ensure_binding, kube, b, in_force, fresh) for b in to_roles])
    if writes:
        log.info("functions' access granted in the namespace", extra={"namespace": namespace})
    _remember(tenant)
    return writes


def at_once(calls: Sequence[Callable[[], int]]) -> int:
    """Run ``calls`` side by side, each in a thread of its own and a copy of this context (its
    log fields and span stay the delivery's), and return the sum of their writes. Once all have
    finished, the first error, in the order given, is raised.

    Why: RBAC's escalation check makes each write of a Role, or of a binding to one, wait for a
    consistent read of the API server's RBAC storage, which waits for the watch cache's next
    progress notification (every 100 ms in kubernetes v1.34). One after another, the two Roles
    and their two bindings install made until issue 29 waited about 100 ms each in a new Tenant's
    install delivery; side by side, each pair waited once (the README's Benchmarks). There is one
    Role now, and the writes side by side are the two bindings to ClusterRoles, which wait for no
    escalation check: a few milliseconds each."""
    if len(calls) < 2:
        return sum(call() for call in calls)
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="grant") as pool:
        futures = [pool.submit(contextvars.copy_context().run, call) for call in calls]
    return sum(future.result() for future in futures)


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` run at most once, whichever thread asks first; the others wait for its outcome,
    and an error it raised is raised to each of them."""
    guard = threading.Lock()
    outcome: list[BaseException | None] = []

    def run() -> None:
        with guard:
            if not outcome:
                try:
                    fn()
                    outcome.append(None)
                except Exception as err:  # recorded for the threads that ask after it
                    outcome.append(err)
        if (error := outcome[0]) is not None:
            raise error

    return run


def await_in_force(kube: AccessApi, namespace: str) -> None:
    """Return once the API server says install holds its rights in ``namespace`` (its own
    binding there is in the API server's RBAC cache: RBAC's escalation check then lets it make
    the Roles); a ``TemporaryError`` after ``IN_FORCE_SECONDS``."""
    deadline = time.monotonic() + IN_FORCE_SECONDS
    pause = 0.05
    while not kube.allowed(namespace, "get", "", "secrets"):
        if time.monotonic() >= deadline:
            raise TemporaryError(
                f"install's access in {namespace} is not in force {IN_FORCE_SECONDS:.0f}s after it was granted",
                retry_after=ACCESS_RETRY_SECONDS,
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def grant_if_ours(
    kube: AccessApi, tenant: Tenant, service_namespace: str, labels: Mapping[str, str] | None = None
) -> int:
    """``grant`` (and ``keep_labels`` with ``labels``), if the namespace exists, is not being
    deleted and carries this Tenant's uid: for install's deliveries that otherwise leave the
    Tenant alone, so a Tenant made before these grants (or labels) existed gets them on its next
    delivery (and its cleanup can work), and a label removed or changed by hand is put back.
    Nothing is read when this process ensured them less than ``RECHECK_SECONDS`` ago."""
    if recently_ensured(tenant):
        return 0
    found = kube.get_namespace(tenant.spec.names.namespace)
    if found is None or found.terminating:
        return 0
    if judge(found.labels, tenant, legacy_namespace_labels(tenant)).claim != Claim.OURS:
        return 0
    writes = keep_labels(kube, tenant.spec.names.namespace, found.labels, labels or {})
    return writes + grant(kube, tenant, service_namespace)


def keep_labels(kube: AccessApi, namespace: str, current: Mapping[str, str], wanted: Mapping[str, str]) -> int:
    """Put ``wanted`` back on this Tenant's namespace where ``current`` lacks one or has another
    value (the caller has judged the namespace this Tenant's). Returns the writes it took."""
    drift = label_drift(current, wanted)
    if not drift:
        return 0
    kube.label_namespace(namespace, wanted)
    log.info("namespace labels put back", extra={"namespace": namespace, "labels": drift})
    return 1


def _no_wait() -> None:
    """What a write that needs nothing of install's rights in the namespace waits for."""


def _made_at_once(fresh: bool, before_write: Callable[[], None], create: Callable[[], bool]) -> bool:
    """In a namespace just made (``fresh``), create without reading first: True when it was made;
    False (not fresh, or there already: 409) and the caller reads and judges what is there."""
    if not fresh:
        return False
    before_write()
    return create()


def _ensure_role(kube: AccessApi, want: Role, before_write: Callable[[], None], fresh: bool = False) -> int:
    if _made_at_once(fresh, before_write, lambda: kube.create_role(want)):
        return 1
    # Read through install's own binding, which a delivery that found it already made (by
    # another one, a moment ago) did not wait for: a refusal is temporary until it is in force.
    with granted_at_run_time(want.namespace):
        found = kube.get_role(want.namespace, want.name)
    if found is not None and found == want and has_labels(found.labels, want.labels):
        return 0
    before_write()
    if found is None:
        if not kube.create_role(want):
            raise Conflict(f"role {want.namespace}/{want.name} was made by another delivery meanwhile")
        return 1
    kube.patch_role(want, found.resource_version)
    return 1


def _ensure_binding(
    kube: AccessApi, want: RoleBinding, before_write: Callable[[], None], fresh: bool = False
) -> int:
    if _made_at_once(fresh, before_write, lambda: kube.create_role_binding(want)):
        return 1
    found = kube.get_role_binding(want.namespace, want.name)
    if found is not None and found == want and has_labels(found.labels, want.labels):
        return 0
    before_write()
    writes = 0
    if found is not None and found.role_ref != want.role_ref:  # immutable: made again
        kube.delete_role_binding(want.namespace, want.name, found.resource_version)
        found, writes = None, 1
    if found is None:
        if not kube.create_role_binding(want):
            raise Conflict(f"rolebinding {want.namespace}/{want.name} was made by another delivery meanwhile")
        return writes + 1
    kube.patch_role_binding(want, found.resource_version)
    return 1


@contextmanager
def granted_at_run_time(namespace: str) -> Iterator[None]:
    """Around a read in a Tenant's namespace: the API server's refusal there is temporary (the
    grant install made may not be in force yet), asked again after ``ACCESS_RETRY_SECONDS``;
    the broker's retry budget bounds it, and then the dead-letter sink fails the Tenant."""
    try:
        yield
    except Forbidden as err:
        raise TemporaryError(
            f"{err}; install grants this access in {namespace} at run time, and it is not in force yet",
            retry_after=ACCESS_RETRY_SECONDS,
        ) from None
