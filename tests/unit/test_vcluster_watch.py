"""The vCluster watch: which StatefulSet changes become check-ready's hints, and how the watch goes
on through an expired version, a failed request and a broker that does not take a hint."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from cloudevents.core.base import BaseCloudEvent

from functions import vcluster_watch
from functions.vcluster_watch import Watch
from shared.adapters.kube.workloads import _change
from shared.delivery import events
from shared.errors import TemporaryError, WatchExpired
from shared.model import event_types, lifecycle
from shared.model.cluster import Rollout
from shared.model.ownership import Owner
from shared.model.vcluster_watch import Change, Seen, relisted, tenant_of, worth_a_look
from tests.unit.fakes import FakeHelm, FakeKube, FakeKubeoperaApi, FakeSink, fake_runtime

BOOTING = Rollout(generation=1, observed_generation=1, replicas=1, ready_replicas=0, updated_replicas=1)
UP = Rollout(generation=1, observed_generation=1, replicas=1, ready_replicas=1, updated_replicas=1)
ALICE = Owner("tenants", "alice", "uid-a")
BOB = Owner("tenants", "bob", "uid-b")


def seen(owner: Owner | None, rollout: Rollout = BOOTING, name: str = "") -> Seen:
    release = name or f"vc-{owner.name if owner else 'stray'}"
    return Seen(namespace=release.replace("vc-", "vcluster-"), name=release, owner=owner, rollout=rollout)


def change(kind: str, what: Seen | None, version: str) -> Change:
    return Change(kind=kind, seen=what, resource_version=version)


def run(
    kube: FakeKube, sink: FakeSink, namespace: str | None = "tenants", clock: Callable[[], float] = time.monotonic
) -> Watch:
    """The watch until the fake has no WATCH left to give."""
    stop = threading.Event()
    kube.out_of_watches = stop.set
    watch = Watch(kube, lambda: sink, namespace, clock)
    watch.run(stop)
    return watch


def waits_of(
    kube: FakeKube, sink: FakeSink, monkeypatch: pytest.MonkeyPatch, clock: Callable[[], float] = time.monotonic
) -> list[float]:
    """The watch until the fake has no WATCH left to give, with the waits it took (not slept)."""
    waits: list[float] = []
    stop = threading.Event()
    monkeypatch.setattr(stop, "wait", lambda seconds: waits.append(seconds))
    kube.out_of_watches = stop.set
    Watch(kube, lambda: sink, "tenants", clock).run(stop)
    return waits


def hinted(sink: FakeSink) -> list[str]:
    """The Tenants the hints sent name, in order; each is check-ready's hint, as the step table says."""
    assert lifecycle.STEP_FOR_TYPE[event_types.VCLUSTER_CHANGED] == lifecycle.CHECK_READY
    assert all(e.get_type() == event_types.VCLUSTER_CHANGED for e in sink.sent)
    return [events.tenant_ref(e).key for e in sink.sent]


# -- the decision ----------------------------------------------------------------------------


def test_a_change_is_worth_a_look_when_it_moves_what_check_ready_decides_on() -> None:
    observed = Rollout(generation=1, observed_generation=1, replicas=1, ready_replicas=0, updated_replicas=0)
    restarting = Rollout(generation=2, observed_generation=1, replicas=1, ready_replicas=1, updated_replicas=1)
    assert worth_a_look(seen(ALICE, BOOTING), seen(ALICE, UP))  # its pod became ready: Ready
    assert worth_a_look(seen(ALICE, UP), seen(ALICE, BOOTING))  # no pod ready: VClusterAvailable False
    assert worth_a_look(None, seen(ALICE, UP))  # new, and ready already
    assert worth_a_look(seen(ALICE, UP), seen(ALICE, restarting))  # the current spec no longer rolled out
    assert worth_a_look(seen(ALICE, UP), seen(BOB, UP))  # another Tenant's now
    assert not worth_a_look(seen(ALICE, UP), seen(ALICE, UP))  # a label, an annotation, a resync
    assert not worth_a_look(seen(ALICE, BOOTING), seen(ALICE, observed))  # the controller's steps before ready
    assert not worth_a_look(None, seen(ALICE, BOOTING))  # new, nothing ready
    assert not worth_a_look(seen(ALICE, UP), None)  # gone: the look finds nothing (resync re-installs)
    assert not worth_a_look(None, None)


def test_a_relist_names_what_became_worth_a_look_and_nothing_else() -> None:
    known = {s.key: s for s in (seen(ALICE, BOOTING), seen(BOB, UP), seen(None, UP))}
    carol, dora = seen(Owner("tenants", "carol", "uid-c")), seen(Owner("tenants", "dora", "uid-d"), UP)
    listed = {s.key: s for s in (seen(ALICE, UP), seen(BOB, UP), carol, dora)}
    assert {s.name for s in relisted(known, listed)} == {"vc-alice", "vc-dora"}


