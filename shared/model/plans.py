"""A platform's plans: values files merged under what install computes for a Tenant (pure).

A plan is a Helm values file the platform team owns (one file per plan in ``PLANS_DIR``, the
ConfigMap ``tenant-plans``; ``shared.settings`` reads them): the registry mirror of an air-gapped
cluster, a storage class, where control planes run, the namespace policies' numbers of a customer
plan, the distro. A Tenant names its plan in ``spec.plan`` (``default`` when it names none; no
file ``default.yaml`` is an empty default plan).

What install computes for a Tenant (``shared.model.values``) is merged over its plan
(:meth:`Plan.under`: maps key by key, anything else replaced, the computed side winning). What
install computes may not come from a plan at all: a plan that sets a key at or under a path of
:data:`PROTECTED` (the Tenant's own fields, its names, the owner labels, ``exportKubeConfig``, the
host's Service range and the isolation that protects the other tenants) is refused when it is read,
with the plan, the key and why. So nothing a plan says is ever silently dropped by the merge
(tests/unit/test_plans.py checks that every key install computes is under a protected path or
one of the two below).

Two parts of a plan go through their own rule instead of the merge:

- **The namespace policies' numbers** (``policies.resourceQuota.quota``, ``policies.limitRange.default``
  and ``.defaultRequest``; :data:`NUMBERS`): entries changed or added over the ``TENANT_*``
  settings, checked with the settings' rule (``isolation.entry_problem``), and the Tenant's own
  control-plane quota is still added to the ResourceQuota (``isolation.quota_with``). Every other
  key under ``policies`` (the enabled flags, the NetworkPolicy) is protected.
- **The distro** (``controlPlane.distro.<k3s|k8s>.enabled: true``): it replaces ``VCLUSTER_DISTRO``
  for the plan's Tenants, and like it applies to new releases only (``values.keep_distro``); the
  distro's other keys (``controlPlane.distro.k8s.version`` ...) merge as any other.

A plan's values are checked against the chart's own ``values.schema.json`` when install starts
(``shared.steps.plans``); this module checks only what the schema cannot know.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.errors import ConfigError, UnknownPlan
from shared.model.isolation import Isolation, entry_problem
from shared.model.tenant import DEFAULT_PLAN, Tenant
from shared.model.values import DISTROS, vcluster_values

Path = tuple[str, ...]

# A plan's name: a DNS label, as the CRD's ``spec.plan`` pattern (deploy/crd/tenants.yaml).
PLAN_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

# What a plan may not set, each path with why: a plan key at or under one of them, or a plan key
# holding something other than a map where one of them lies beneath, is refused naming the key.
PROTECTED: tuple[tuple[Path, str], ...] = (
    (("controlPlane", "statefulSet", "resources"), "the Tenant's spec.quota"),
    (("controlPlane", "statefulSet", "labels"), "the environment and owner labels; a pod's are at .pods.labels"),
    (("controlPlane", "proxy", "extraSANs"), "the Tenant's names on the vCluster's certificate"),
    (("exportKubeConfig",), "the kubeconfig store-kubeconfig reads"),
    (("serviceCIDR",), "the host's Service range"),
    (("sync", "toHost", "ingresses", "enabled"), "what every Tenant's vCluster syncs"),
    (("sync", "toHost", "serviceAccounts", "enabled"), "what every Tenant's vCluster syncs"),
    (("policies",), "the isolation that protects the other tenants (a plan sets only its numbers)"),
)  # fmt: skip

# Under ``policies``, the numbers a plan sets (the ``Isolation`` field each changes).
NUMBERS: dict[Path, str] = {
    ("policies", "resourceQuota", "quota"): "resource_quota",
    ("policies", "limitRange", "default"): "limit_default",
    ("policies", "limitRange", "defaultRequest"): "limit_default_request",
}
DISTRO: Path = ("controlPlane", "distro")


def dotted(path: Path) -> str:
    return ".".join(path)


@dataclass(frozen=True)
class Plan:
    """One plan: its values for the merge (the numbers taken out), its numbers and its distro."""

    name: str = DEFAULT_PLAN
    values: Mapping[str, Any] = field(default_factory=dict, hash=False)
    numbers: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # (Isolation field, its entries)
    distro: str = ""  # "": the setting's (VCLUSTER_DISTRO)

    @classmethod
    def parse(cls, name: str, values: Any) -> Plan:
        """The plan ``name`` of these values (a values file as YAML reads it; None is an empty
        plan); a ``ConfigError`` naming the plan and the key for anything it may not set."""
        if not PLAN_NAME.match(name):
            raise ConfigError(f"plan {name!r}: a plan's name must be a DNS label (lower case letters, digits, '-')")
        if values is None:
            values = {}
        if not isinstance(values, Mapping):
            raise ConfigError(f"plan {name}: must be a map of Helm values, not {type(values).__name__}")
        numbers: dict[str, dict[str, str]] = {}
        enabled: dict[str, bool] = {}
        for path, value in _leaves(values):
            if (number := _number(path)) is not None:
                numbers.setdefault(NUMBERS[number], {}).update(_entry(name, path, number, value))
            elif path[: len(DISTRO)] == DISTRO:
                _distro_leaf(name, path, value, enabled)
            elif why := _protected(path, value):
                raise ConfigError(f"plan {name}: {dotted(path)}: install sets it ({why}); a plan may not")
        chosen = [d for d, on in enabled.items() if on]
        if len(chosen) > 1:
            raise ConfigError(f"plan {name}: controlPlane.distro: enables {' and '.join(chosen)}; a plan picks one")
        if not chosen and enabled:
            off = next(iter(enabled))
            raise ConfigError(
                f"plan {name}: controlPlane.distro.{off}.enabled: false picks no distro; enable the one the plan runs"
            )
        return cls(
            name=name,
            values=_without(values, tuple(NUMBERS)),
            numbers=tuple((k, tuple(sorted(v.items()))) for k, v in sorted(numbers.items())),
            distro=chosen[0] if chosen else "",
        )

    def isolation(self, base: Isolation) -> Isolation:
        """The settings' namespace policies with this plan's numbers changed or added."""
        return base.changed({name: dict(entries) for name, entries in self.numbers})

    def under(self, computed: Mapping[str, Any]) -> dict[str, Any]:
        """``computed`` merged over this plan's values: maps key by key, the rest ``computed``'s."""
        return _merge(self.values, computed)

    def release_values(
        self,
        tenant: Tenant,
        environment: str,
        isolation: Isolation,
        service_cidr: str,
        distro: str,
        external_server: str,
    ) -> dict[str, Any]:
        """The values of ``tenant``'s release under this plan: ``vcluster_values`` with the plan's
        numbers and distro (``distro`` is the setting's, used when the plan picks none), merged over
        the plan's other values."""
        computed = vcluster_values(
            tenant, environment, self.isolation(isolation), service_cidr, self.distro or distro, external_server
        )
        return self.under(computed)


@dataclass(frozen=True)
class Plans:
    """Every plan by name; ``default`` is always one of them (empty unless a file says otherwise)."""

    plans: tuple[Plan, ...] = (Plan(),)

    @classmethod
    def of(cls, plans: Iterable[Plan]) -> Plans:
        found = {p.name: p for p in plans}
        found.setdefault(DEFAULT_PLAN, Plan())
        return cls(tuple(found[n] for n in sorted(found)))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.plans)

    def get(self, name: str) -> Plan:
        """The plan ``name``; ``UnknownPlan`` (permanent: the Tenant is Failed) listing the plans."""
        for plan in self.plans:
            if plan.name == name:
                return plan
        raise UnknownPlan(f"spec.plan {name!r} is not a plan of this platform; the plans are: {', '.join(self.names)}")


