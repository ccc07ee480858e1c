"""Helm's own record of a release, read from the API without a helm process.

``ReleaseState`` (``shared.model.release``) is the value both readers give. ``shared.adapters.helm``
gets it from the helm CLI (after an install, or as ``helm status``); ``ReleaseRecords`` gets it
from the record helm's default storage driver keeps: one Secret per revision, type ``helm.sh/release.v1``, named
``sh.helm.release.v1.<release>.v<revision>``, labelled ``owner=helm``, ``name``, ``version`` (the
revision), ``status`` and ``createdAt`` / ``modifiedAt`` (Unix seconds). ``helm status`` reads the
same Secrets (by ``owner`` and ``name``) and reports the highest revision; so does
``current_state``. One namespaced LIST instead of a helm process: check-ready asks on every poll,
and a helm process costs 0.1-0.2 CPU-seconds (bench/RESULTS.md, issue 15).

This holds for helm's default driver (``HELM_DRIVER`` unset or ``secret``), the one the
functions use; the labels are helm 3's storage contract (``pkg/storage/driver/secrets.go``).

**A tampered history is refused, not read** (issue 23, item 3). The records live in the Tenant's
namespace, where its vCluster's syncer may create Secrets; helm selects a release's records by
the labels alone. So every Secret the selector returns must be a record helm itself would write
(``record_flaw``): type ``helm.sh/release.v1``, named ``sh.helm.release.v1.<release>.v<revision>``,
its ``name`` label the release and its ``version`` label that revision. Any other Secret with the
release's labels raises ``ReleaseTampered`` (``history``), naming each such Secret with its type
and labels, never its data; the functions then run no helm operation on that history. The
admission policy ``deploy/base/policy/tenant-helm-records.yaml`` keeps such Secrets from being
made in the first place; this check holds without it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Protocol

from shared.errors import ReleaseTampered
from shared.model.release import ReleaseState

RECORD_OWNER: Final = "helm"
RECORD_TYPE: Final = "helm.sh/release.v1"
RECORD_PREFIX: Final = "sh.helm.release.v1."
_REVISION = re.compile(r"[1-9][0-9]*")
# How much of a tampered history a message shows: the first Secrets, and the first labels of each.
_SHOWN_SECRETS = 3
_SHOWN_LABELS = 8


class Releases(Protocol):
    """What reads a release's current state: ``shared.adapters.helm.Helm`` and ``ReleaseRecords``."""

    def release(self, name: str, namespace: str) -> ReleaseState | None: ...


@dataclass(frozen=True)
class SecretMeta:
    """A Secret as the release reader sees it: name, type and labels; its data is never read."""

    name: str
    type: str
    labels: Mapping[str, str]


class RecordSource(Protocol):
    """The one call ``ReleaseRecords`` needs from the Kubernetes adapter (``shared.adapters.kube.Kube``)."""

    def list_secret_records(self, namespace: str, label_selector: str) -> list[SecretMeta]: ...


def record_selector(name: str) -> str:
    """The label selector of a release's records, as helm queries them."""
    return f"owner={RECORD_OWNER},name={name}"


def record_name(name: str, revision: int) -> str:
    """The name helm gives the Secret of a release's revision."""
    return f"{RECORD_PREFIX}{name}.v{revision}"


def record_flaw(name: str, secret: SecretMeta) -> str | None:
    """Why ``secret``, which carries release ``name``'s labels, is not helm's record of it; None
    when it is: type ``helm.sh/release.v1``, named ``sh.helm.release.v1.<name>.v<revision>``, and
    labelled ``owner=helm``, ``name=<name>``, ``version=<revision>``."""
    if secret.type != RECORD_TYPE:
        return f"its type is not {RECORD_TYPE}"
    prefix = f"{RECORD_PREFIX}{name}.v"
    revision = secret.name[len(prefix) :] if secret.name.startswith(prefix) else ""
    if not _REVISION.fullmatch(revision):
        return f"its name is not {prefix}<revision>"
    if secret.labels.get("owner") != RECORD_OWNER or secret.labels.get("name") != name:
        return f"its labels do not say owner={RECORD_OWNER},name={name}"
    if secret.labels.get("version") != revision:
        return f"its version label does not say {revision}, the revision its name gives"
    return None


def history(name: str, namespace: str, secrets: Iterable[SecretMeta]) -> list[SecretMeta]:
    """helm's records of release ``name`` among ``secrets`` (those of another release or not
    labelled by helm are passed over). Raises ``ReleaseTampered`` if a Secret carrying the
    release's labels is not one of helm's records."""
    mine = [s for s in secrets if s.labels.get("owner") == RECORD_OWNER and s.labels.get("name") == name]
    flawed = [(s, why) for s in mine if (why := record_flaw(name, s)) is not None]
    if flawed:
        raise ReleaseTampered(_tampered_message(name, namespace, flawed))
    return mine


def _tampered_message(name: str, namespace: str, flawed: list[tuple[SecretMeta, str]]) -> str:
    shown = [
        f"Secret {s.name} (type {s.type or '(none)'}, labels {_labels_text(s.labels)}): {why}"
        for s, why in sorted(flawed, key=lambda found: found[0].name)[:_SHOWN_SECRETS]
    ]
    more = len(flawed) - len(shown)
    return (
        f"the history of helm release {namespace}/{name} was tampered with: "
        + "; ".join(shown)
        + (f"; and {more} more" if more else "")
        + ". It carries the release's labels but is not a record helm wrote; no helm operation runs on this history"
    )


def _labels_text(labels: Mapping[str, str]) -> str:
    items = [f"{k}={v}" for k, v in sorted(labels.items())]
    return ",".join(items[:_SHOWN_LABELS]) + (",..." if len(items) > _SHOWN_LABELS else "")


def current_state(name: str, namespace: str, secrets: Iterable[SecretMeta]) -> ReleaseState | None:
    """The state of the highest revision among the release's records; None if there is none.
    Raises ``ReleaseTampered`` if the history holds a Secret that is not helm's (``history``)."""
    records = history(name, namespace, secrets)
    if not records:
        return None
    labels = max(records, key=lambda r: int(r.labels["version"])).labels
    return ReleaseState(
        name=name,
        namespace=namespace,
        revision=int(labels["version"]),
        status=labels.get("status", "unknown"),
        chart_version="",  # in the record's encoded body only; `helm status` does not give it either
        updated=_unix_time(labels.get("modifiedAt") or labels.get("createdAt")),
    )


def _unix_time(value: str | None) -> datetime | None:
    if value is None or not value.isdigit():
        return None
    return datetime.fromtimestamp(int(value), UTC)


class ReleaseRecords:
    """``Releases`` from helm's record in the release's namespace: one LIST of its Secrets.
    ``release`` raises ``ReleaseTampered`` when that history holds a Secret helm did not write."""

    def __init__(self, kube: RecordSource) -> None:
        self._kube = kube

    def release(self, name: str, namespace: str) -> ReleaseState | None:
        return current_state(name, namespace, self._kube.list_secret_records(namespace, record_selector(name)))