def test_the_tenant_of_a_change_is_the_owner_labels_one_in_the_namespace_served() -> None:
    ref = tenant_of(seen(ALICE), "tenants")
    assert ref is not None and (ref.namespace, ref.name, ref.uid, ref.generation) == ("tenants", "alice", "uid-a", 0)
    assert tenant_of(seen(ALICE), None) == ref
    assert tenant_of(seen(ALICE), "elsewhere") is None
    assert tenant_of(seen(None), "tenants") is None


# -- the watch -------------------------------------------------------------------------------


def test_the_first_list_sends_nothing_and_each_change_after_it_one_hint() -> None:
    kube, sink = FakeKube(), FakeSink()
    kube.seen = {seen(ALICE).key: seen(ALICE)}
    kube.watches = [
        [
            change("MODIFIED", seen(ALICE, BOOTING), "101"),  # same rollout: metadata only
            change("ADDED", seen(BOB), "102"),  # nothing of it ready yet
            change("MODIFIED", seen(ALICE, UP), "103"),
            change("BOOKMARK", None, "110"),
            change("MODIFIED", seen(BOB, UP), "111"),
            change("DELETED", seen(BOB, UP), "112"),
        ]
    ]
    watch = run(kube, sink)
    assert watch.ready()
    assert hinted(sink) == ["tenants/alice", "tenants/bob"]
    assert kube.calls["list_seen"] == 1
    assert kube.watched_from == ["100", "112"]  # the next WATCH from the last version


def test_a_change_naming_no_tenant_served_here_sends_nothing() -> None:
    kube, sink = FakeKube(), FakeSink()
    kube.watches = [
        [
            change("ADDED", seen(None, UP), "101"),  # owner labels incomplete
            change("ADDED", seen(Owner("other", "dan", "uid-d"), UP), "102"),  # another installation's Tenants
        ]
    ]
    run(kube, sink)
    assert sink.sent == []


def test_an_expired_watch_lists_again_and_sends_what_changed_meanwhile() -> None:
    kube, sink = FakeKube(), FakeSink()
    kube.seen = {s.key: s for s in (seen(ALICE), seen(BOB))}
    kube.watches = [[change("MODIFIED", seen(ALICE, UP), "101"), WatchExpired("too old")]]

    def relist_changed(real: FakeKube = kube) -> None:
        # while no watch was open, bob's StatefulSet went and carol's came up
        carol = seen(Owner("tenants", "carol", "uid-c"), UP)
        real.seen = {s.key: s for s in (seen(ALICE, UP), carol)}
        real.list_version = "200"

    kube.watches.append([])  # the WATCH after the re-list ends at once
    original = kube.list_seen
    calls = 0

    def list_seen(selector: str) -> tuple[dict[tuple[str, str], Seen], str]:
        nonlocal calls
        calls += 1
        if calls == 2:
            relist_changed()
        return original(selector)

    kube.list_seen = list_seen  # type: ignore[method-assign]
    run(kube, sink)
    assert calls == 2
    assert hinted(sink) == ["tenants/alice", "tenants/carol"]  # alice's change, then carol; alice not twice
    assert kube.watched_from[:2] == ["100", "200"]


def test_a_failed_watch_is_tried_again_from_the_same_version_after_a_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, sink = FakeKube(), FakeSink()
    kube.watches = [[change("ADDED", seen(ALICE, UP), "101"), TemporaryError("connection reset", retry_after=2)]]
    waits = waits_of(kube, sink, monkeypatch)
    assert waits == [2]
    assert kube.calls["list_seen"] == 1, "a failed request is not an expired version: no new LIST"
    assert kube.watched_from == ["100", "101"]
    assert hinted(sink) == ["tenants/alice"]


