"""shared.adapters.release: a release read from the body of helm's record (issue 29), made here the
way helm's Secret driver makes it (base64 of the gzip of the release's JSON), so that install's
idempotence check and the ownership guard need no helm process; and the bodies that are refused."""

from __future__ import annotations

import base64
import gzip
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.adapters.release import (
    MAX_RELEASE_BYTES,
    RECORD_TYPE,
    ReleaseRecords,
    SecretMeta,
    SecretRecord,
    current_release,
    decode_record,
)
from shared.errors import ReleaseTampered
from tests.unit.fakes import helm_release_body

NAME, NAMESPACE = "vc-bob", "vcluster-bob"
VALUES = {"controlPlane": {"distro": {"k8s": {"enabled": True}}}, "sync": {"toHost": {"ingresses": {"enabled": True}}}}


def record(revision: int, status: str = "deployed", body: bytes | None = None, **labels: str) -> SecretRecord:
    meta = SecretMeta(
        f"sh.helm.release.v1.{NAME}.v{revision}",
        RECORD_TYPE,
        {"owner": "helm", "name": NAME, "version": str(revision), "status": status, **labels},
    )
    return SecretRecord(meta, helm_release_body(NAME, NAMESPACE, revision, status, VALUES) if body is None else body)


def encoded(release: Any, gzipped: bool = True) -> bytes:
    raw = json.dumps(release).encode()
    return base64.b64encode(gzip.compress(raw) if gzipped else raw)


def test_a_record_gives_the_revision_status_time_chart_and_values() -> None:
    found = decode_record(NAME, NAMESPACE, record(3, "deployed"))
    state = found.state
    assert (state.name, state.namespace, state.revision, state.status) == (NAME, NAMESPACE, 3, "deployed")
    assert state.chart_version == "0.21.2"
    assert state.updated == datetime(2026, 12, 4, 2, 30, 0, 123456, tzinfo=UTC)  # Go's nanoseconds, to microseconds
    assert found.values == VALUES


def test_a_record_without_gzip_is_read_as_helm_reads_it() -> None:
    body = helm_release_body(NAME, NAMESPACE, 1, "pending-install", VALUES, gzipped=False)
    found = decode_record(NAME, NAMESPACE, record(1, "pending-install", body))
    assert found.state.pending and found.values == VALUES


def test_null_values_are_none_given_and_an_offset_time_is_kept() -> None:
    body = helm_release_body(NAME, NAMESPACE, 1, "deployed", None, last_deployed="2026-12-04T03:30:00.5+01:00")
    found = decode_record(NAME, NAMESPACE, record(1, body=body))
    assert found.values == {}
    assert found.state.updated == datetime(2026, 12, 4, 2, 30, 0, 500000, tzinfo=UTC)