def _leaves(values: Mapping[str, Any], prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Each key of ``values`` that holds no map with keys, by its path (an empty map is a leaf)."""
    for key, value in values.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, path)
        else:
            yield path, value


def _protected(path: Path, value: Any) -> str | None:
    """Why a plan may not set ``path`` to ``value`` (None: it may): it is at or under a protected
    path, or holds no map where a protected path lies beneath (the merge would keep install's)."""
    for protected, why in PROTECTED:
        if path[: len(protected)] == protected:
            return why
        if protected[: len(path)] == path and not isinstance(value, Mapping):
            return why
    return None


def _number(path: Path) -> Path | None:
    """The :data:`NUMBERS` path ``path`` is at or under, if any."""
    return next((n for n in NUMBERS if path[: len(n)] == n), None)


def _entry(plan: str, path: Path, number: Path, value: Any) -> dict[str, str]:
    """The entry ``path: value`` of the numbers at ``number`` (an empty map: none)."""
    if path == number and isinstance(value, Mapping):
        return {}  # an empty map of numbers
    if len(path) != len(number) + 1 or isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f'plan {plan}: {dotted(path)}: must be a resource name with a quantity, such as cpu: "4"')
    key, amount = path[-1], str(value)
    if problem := entry_problem(key, amount):
        raise ConfigError(f"plan {plan}: {dotted(path)}: {problem}")
    return {key: amount}


def _distro_leaf(plan: str, path: Path, value: Any, enabled: dict[str, bool]) -> None:
    """A key under ``controlPlane.distro``: of a distro install runs; its ``enabled`` a boolean."""
    if path == DISTRO and isinstance(value, Mapping):
        return  # an empty map
    if len(path) < 3 or path[2] not in DISTROS:
        raise ConfigError(
            f"plan {plan}: {dotted(path)}: install runs the distros {', '.join(DISTROS)}; "
            "a plan sets keys of those only (controlPlane.distro.k8s.enabled: true)"
        )
    if len(path) == 3 and not isinstance(value, Mapping):  # the merge would replace it unseen
        raise ConfigError(f"plan {plan}: {dotted(path)}: must be a map of the distro's values, got {value!r}")
    if path[3:] == ("enabled",):
        if not isinstance(value, bool):
            raise ConfigError(f"plan {plan}: {dotted(path)}: must be true or false, got {value!r}")
        enabled[path[2]] = value


def _without(values: Mapping[str, Any], paths: tuple[Path, ...]) -> dict[str, Any]:
    """A deep copy of ``values`` without the keys at ``paths`` (and maps left empty by that)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        inner = tuple(p[1:] for p in paths if p[0] == key)
        if () in inner:
            continue
        if inner and isinstance(value, Mapping):
            kept = _without(value, inner)
            if kept or not value:
                out[key] = kept
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``, deep-copied: maps merged key by key, anything else ``top``'s."""
    out = {k: copy.deepcopy(v) for k, v in base.items()}
    for key, value in top.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            out[key] = _merge(below, value)
        else:
            out[key] = copy.deepcopy(value)
    return out
