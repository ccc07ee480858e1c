"""The `kubeopera-tenants status` table, from Tenant objects as the API server returns them."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.cli import status_table
from shared.model.naming import ANNOTATION_DELETION_PROTECTION, DEFAULT_TENANT_NAMESPACE


def obj(name: str, created: str, protection: str | None = None, **status: str) -> dict[str, object]:
    meta: dict[str, object] = {"namespace": DEFAULT_TENANT_NAMESPACE, "name": name, "creationTimestamp": created}
    if protection is not None:
        meta["annotations"] = {ANNOTATION_DELETION_PROTECTION: protection, "example.com/other": "x"}
    return {"metadata": meta, "status": status}


def test_table_lists_phase_vcluster_age_and_message_sorted_by_name() -> None:
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    table = status_table(
        [
            obj("zed", "2026-11-30T11:59:30Z"),
            obj("alice", "2026-11-28T10:00:00Z", "true", phase="Ready", vclusterName="vc-alice", message="ready"),
            obj("bob", "2026-11-30T09:30:00Z", "false", phase="Failed", message="line one\nline two"),
            obj("carol", "2026-11-30T11:00:00Z", "yes"),  # from before the policy: still protected
        ],
        now,
    ).splitlines()
    assert table[0].split() == ["NAMESPACE", "NAME", "PHASE", "VCLUSTER", "AGE", "PROTECTED", "MESSAGE"]
    assert [row.split()[1:6] for row in table[1:]] == [
        ["alice", "Ready", "vc-alice", "2d", "yes"],
        ["bob", "Failed", "-", "2h", "-"],
        ["carol", "Pending", "-", "1h", "yes"],
        ["zed", "Pending", "-", "30s", "-"],
    ]
    assert table[2].endswith("line one line two")
    assert len({row.index(row.split()[2]) for row in table}) == 1  # columns line up