def test_the_highest_revision_is_the_current_one_and_no_record_is_no_release() -> None:
    older = helm_release_body(NAME, NAMESPACE, 9, "superseded", {"old": True}, chart_version="0.21.1")
    found = current_release(NAME, NAMESPACE, [record(9, "superseded", older), record(10), record(2, "superseded")])
    assert found is not None and (found.state.revision, found.state.status) == (10, "deployed")
    assert found.values == VALUES
    assert current_release(NAME, NAMESPACE, []) is None
    # Another release's records beside it are not its history.
    neighbour = SecretMeta("sh.helm.release.v1.vc-bob2.v1", RECORD_TYPE, {"owner": "helm", "name": "vc-bob2"})
    other = SecretRecord(neighbour, b"x")
    assert current_release(NAME, NAMESPACE, [other]) is None


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (None, "it has no release key"),
        (b"", "it has no release key"),
        (b"not base64 at all!", "its release key is not base64"),
        (base64.b64encode(b"\x1f\x8b\x08 truncated gzip"), "its release key is not a readable gzip stream"),
        (base64.b64encode(b"{not json"), "its release key is not a release in JSON"),
        (base64.b64encode(gzip.compress(b"\xff\xfe")), "its release key is not a release in JSON"),
        (encoded(["a", "list"]), "its release key is not a release in JSON"),
        # a body copied from another release, or from another revision of this one
        (
            helm_release_body("vc-alice", NAMESPACE, 4, "deployed", {}),
            "its body is a release of another name or namespace than vcluster-bob/vc-bob",
        ),
        (
            helm_release_body(NAME, "vcluster-alice", 4, "deployed", {}),
            "its body is a release of another name or namespace than vcluster-bob/vc-bob",
        ),
        (
            helm_release_body(NAME, NAMESPACE, 3, "deployed", {}),
            "its body is another revision than 4, the one its labels give",
        ),
        (encoded({"name": NAME, "namespace": NAMESPACE, "version": 4}), "its body gives no info.status"),
        (
            encoded(
                {"name": NAME, "namespace": NAMESPACE, "version": 4, "info": {"status": "deployed"}, "config": ["x"]}
            ),
            "its body's config (the release's values) is not a JSON object",
        ),
        (  # helm always writes the namespace
            encoded({"name": NAME, "version": 4, "info": {"status": "deployed"}, "config": {}}),
            "its body is a release of another name or namespace than vcluster-bob/vc-bob",
        ),
    ],
)
def test_a_record_that_is_not_helms_release_is_refused_without_its_content(body: bytes | None, why: str) -> None:
    with pytest.raises(ReleaseTampered) as raised:
        decode_record(NAME, NAMESPACE, SecretRecord(record(4).meta, body))
    message = str(raised.value)
    # The Secret by name, type and labels, and why in fixed words: nothing of what it holds.
    labels = f"name={NAME},owner=helm,status=deployed,version=4"
    head = f"the history of helm release {NAMESPACE}/{NAME} was tampered with: "
    assert message == (
        f"{head}Secret sh.helm.release.v1.{NAME}.v4 (type {RECORD_TYPE}, labels {labels}): {why}"
        ". It carries the release's labels but is not a record helm wrote; no helm operation runs on this history"
    )


def test_a_flawed_record_is_refused_before_its_body_is_read() -> None:
    forged = SecretRecord(
        SecretMeta("vc-bob-forged", "Opaque", {"owner": "helm", "name": NAME, "version": "99"}),
        helm_release_body(NAME, NAMESPACE, 99, "deployed", {"hostile": "values"}),
    )
    with pytest.raises(ReleaseTampered, match="Secret vc-bob-forged .*its type is not helm.sh/release.v1"):
        decode_record(NAME, NAMESPACE, forged)
    with pytest.raises(ReleaseTampered, match="Secret vc-bob-forged "):
        current_release(NAME, NAMESPACE, [record(1), forged])


def test_an_older_record_that_does_not_decode_refuses_the_history() -> None:
    """helm reads every record of a history (a rollback uses the one before): so does ``current``."""
    with pytest.raises(ReleaseTampered, match=r"v1 .*its release key is not base64"):
        current_release(NAME, NAMESPACE, [record(1, "superseded", b"garbage!"), record(2)])


def test_the_reader_lists_the_records_with_their_data_once() -> None:
    asked: list[tuple[str, str]] = []

    class Source:
        def list_secret_records(self, namespace: str, label_selector: str) -> list[SecretMeta]:
            raise AssertionError("the body is read with its labels, in one LIST")

        def list_release_records(self, namespace: str, label_selector: str) -> list[SecretRecord]:
            asked.append((namespace, label_selector))
            return [record(1, "superseded"), record(2)]

    found = ReleaseRecords(Source()).current(NAME, NAMESPACE)
    assert found is not None and found.state.revision == 2 and found.values == VALUES
    assert asked == [(NAMESPACE, f"owner=helm,name={NAME}")]


def test_a_record_that_inflates_past_the_bound_is_refused_not_decompressed() -> None:
    """A gzip bomb in a record (a Secret of at most 1 MiB inflating without end) would hold install's
    memory; past ``MAX_RELEASE_BYTES`` the record is refused as tampered."""
    bomb = base64.b64encode(gzip.compress(b" " * (MAX_RELEASE_BYTES + 1)))
    with pytest.raises(ReleaseTampered, match=f"inflates to more than {MAX_RELEASE_BYTES} bytes"):
        decode_record(NAME, NAMESPACE, SecretRecord(record(4).meta, bomb))
