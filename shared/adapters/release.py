"""Helm's own record of a release, read from the API without a helm process (the helm-record module).

``ReleaseState`` (``shared.model.release``) is the value a release is read as. ``shared.adapters.helm``
gets it from the helm CLI after an install or upgrade, and from here otherwise; ``ReleaseRecords``
reads it from the record helm's default storage driver keeps: one Secret per revision, type
``helm.sh/release.v1``, named
``sh.helm.release.v1.<release>.v<revision>``, labelled ``owner=helm``, ``name``, ``version`` (the
revision), ``status`` and ``createdAt`` / ``modifiedAt`` (Unix seconds). ``helm status`` reads the
same Secrets (by ``owner`` and ``name``) and reports the highest revision; so does
``current_state``. One namespaced LIST instead of a helm process: check-ready asks on every poll,
and a helm process costs 0.1-0.2 CPU-seconds (bench/RESULTS.md, issue 15).

**The record's body** (issue 29): what ``helm status``, ``helm get values`` and ``helm get metadata``
say is in the Secret's ``release`` key: helm's base64 of the gzip of the release as JSON
(``pkg/storage/driver/util.go``, ``encodeRelease``; ``decodeRelease`` reads it with or without the
gzip, by its magic bytes, and so does ``decode_record``). ``ReleaseRecords.current`` reads every
record with its data in one LIST and gives the highest revision as ``CurrentRelease``: its
revision (``version``), ``info.status``, ``info.last_deployed`` (``helm status``'s updated time),
``chart.metadata.version`` and ``config`` (the user-supplied values, ``helm get values``; null is
``{}``). install's idempotence check and the ownership guard read that instead of running helm.

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
made in the first place; the check of names, types and labels holds without it. A record read for
its body is checked so too, and each body must decode and name the release, namespace and revision its Secret's labels
say: a record that does not is refused with ``ReleaseTampered`` as well (helm itself fails to read
a history with a record it cannot decode). Those body checks are structural: a forged record
that is self-consistent would be believed (its values would be what the ownership guard sees, and
install would skip helm), as helm itself believes it. What keeps a tenant's syncer from writing
one is the admission policy; without it, the functions are no safer than helm. No message ever
shows a record's data: it holds the release's values and rendered manifest.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from shared.errors import ReleaseTampered
from shared.model.release import ReleaseState

RECORD_OWNER: Final = "helm"
RECORD_TYPE: Final = "helm.sh/release.v1"
RECORD_PREFIX: Final = "sh.helm.release.v1."
_REVISION = re.compile(r"[1-9][0-9]*")
# What a record's body may inflate to: more is refused, not decompressed (a bomb would hold install).
MAX_RELEASE_BYTES: Final = 64 * 1024 * 1024
# The first bytes of a gzip stream (pkg/storage/driver/util.go, magicGzip): helm gzips every record
# it writes, and reads one without them as plain JSON.
GZIP_MAGIC: Final = b"\x1f\x8b\x08"
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


@dataclass(frozen=True)
class SecretRecord:
    """A Secret with its ``release`` key, as read for the release's body: ``release`` is the key's
    bytes (the API's base64 undone; helm's own encoding is ``decode_record``'s), None if absent."""

    meta: SecretMeta
    release: bytes | None = field(repr=False)


@dataclass(frozen=True)
class CurrentRelease:
    """A release's highest revision as helm's record holds it: its state (with the chart version it
    runs) and its user-supplied values (what ``helm get values`` gives)."""

    state: ReleaseState
    values: Mapping[str, Any] = field(repr=False)


class RecordSource(Protocol):
    """The calls ``ReleaseRecords`` needs from the Kubernetes adapter (``shared.adapters.kube.Kube``):
    the release's Secrets by label, without their data and with it (one LIST each)."""

    def list_secret_records(self, namespace: str, label_selector: str) -> list[SecretMeta]: ...
    def list_release_records(self, namespace: str, label_selector: str) -> list[SecretRecord]: ...


class CurrentReleases(Protocol):
    """What reads a release with its values (``ReleaseRecords``); the helm adapter is given one."""

    def current(self, name: str, namespace: str) -> CurrentRelease | None: ...


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


def current_release(name: str, namespace: str, records: Iterable[SecretRecord]) -> CurrentRelease | None:
    """The release's highest revision, decoded from its record (``decode_record``); None if there is
    none. Raises ``ReleaseTampered`` if the history holds a Secret that is not helm's (``history``)
    or a record that does not decode to the release and revision its labels say (each is decoded:
    a rollback would read an older one)."""
    records = list(records)
    mine = {id(meta) for meta in history(name, namespace, (r.meta for r in records))}
    decoded = [decode_record(name, namespace, r) for r in records if id(r.meta) in mine]
    return max(decoded, key=lambda found: found.state.revision, default=None)


def decode_record(name: str, namespace: str, record: SecretRecord) -> CurrentRelease:
    """The release a record of release ``name`` holds (its ``release`` key: base64 of gzip of JSON,
    or of plain JSON). Raises ``ReleaseTampered`` for a record that ``record_flaw`` refuses, one that
    does not decode, or one whose body names another release, namespace or revision than its labels."""
    meta = record.meta
    flaw = record_flaw(name, meta)
    if flaw is not None:
        raise ReleaseTampered(_tampered_message(name, namespace, [(meta, flaw)]))
    body = _body(record.release)
    if isinstance(body, str):
        raise ReleaseTampered(_tampered_message(name, namespace, [(meta, body)]))
    revision = int(meta.labels["version"])
    info, chart, config = body.get("info"), body.get("chart"), body.get("config")
    status = info.get("status") if isinstance(info, Mapping) else None
    metadata = chart.get("metadata") if isinstance(chart, Mapping) else None
    version = metadata.get("version") if isinstance(metadata, Mapping) else None
    why = None
    if body.get("name") != name or body.get("namespace") != namespace:  # helm always writes both
        why = f"its body is a release of another name or namespace than {namespace}/{name}"
    elif body.get("version") != revision or isinstance(body.get("version"), bool):
        why = f"its body is another revision than {revision}, the one its labels give"
    elif not isinstance(status, str) or not status:
        why = "its body gives no info.status"
    elif config is not None and not isinstance(config, Mapping):
        why = "its body's config (the release's values) is not a JSON object"
    elif version is not None and not isinstance(version, str):
        why = "its body's chart.metadata.version is not a string"
    if why is not None:
        raise ReleaseTampered(_tampered_message(name, namespace, [(meta, why)]))
    state = ReleaseState(
        name=name,
        namespace=namespace,
        revision=revision,
        status=str(status),
        chart_version=version or "",
        updated=_rfc3339(info.get("last_deployed") if isinstance(info, Mapping) else None),
    )
    return CurrentRelease(state, dict(config or {}))


def _body(data: bytes | None) -> Mapping[str, Any] | str:
    """A record's body as JSON, or why it is not one (never any of its content)."""
    if not data:
        return "it has no release key"
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return "its release key is not base64"
    if raw[:3] == GZIP_MAGIC:
        try:
            # bounded: a Secret holds at most 1 MiB, a record of it rarely more than 10 times that
            inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            raw = inflate.decompress(raw, MAX_RELEASE_BYTES)
        except zlib.error:
            return "its release key is not a readable gzip stream"
        if inflate.unconsumed_tail:
            return f"its release key inflates to more than {MAX_RELEASE_BYTES} bytes"
        if not inflate.eof:
            return "its release key is not a readable gzip stream"
    try:
        body = json.loads(raw)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError alike
        return "its release key is not a release in JSON"
    return body if isinstance(body, Mapping) else "its release key is not a release in JSON"


def _rfc3339(value: object) -> datetime | None:
    """A Go ``time.Time`` as JSON (RFC 3339, nanoseconds): Python keeps microseconds."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _unix_time(value: str | None) -> datetime | None:
    if value is None or not value.isdigit():
        return None
    return datetime.fromtimestamp(int(value), UTC)


class ReleaseRecords:
    """``Releases`` and ``CurrentReleases`` from helm's record in the release's namespace: one LIST
    of its Secrets each. ``release`` reads their labels (check-ready's poll); ``current`` reads their
    bodies too (install's and cleanup's helm step). Both raise ``ReleaseTampered`` when that history
    holds a Secret helm did not write."""

    def __init__(self, kube: RecordSource) -> None:
        self._kube = kube

    def release(self, name: str, namespace: str) -> ReleaseState | None:
        return current_state(name, namespace, self._kube.list_secret_records(namespace, record_selector(name)))

    def current(self, name: str, namespace: str) -> CurrentRelease | None:
        return current_release(name, namespace, self._kube.list_release_records(namespace, record_selector(name)))