def test_failures_in_a_row_wait_longer_up_to_the_most(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, sink = FakeKube(), FakeSink()
    kube.watches = [[TemporaryError("down", retry_after=2)] for _ in range(6)]
    waits = waits_of(kube, sink, monkeypatch)
    assert waits == [2, 4, 8, 16, 30, 30]


def quiet_for(seconds: float, now: list[float]) -> Iterator[Change]:
    """A WATCH with nothing in it that the API server ends after ``seconds`` (the clock moves)."""
    now[0] += seconds
    yield from ()


def test_a_quiet_watch_that_ran_its_time_ends_the_run_of_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    """After two failures, a WATCH the API server ends in its time with nothing in it is the watch
    working again: the next failure waits its first wait, not the third's."""
    kube, sink, now = FakeKube(), FakeSink(), [1000.0]
    down = TemporaryError("connection reset", retry_after=1)
    kube.watches = [[down], [down], quiet_for(vcluster_watch.WATCH_SECONDS, now), [down]]  # type: ignore[list-item]
    waits = waits_of(kube, sink, monkeypatch, lambda: now[0])
    assert waits == [1, 2, 1.0, 1], "two failures, the empty WATCH's second, then a first failure again"


def test_a_watch_closed_at_once_between_failures_does_not_end_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy that fails a WATCH, then closes the next at once, again and again: the waits grow."""
    kube, sink, now = FakeKube(), FakeSink(), [1000.0]
    down = TemporaryError("connection reset", retry_after=1)
    kube.watches = [[down], quiet_for(0.01, now), [down], quiet_for(0.01, now), [down]]  # type: ignore[list-item]
    waits = waits_of(kube, sink, monkeypatch, lambda: now[0])
    assert waits == [1, 1.0, 2, 1.0, 4]


def test_a_hint_the_broker_does_not_take_is_dropped_and_so_are_the_next_seconds_untried() -> None:
    """A broker that refuses (or hangs: a send's timeout each) does not hold the watch: after one
    failed send, the hints of the next BROKER_PAUSE_SECONDS are counted lost without a try."""
    kube = FakeKube()
    now = [1000.0]
    tries: list[str] = []

    class Refusing(FakeSink):
        def send(self, event: BaseCloudEvent) -> None:
            tries.append(events.tenant_ref(event).name)
            raise TemporaryError("the broker answered 503")

    def clocked(name: str, version: str, at: float) -> Change:
        now[0] = at  # the clock as the change arrives
        return change("ADDED", seen(Owner("tenants", name, f"uid-{name}"), UP), version)

    script = [("amy", "101", 1000.0), ("ben", "102", 1001.0), ("cid", "103", 1004.9), ("dot", "104", 1005.1)]
    kube.watches = [(clocked(*args) for args in script)]  # type: ignore[list-item]  # the clock moves as they come
    run(kube, Refusing(), clock=lambda: now[0])
    assert tries == ["amy", "dot"], "ben and cid came within the pause after amy's failure"
    assert kube.watched_from == ["100", "104"], "every change taken; the next WATCH goes on from the last"


def test_no_sink_yet_loses_the_hint_not_the_watch() -> None:
    kube = FakeKube()
    kube.watches = [[change("ADDED", seen(ALICE, UP), "101")]]
    stop = threading.Event()
    kube.out_of_watches = stop.set

    def no_sink() -> FakeSink:
        raise TemporaryError("no sink yet: K_SINK is unset")

    Watch(kube, no_sink, "tenants").run(stop)
    assert kube.watched_from == ["100", "101"]


def test_readyz_waits_for_the_first_list_and_healthz_for_progress(
    kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the app's probes: not ready while the LIST fails; any error (a bug too) is retried,
    and the watch is alive while it makes progress: a LIST failing for longer than STALL_SECONDS
    fails /healthz (the kubelet restarts the pod), and the first LIST that succeeds mends both."""
    # longer than the 1 s wait after an empty WATCH, which the healed watch goes through
    monkeypatch.setattr(vcluster_watch, "STALL_SECONDS", 3.0)
    monkeypatch.setattr(vcluster_watch, "MOST_BACKOFF_SECONDS", 0.05)
    listing = threading.Event()
    healed = threading.Event()
    original = kube.list_seen

    def list_seen(selector: str) -> tuple[dict[tuple[str, str], Seen], str]:
        listing.set()
        if not healed.is_set():
            raise RuntimeError("a bug")
        return original(selector)

    kube.list_seen = list_seen  # type: ignore[method-assign]
    kube.out_of_watches = lambda: time.sleep(0.01)  # a WATCH with nothing in it, again and again
    app = vcluster_watch.create_app(fake_runtime(kube, FakeHelm(kube), FakeKubeoperaApi()))
    client = app.test_client()
    assert listing.wait(10)
    assert client.get("/readyz").status_code == 503
    assert client.post("/", json={}).status_code >= 400, "nothing is delivered to the watch"
    deadline = time.monotonic() + 30
    while client.get("/healthz").status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.get("/healthz").status_code == 503, "no progress for STALL_SECONDS"
    healed.set()
    while client.get("/readyz").status_code == 503 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.get("/readyz").status_code == 200
    assert client.get("/healthz").status_code == 200, "the thread lived through the bug and listed"


def test_a_watch_that_ends_with_nothing_waits_a_second_before_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, sink = FakeKube(), FakeSink()
    kube.watches = [[], [], [change("ADDED", seen(ALICE, UP), "101")]]
    waits = waits_of(kube, sink, monkeypatch)
    assert waits == [1.0, 1.0], "two empty WATCHes, then one with a change and no wait after it"
    assert kube.watched_from == ["100", "100", "100", "101"]


def test_an_expired_watch_lists_at_once_the_first_time_and_backs_off_after(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, sink = FakeKube(), FakeSink()
    expired = WatchExpired("too old resource version")

    def expiring(label_selector: str, resource_version: str, timeout_seconds: int) -> Iterator[Change]:
        kube.watched_from.append(resource_version)
        if len(kube.watched_from) > 3:
            stop.set()
            return
        raise expired
        yield  # a generator, as the adapter's

    kube.watch_seen = expiring  # type: ignore[method-assign]
    waits: list[float] = []
    stop = threading.Event()
    monkeypatch.setattr(stop, "wait", lambda seconds: waits.append(seconds))
    Watch(kube, lambda: sink, "tenants").run(stop)
    assert kube.calls["list_seen"] == 4, "a LIST after each of the three expiries"
    assert waits == [1.0, 2.0], "the first re-list at once, then a growing wait"


def test_the_sink_is_asked_until_it_gives_a_sender_and_then_kept() -> None:
    kube, sink = FakeKube(), FakeSink()
    owners = [Owner("tenants", n, f"uid-{n}") for n in ("amy", "ben", "cid")]
    kube.watches = [[change("ADDED", seen(o, UP), str(101 + k)) for k, o in enumerate(owners)]]
    asked: list[int] = []
    ticks = iter(range(1_000_000))

    def sink_once_set() -> FakeSink:
        asked.append(1)
        if len(asked) == 1:
            raise TemporaryError("no sink yet: K_SINK is unset")
        return sink

    stop = threading.Event()
    kube.out_of_watches = stop.set
    # every reading of the clock is a pause later than the one before: no hint falls in a pause
    Watch(kube, sink_once_set, "tenants", clock=lambda: next(ticks) * (vcluster_watch.BROKER_PAUSE_SECONDS + 1)).run(
        stop
    )
    assert len(asked) == 2, "asked again after it had none, not at each hint"
    assert hinted(sink) == ["tenants/ben", "tenants/cid"]


def test_progress_is_a_list_a_change_or_a_watchs_end_within_the_stall_time() -> None:
    kube, sink = FakeKube(), FakeSink()
    now = [0.0]
    watch = Watch(kube, lambda: sink, "tenants", clock=lambda: now[0])
    now[0] = vcluster_watch.STALL_SECONDS - 1
    assert watch.progressing()
    now[0] = vcluster_watch.STALL_SECONDS + 1
    assert not watch.progressing(), "nothing since it was made"
    kube.watches = [[change("ADDED", seen(ALICE, UP), "101")]]
    stop = threading.Event()
    kube.out_of_watches = stop.set
    watch.run(stop)
    assert watch.progressing()
    now[0] += vcluster_watch.STALL_SECONDS
    assert not watch.progressing()


# -- the adapter's reading of a watch's lines (pure: no client, no connection) -----------------

# As kube-apiserver writes them (k8s.io/apiserver, a watch's event and its error Status).
EXPIRED_LINE = (
    '{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    '"message":"too old resource version: 1 (205)","reason":"Expired","code":410}}'
)
BOOKMARK_LINE = (
    '{"type":"BOOKMARK","object":{"kind":"StatefulSet","apiVersion":"apps/v1",'
    '"metadata":{"resourceVersion":"229","creationTimestamp":null,'
    '"annotations":{"k8s.io/initial-events-end":"true"}},"spec":{},"status":{}}}'
)


def test_a_watch_line_is_a_change_a_bookmark_or_the_end_of_the_watch() -> None:
    added = {
        "type": "ADDED",
        "object": {
            "metadata": {
                "name": "vc-amy",
                "namespace": "vcluster-amy",
                "resourceVersion": "205",
                "generation": 1,
                "labels": {
                    "kubeopera.io/owner-uid": "u-1",
                    "kubeopera.io/owner-namespace": "tenants",
                    "kubeopera.io/owner-name": "amy",
                },
            },
            "spec": {"replicas": 1},
            "status": {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "observedGeneration": 1},
        },
    }
    change_ = _change("watch", added)
    assert change_.kind == "ADDED" and change_.resource_version == "205"
    assert change_.seen == Seen("vcluster-amy", "vc-amy", Owner("tenants", "amy", "u-1"), UP)
    bookmark = _change("watch", json.loads(BOOKMARK_LINE))
    assert (bookmark.kind, bookmark.seen, bookmark.resource_version) == ("BOOKMARK", None, "229")
    with pytest.raises(WatchExpired, match="too old resource version"):
        _change("watch", json.loads(EXPIRED_LINE))
    with pytest.raises(TemporaryError, match="500") as other:
        _change("watch", {"type": "ERROR", "object": {"code": 500, "message": "internal error"}})
    assert not isinstance(other.value, WatchExpired)
