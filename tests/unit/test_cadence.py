"""shared.model.cadence: which Ready Tenants a resync pass looks at closely, with no state kept."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from shared.model import cadence

TICK = 300
UIDS = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"tenant-{i}")) for i in range(1000)]
# a tick of the PingSource's schedule: on the minute, every 5 minutes
FIRST = datetime(2026, 12, 7, 9, 35, tzinfo=UTC)


@pytest.mark.parametrize("passes", [2, 3, 5, 12])
def test_any_run_of_as_many_ticks_looks_at_every_tenant_closely_exactly_once(passes: int) -> None:
    for start in range(passes):  # wherever the run of ticks begins
        ticks = [FIRST + timedelta(seconds=TICK * (start + k)) for k in range(passes)]
        looks = Counter(uid for at in ticks for uid in UIDS if cadence.closely(uid, at, TICK, passes))
        assert set(looks) == set(UIDS) and set(looks.values()) == {1}


def test_each_pass_takes_about_its_share_of_the_fleet() -> None:
    shares = Counter(cadence.share(uid, 5) for uid in UIDS)
    assert sorted(shares) == [0, 1, 2, 3, 4]
    assert all(150 <= n <= 250 for n in shares.values()), shares  # 200 each, give or take: a hash


def test_one_pass_looks_at_every_tenant_on_every_tick() -> None:
    assert all(cadence.closely(uid, FIRST + timedelta(seconds=s), TICK, 1) for uid in UIDS[:50] for s in (0, 7, 301))


def test_a_tick_keeps_its_share_whenever_it_is_delivered_and_the_next_one_moves_on() -> None:
    """The share follows the tick's scheduled time (its event's ``time``): within its period it is
    the same, the next tick's is the next share."""
    at = cadence.tick_share(FIRST, TICK, 5)
    assert cadence.tick_share(FIRST + timedelta(seconds=TICK - 1), TICK, 5) == at
    assert cadence.tick_share(FIRST + timedelta(seconds=TICK), TICK, 5) == (at + 1) % 5
