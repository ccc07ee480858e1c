"""A helm release's state, and helm's own record of it read from the API without a helm process.

``ReleaseState`` is the value both readers give. ``shared.helm`` gets it from the helm CLI (after
an install, or as ``helm status``); ``ReleaseRecords`` gets it from the record helm's default
storage driver keeps: one Secret per revision, type ``helm.sh/release.v1``, named
``sh.helm.release.v1.<release>.v<revision>``, labelled ``owner=helm``, ``name``, ``version`` (the
revision), ``status`` and ``createdAt`` / ``modifiedAt`` (Unix seconds). ``helm status`` reads the
same Secrets (by ``owner`` and ``name``) and reports the highest revision; so does
``current_state``. One namespaced LIST instead of a helm process: check-ready asks on every poll,
and a helm process costs 0.1-0.2 CPU-seconds (bench/RESULTS.md, issue 15).

This holds for helm's default driver (``HELM_DRIVER`` unset or ``secret``), the one the
functions use; the labels are helm 3's storage contract (``pkg/storage/driver/secrets.go``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Protocol

DEPLOYED: Final = "deployed"
FAILED: Final = "failed"
PENDING_STATES: Final = frozenset({"pending-install", "pending-upgrade", "pending-rollback", "uninstalling"})

RECORD_OWNER: Final = "helm"


@dataclass(frozen=True)
class ReleaseState:
    name: str
    namespace: str
    revision: int
    status: str
    chart_version: str
    updated: datetime | None = None

    @property
    def deployed(self) -> bool:
        return self.status == DEPLOYED

    @property
    def pending(self) -> bool:
        return self.status in PENDING_STATES


class Releases(Protocol):
    """What reads a release's current state: ``shared.helm.Helm`` and ``ReleaseRecords``."""

    def release(self, name: str, namespace: str) -> ReleaseState | None: ...


class RecordSource(Protocol):
    """The one call ``ReleaseRecords`` needs from the Kubernetes adapter (``shared.kube.Kube``)."""

    def list_secret_labels(self, namespace: str, label_selector: str) -> list[dict[str, str]]: ...


def record_selector(name: str) -> str:
    """The label selector of a release's records, as helm queries them."""
    return f"owner={RECORD_OWNER},name={name}"


def current_state(name: str, namespace: str, records: Iterable[Mapping[str, str]]) -> ReleaseState | None:
    """The state of the highest revision among a release's record labels; None if there is none.
    A record whose ``version`` is not a number is not helm's and is passed over."""
    best: tuple[int, Mapping[str, str]] | None = None
    for labels in records:
        if labels.get("owner") != RECORD_OWNER or labels.get("name") != name:
            continue
        version = labels.get("version", "")
        if not version.isdigit():
            continue
        if best is None or int(version) > best[0]:
            best = (int(version), labels)
    if best is None:
        return None
    revision, labels = best
    return ReleaseState(
        name=name,
        namespace=namespace,
        revision=revision,
        status=labels.get("status", "unknown"),
        chart_version="",  # in the record's encoded body only; `helm status` does not give it either
        updated=_unix_time(labels.get("modifiedAt") or labels.get("createdAt")),
    )


def _unix_time(value: str | None) -> datetime | None:
    if value is None or not value.isdigit():
        return None
    return datetime.fromtimestamp(int(value), UTC)


class ReleaseRecords:
    """``Releases`` from helm's record in the release's namespace: one LIST of its Secrets."""

    def __init__(self, kube: RecordSource) -> None:
        self._kube = kube

    def release(self, name: str, namespace: str) -> ReleaseState | None:
        return current_state(name, namespace, self._kube.list_secret_labels(namespace, record_selector(name)))
