"""What keeps a tenant inside its share of the host: the settings and the pure rules.

A tenant controls its vCluster, and so whatever the vCluster's syncer
(``system:serviceaccount:vcluster-<t>:vc-vc-<t>``) may do in the host namespace ``vcluster-<t>``
(README, "Tenant isolation"). Two things bound it there, both from these settings:

- **The chart's policies** (``helm_policies``), sent in every release's values
  (``shared.model.values``): a ResourceQuota and a LimitRange for the namespace, and two egress
  NetworkPolicies (the tenant's workloads reach their own control plane, DNS, each other, and
  outside the cluster, not the private ranges of ``TENANT_EGRESS_EXCEPT``; the control plane
  reaches the host API server and DNS). Each number defaults to the vcluster 0.21.2 chart's own
  default (its ``values.yaml``, ``policies:``; testbed/reference/vcluster-0.21.2/), so what is
  sent is what the chart's docs describe, written out. The chart renders ``resourceQuota`` and
  ``limitRange`` only when one of them is ``true`` (``auto``, its default, renders nothing) and
  ``networkPolicy`` only when ``true``: all three are sent as ``true``.
  The objects are named after the release (``policy_objects``); resync lists them across the
  fleet each tick and takes a Ready Tenant that lost one back through install (helm's upgrade
  makes what is missing again).
- **Pod Security** on the namespace (``pod_security_labels``): ``enforce`` at
  ``POD_SECURITY_ENFORCE`` (default ``baseline``: the vCluster pod runs as root without
  privilege escalation, which baseline admits and restricted does not; design.md section 5),
  ``warn`` and ``audit`` at ``restricted``. install writes them when it makes the namespace and
  puts them back when they were removed or changed (``kept_labels``, with the ``managed-by`` label
  that the helm-records admission policy selects the namespaces it guards by).

The settings (read once at start-up by ``Settings.from_env``; a bad value is a ``ConfigError``
naming the variable):

=================================  ==========================================================
``TENANT_RESOURCE_QUOTA``          ``name=quantity`` pairs, comma-separated, that change or add
                                   entries of the ResourceQuota's ``hard`` (default: the
                                   chart's 15, ``RESOURCE_QUOTA``); an entry cannot be removed
                                   (helm merges the chart's defaults back in)
``TENANT_LIMIT_DEFAULT``           the same for the LimitRange's ``default`` (a container's
                                   limits when it states none; ``LIMIT_DEFAULT``)
``TENANT_LIMIT_DEFAULT_REQUEST``   the same for its ``defaultRequest`` (``LIMIT_DEFAULT_REQUEST``)
``TENANT_EGRESS_CIDR``             where the tenant's workloads may connect (``0.0.0.0/0``)
``TENANT_EGRESS_EXCEPT``           comma-separated CIDRs inside it they may not reach (the
                                   chart's: ``EGRESS_EXCEPT``, the private and shared ranges);
                                   replaces the list
``POD_SECURITY_ENFORCE``           ``privileged``, ``baseline`` (default) or ``restricted``
=================================  ==========================================================
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from shared.errors import ConfigError
from shared.model import quantity
from shared.model.naming import LABEL_MANAGED_BY, MANAGED_BY

# The vcluster 0.21.2 chart's defaults (values.yaml, policies:), as the strings the chart renders.
RESOURCE_QUOTA: tuple[tuple[str, str], ...] = (
    ("requests.cpu", "10"),
    ("requests.memory", "20Gi"),
    ("requests.storage", "100Gi"),
    ("requests.ephemeral-storage", "60Gi"),
    ("limits.cpu", "20"),
    ("limits.memory", "40Gi"),
    ("limits.ephemeral-storage", "160Gi"),
    ("services.nodeports", "0"),
    ("services.loadbalancers", "1"),
    ("count/endpoints", "40"),
    ("count/pods", "20"),
    ("count/services", "20"),
    ("count/secrets", "100"),
    ("count/configmaps", "100"),
    ("count/persistentvolumeclaims", "20"),
)
LIMIT_DEFAULT: tuple[tuple[str, str], ...] = (("ephemeral-storage", "8Gi"), ("memory", "512Mi"), ("cpu", "1"))
LIMIT_DEFAULT_REQUEST: tuple[tuple[str, str], ...] = (
    ("ephemeral-storage", "3Gi"),
    ("memory", "128Mi"),
    ("cpu", "100m"),
)
EGRESS_CIDR = "0.0.0.0/0"
EGRESS_EXCEPT: tuple[str, ...] = ("100.64.0.0/10", "127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")

POD_SECURITY_LEVELS = ("privileged", "baseline", "restricted")
POD_SECURITY_ENFORCE = "baseline"
# What a pod that enforce admits but restricted would not is reported (kubectl's warning to the
# one who made it, the audit log's annotation), never refused, at this level.
POD_SECURITY_REPORT = "restricted"
LABEL_POD_SECURITY = "pod-security.kubernetes.io/"

# A resource name such as requests.cpu, count/pods or requests.nvidia.com/gpu.
_RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9./]*[a-z0-9])?$")


# The label the chart puts on everything it renders; resync lists the policies by it.
CHART_SELECTOR = "app=vcluster"


@dataclass(frozen=True)
class PolicyObject:
    """One object the chart renders from ``helm_policies``: its kind and name."""

    kind: str  # ResourceQuota, LimitRange or NetworkPolicy
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


def policy_objects(release: str) -> tuple[PolicyObject, ...]:
    """What the vcluster 0.21.2 chart renders in the release namespace from ``helm_policies``
    (templates/resourcequota.yaml, limitrange.yaml, networkpolicy.yaml; the names as
    testbed/reference/vcluster-0.21.2/rendered-isolated.yaml has them)."""
    return (
        PolicyObject("ResourceQuota", f"vc-{release}"),
        PolicyObject("LimitRange", f"vc-{release}"),
        PolicyObject("NetworkPolicy", f"vc-work-{release}"),
        PolicyObject("NetworkPolicy", f"vc-cp-{release}"),
    )


@dataclass(frozen=True)
class Isolation:
    """The numbers of a tenant's namespace policies, and its Pod Security level."""

    resource_quota: tuple[tuple[str, str], ...] = RESOURCE_QUOTA
    limit_default: tuple[tuple[str, str], ...] = LIMIT_DEFAULT
    limit_default_request: tuple[tuple[str, str], ...] = LIMIT_DEFAULT_REQUEST
    egress_cidr: str = EGRESS_CIDR
    egress_except: tuple[str, ...] = EGRESS_EXCEPT
    pod_security_enforce: str = POD_SECURITY_ENFORCE

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Isolation:
        cidr = _cidr("TENANT_EGRESS_CIDR", env.get("TENANT_EGRESS_CIDR", "").strip() or EGRESS_CIDR)
        raw_except = env.get("TENANT_EGRESS_EXCEPT", "").strip()
        excepted = tuple(s.strip() for s in raw_except.split(",") if s.strip()) if raw_except else EGRESS_EXCEPT
        for block in excepted:
            inner = _cidr("TENANT_EGRESS_EXCEPT", block)
            if inner.version != cidr.version or not inner.subnet_of(cidr):  # type: ignore[arg-type]
                raise ConfigError(f"TENANT_EGRESS_EXCEPT: {block} is not inside TENANT_EGRESS_CIDR {cidr}")
        level = env.get("POD_SECURITY_ENFORCE", "").strip().lower() or POD_SECURITY_ENFORCE
        if level not in POD_SECURITY_LEVELS:
            raise ConfigError(f"POD_SECURITY_ENFORCE must be one of {', '.join(POD_SECURITY_LEVELS)}, got {level!r}")
        return cls(
            resource_quota=_quantities(env, "TENANT_RESOURCE_QUOTA", RESOURCE_QUOTA),
            limit_default=_quantities(env, "TENANT_LIMIT_DEFAULT", LIMIT_DEFAULT),
            limit_default_request=_quantities(env, "TENANT_LIMIT_DEFAULT_REQUEST", LIMIT_DEFAULT_REQUEST),
            egress_cidr=str(cidr),
            egress_except=excepted,
            pod_security_enforce=level,
        )

    def helm_policies(self, control_plane: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The ``policies`` of a release's values (checked against the real chart's schema by
        tests/unit/test_values_schema.py). ``control_plane`` is the vCluster pod's own ``cpu`` and
        ``memory`` (its requests and limits: the Tenant's quota): that pod runs in the namespace the
        ResourceQuota bounds, so its share is added to the workloads' (``quota_with``)."""
        return {
            "resourceQuota": {"enabled": True, "quota": quota_with(dict(self.resource_quota), control_plane or {})},
            "limitRange": {
                "enabled": True,
                "default": dict(self.limit_default),
                "defaultRequest": dict(self.limit_default_request),
            },
            "networkPolicy": {
                "enabled": True,
                "outgoingConnections": {"ipBlock": {"cidr": self.egress_cidr, "except": list(self.egress_except)}},
            },
        }

    def changed(self, numbers: Mapping[str, Mapping[str, str]]) -> Isolation:
        """These numbers with entries changed or added (a plan's, ``shared.model.plans``): ``numbers``
        maps ``resource_quota``, ``limit_default`` or ``limit_default_request`` to entries, each
        already checked with ``entry_problem``. As with the settings, an entry cannot be removed."""

        def entries(name: str, current: Entries) -> Entries:
            return tuple((dict(current) | dict(numbers.get(name) or {})).items())

        return replace(
            self,
            resource_quota=entries("resource_quota", self.resource_quota),
            limit_default=entries("limit_default", self.limit_default),
            limit_default_request=entries("limit_default_request", self.limit_default_request),
        )

    def kept_labels(self) -> dict[str, str]:
        """The labels install keeps true on a tenant's namespace (put back when removed or changed):
        the Pod Security labels, and ``kubeopera.io/managed-by``, by which the helm-records admission
        policy (deploy/base/policy/tenant-helm-records.yaml) selects the namespaces it guards."""
        return {LABEL_MANAGED_BY: MANAGED_BY} | self.pod_security_labels()

    def pod_security_labels(self) -> dict[str, str]:
        """The Pod Security labels of a tenant's namespace."""
        return {
            LABEL_POD_SECURITY + "enforce": self.pod_security_enforce,
            LABEL_POD_SECURITY + "warn": POD_SECURITY_REPORT,
            LABEL_POD_SECURITY + "audit": POD_SECURITY_REPORT,
        }


def quota_with(quota: dict[str, str], control_plane: Mapping[str, str]) -> dict[str, str]:
    """The ResourceQuota's ``hard`` with the control plane's ``cpu`` and ``memory`` added to the
    requests and limits of each: the tenant's workloads keep their whole share whatever the
    Tenant's own quota (a control plane of 16 CPU would not even be admitted by the chart's 10)."""
    out = dict(quota)
    for resource, amount in control_plane.items():
        for scope in ("requests", "limits"):
            key = f"{scope}.{resource}"
            if key in out:
                out[key] = quantity.total(out[key], amount)
    return out


Entries = tuple[tuple[str, str], ...]


def entry_problem(key: str, value: str) -> str | None:
    """Why ``key: value`` cannot be an entry of the policies' numbers (None: it can): the one rule
    of a ``TENANT_*`` setting's entries and of a plan's (``shared.model.plans``)."""
    if not _RESOURCE_NAME.match(key):
        return f"{key!r} is not a resource name (requests.cpu, count/pods, requests.nvidia.com/gpu)"
    if not _non_negative(value):
        return f"{key} must be a Kubernetes quantity >= 0 (10, 500m, 20Gi), got {value!r}"
    return None


def _quantities(env: Mapping[str, str], name: str, defaults: Entries) -> Entries:
    """``defaults`` with the entries of ``name=quantity,...`` changed or added."""
    entries = dict(defaults)
    raw = env.get(name, "").strip()
    for item in (s.strip() for s in raw.split(",") if s.strip()):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not _RESOURCE_NAME.match(key):
            raise ConfigError(f"{name} must be name=quantity pairs, comma-separated (cpu=1,memory=2Gi), got {item!r}")
        if problem := entry_problem(key, value):
            raise ConfigError(f"{name}: {problem}")
        entries[key] = value
    return tuple(entries.items())


def _non_negative(value: str) -> bool:
    """A Kubernetes quantity (``shared.model.quantity``, the API server's grammar) of at least zero."""
    try:
        return quantity.parse(value) >= 0
    except ValueError:
        return False


def _cidr(name: str, value: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError:
        raise ConfigError(f"{name} must be CIDRs such as 10.0.0.0/8 (no host bits set), got {value!r}") from None
