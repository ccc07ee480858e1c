"""The host cluster's Service range, which every vCluster must be told (values ``serviceCIDR``).

vcluster 0.21.2 finds the host's Service range, when it is not given, by creating a Service with
an impossible cluster IP and reading the range out of the API server's error message. API servers
of 1.33 and later no longer write the range there: the syncer then falls back to 10.96.0.0/12,
gives the virtual ``kubernetes`` Service an address from it that the host does not have, and
crash-loops (``failed to allocate IP ...: the provided network does not match the current
range``). A vCluster that booted once with the wrong range keeps it on its volume. So install
sends ``serviceCIDR`` in every release's values, and refuses to start without one:

- ``SERVICE_CIDR`` (the setting) wins: one CIDR, or an IPv4 and an IPv6 one, comma-separated, as
  kube-apiserver's ``--service-cluster-ip-range`` has it;
- otherwise the cluster's ServiceCIDR objects (``networking.k8s.io/v1``, GA in Kubernetes 1.33;
  the API server makes the one named ``kubernetes`` from its flag), read once at start;
- a host older than 1.33 serves no such objects: install stops at start with a ``ConfigError``
  that says to set ``SERVICE_CIDR``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence

from shared.errors import ConfigError

# The ServiceCIDR the API server makes from --service-cluster-ip-range.
DEFAULT_OBJECT = "kubernetes"


def parse(value: str) -> str:
    """``SERVICE_CIDR`` checked and written canonically ('' when unset)."""
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts:
        return ""
    try:
        networks = [ipaddress.ip_network(p, strict=True) for p in parts]
    except ValueError as err:
        raise ConfigError(f"SERVICE_CIDR must be CIDRs such as 10.96.0.0/12, got {value!r}: {err}") from None
    if len(networks) > 2 or len({n.version for n in networks}) != len(networks):
        raise ConfigError(f"SERVICE_CIDR is one range, or an IPv4 and an IPv6 one, comma-separated; got {value!r}")
    return ",".join(str(n) for n in networks)


def choose(setting: str, objects: Sequence[tuple[str, Sequence[str]]] | None) -> str:
    """The range to send: the setting if given, else the cidrs of ServiceCIDR ``kubernetes`` (or,
    without it, of every ServiceCIDR); ``objects`` is None when the API serves no ServiceCIDRs."""
    if setting:
        return setting
    if objects is None:
        raise ConfigError(
            "SERVICE_CIDR is not set and this API server serves no ServiceCIDR objects (networking.k8s.io/v1, "
            "Kubernetes 1.33 and later): set SERVICE_CIDR to the cluster's Service range "
            "(kube-apiserver --service-cluster-ip-range)"
        )
    named = dict(objects)
    cidrs = list(named.get(DEFAULT_OBJECT, ())) or [c for _, found in objects for c in found]
    if not cidrs:
        raise ConfigError(
            "SERVICE_CIDR is not set and the cluster has no ServiceCIDR with a range: set SERVICE_CIDR to the "
            "cluster's Service range (kube-apiserver --service-cluster-ip-range)"
        )
    return parse(",".join(cidrs))


def resolve(setting: str, read: Callable[[], Sequence[tuple[str, Sequence[str]]] | None]) -> str:
    """``choose``, reading the cluster only when the setting does not give the range."""
    return setting or choose(setting, read())
