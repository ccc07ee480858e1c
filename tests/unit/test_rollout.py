"""Fleet upgrades in waves (``shared.model.rollout``, ``shared.steps.rollout``): the decisions, and
install, resync and ``kubeopera-tenants rollout`` on the fakes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from functions import install, notify_api
from functions.resync import Wave, resync, roll_out
from shared import cli
from shared.errors import PermanentError, TemporaryError
from shared.model import event_types, rollout
from shared.model.plans import Plan, Plans
from shared.model.rollout import Admission, Slot, State, Target
from shared.model.tenant import FINALIZER, Phase, Tenant
from shared.settings import Settings
from shared.steps import rollout as waves
from shared.steps.reconcile import mark_failed

from .fakes import TENANT_NAMESPACE, FakeHelm, FakeKube, FakeKubeoperaApi, FakeSink, ref_of, tenant_object

BEFORE = Settings(rollout_max_parallel=2)
# A fleet change: the base values change for every Tenant (as a new chart version or a plan would).
AFTER = dataclasses.replace(BEFORE, environment="production")


def cs(i: int) -> str:
    return f"7e9d3a1b-2c4d-4e5f-9a6b-{i:012d}"


def name(i: int) -> str:
    return f"ten{i}"


def live(kube: FakeKube, i: int) -> Tenant:
    found = kube.get_tenant(TENANT_NAMESPACE, name(i))
    assert found is not None
    return found


def ready(kube: FakeKube, i: int) -> None:
    """check-ready and notify-api did their part: Ready at the generation install provisioned."""
    kube.set_phase(TENANT_NAMESPACE, name(i), "Ready")


def fleet(kube: FakeKube, helm: FakeHelm, count: int, settings: Settings = BEFORE) -> None:
    """``count`` Tenants provisioned by install with ``settings`` and Ready."""
    for i in range(count):
        obj = kube.add_tenant(tenant_object(name(i), cs(i)))
        assert install.handle(kube, helm, settings, ref_of(obj)) is not None
        ready(kube, i)


def deliver(kube: FakeKube, helm: FakeHelm, i: int, settings: Settings = AFTER) -> bool:
    """install's delivery for Tenant ``i``: True when it upgraded (replied provisioning)."""
    return install.handle(kube, helm, settings, live(kube, i).ref) is not None


def held(kube: FakeKube) -> dict[str, str]:
    """The rollout's Leases: name -> the Tenant they name."""
    return {n: m.labels[rollout.TENANT_LABEL] for (_, n), m in kube.claims.items() if n.startswith("rollout-")}


# the pure decisions --------------------------------------------------------------------------------


def tenant(status: dict[str, Any] | None = None, generation: int = 1, uid: str = "u1") -> Tenant:
    obj = tenant_object("a", cs(1), uid=uid, status=status, finalizers=[FINALIZER])
    obj["metadata"]["generation"] = generation
    return Tenant.from_object(obj)


TARGET = Target("0.21.2", "aaaa")
READY_AT_TARGET = {"phase": "Ready", "observedGeneration": 1, "chartVersion": "0.21.2", "valuesDigest": "aaaa"}


def test_the_digest_is_of_the_values_whatever_their_order() -> None:
    assert rollout.digest({"a": 1, "b": {"c": 2}}) == rollout.digest({"b": {"c": 2}, "a": 1})
    assert rollout.digest({"a": 1}) != rollout.digest({"a": 2})
    assert len(rollout.digest({})) == rollout.DIGEST_LENGTH


def test_behind_is_a_ready_tenant_at_its_generation_running_another_target() -> None:
    assert not rollout.behind(tenant(READY_AT_TARGET), TARGET)
    assert rollout.behind(tenant(READY_AT_TARGET), Target("0.21.3", "aaaa"))
    assert rollout.behind(tenant(READY_AT_TARGET), Target("0.21.2", "bbbb"))
    assert rollout.behind(tenant({"phase": "Ready", "observedGeneration": 1}), TARGET), "no target recorded: once"
    # its own change (a new generation) is install's at once; Provisioning or Failed are not the fleet's
    assert not rollout.behind(tenant(READY_AT_TARGET, generation=2), Target("0.21.3", "aaaa"))
    assert not rollout.behind(tenant(READY_AT_TARGET | {"phase": "Provisioning"}), Target("0.21.3", "aaaa"))
    assert not rollout.behind(tenant(READY_AT_TARGET | {"phase": "Failed"}), Target("0.21.3", "aaaa"))


def slot(uid: str = "u1", generation: int = 1, target: Target = TARGET) -> Slot:
    return Slot("rollout-slot-0", "a", uid, generation, target, "7")


def test_a_slot_is_held_until_its_tenant_is_ready_again_at_its_target() -> None:
    provisioning = tenant(READY_AT_TARGET | {"phase": "Provisioning"})
    assert not rollout.slot_free(slot(), provisioning)
    assert not rollout.slot_free(slot(), tenant(READY_AT_TARGET | {"valuesDigest": "old"})), "not upgraded yet"
    assert rollout.slot_free(slot(), tenant(READY_AT_TARGET))
    assert rollout.slot_free(slot(), None), "its Tenant is gone"
    assert rollout.slot_free(slot(uid="other"), tenant(READY_AT_TARGET | {"valuesDigest": "old"})), "replaced"
    newer = tenant(READY_AT_TARGET | {"observedGeneration": 2, "valuesDigest": "own"}, generation=2)
    assert rollout.slot_free(slot(), newer), "its own change superseded the upgrade"
    assert rollout.slot_failed(slot(), tenant({"phase": "Failed"}))


def test_a_slot_holder_failing_its_own_change_halts_nothing_and_frees_its_slot() -> None:
    """An upgraded Tenant keeps its slot's Lease until another takes it over; Failed later at a newer
    generation (a quota helm refuses) is its own change failing, not the fleet upgrade."""
    failed_own = tenant({"phase": "Failed", "observedGeneration": 2}, generation=2)
    assert not rollout.slot_failed(slot(), failed_own)
    assert rollout.slot_free(slot(), failed_own)
    assert rollout.halted_by([("rollout-slot-0", slot(), failed_own)]) is None
    failed_upgrade = tenant({"phase": "Failed", "observedGeneration": 1})
    assert rollout.slot_failed(slot(), failed_upgrade) and not rollout.slot_free(slot(), failed_upgrade)


def test_admit_goes_in_a_held_slot_takes_a_free_one_waits_and_halts() -> None:
    me = tenant(READY_AT_TARGET | {"valuesDigest": "old"}, uid="me")
    other_busy = tenant({"phase": "Provisioning", "observedGeneration": 1}, uid="u1")
    other_done = tenant(READY_AT_TARGET, uid="u1")
    failed = tenant({"phase": "Failed"}, uid="u1")
    mine = Slot("rollout-slot-1", "me", "me", 1, TARGET, "8")

    assert rollout.admit(me, [("rollout-slot-0", None, None)], None).admission == Admission.TAKE
    assert rollout.admit(me, [("rollout-slot-0", slot(), other_busy), ("rollout-slot-1", mine, me)], None) == (
        rollout.Decision(Admission.GO, "rollout-slot-1", why="holds rollout-slot-1")
    )
    stale = rollout.admit(me, [("rollout-slot-0", slot(), other_done)], None)
    assert (stale.admission, stale.stale) == (Admission.TAKE, slot()), "a free slot is taken over"
    assert rollout.admit(me, [("rollout-slot-0", slot(), other_busy)], None).admission == Admission.WAIT
    assert rollout.admit(me, [("rollout-slot-0", slot(), failed), ("rollout-slot-1", None, None)], None).admission == (
        Admission.HALTED
    ), "no slot is taken while a slot's Tenant is Failed"
    assert rollout.admit(me, [("rollout-slot-0", None, None)], slot()).admission == Admission.HALTED


def test_a_tenant_holding_its_slot_goes_on_when_the_rollout_halts_meanwhile() -> None:
    """Its upgrade began before the halt (helm may have run it already, and its delivery retries
    after a conflict on its status write): it goes on and records the chart it now runs. A halt
    stops upgrades from starting. Seen in e2e-rollout: ro-03 took its slot beside ro-02, helm
    upgraded it, ro-02's failure was recorded as the halt while ro-03's status write was retried,
    and ro-03 ended Ready on the new chart with a status naming the old one."""
    me = tenant(READY_AT_TARGET | {"valuesDigest": "old", "phase": "Provisioning"}, uid="me")
    mine = Slot("rollout-slot-1", "me", "me", 1, TARGET, "8")
    failed = tenant({"phase": "Failed"}, uid="u1")
    halt = Slot(rollout.HALT_NAME, "a", "u1", 1, TARGET, "9")
    slots = [("rollout-slot-0", slot(), failed), ("rollout-slot-1", mine, me)]
    going = rollout.Decision(Admission.GO, "rollout-slot-1", why="holds rollout-slot-1")
    assert rollout.admit(me, slots, halt) == going
    assert rollout.admit(me, slots, None).admission == Admission.GO, "a failed neighbour halts no one already in"
    other = tenant(READY_AT_TARGET | {"valuesDigest": "old"}, uid="other")
    assert rollout.admit(other, slots, halt).admission == Admission.HALTED, "no one starts"
    done = tenant(READY_AT_TARGET, uid="me")  # Ready at the slot's target: the slot is free, not held
    assert rollout.admit(done, [("rollout-slot-1", mine, done)], halt).admission == Admission.HALTED


def test_each_tenants_state() -> None:
    behind = tenant(READY_AT_TARGET | {"valuesDigest": "old"})
    assert rollout.state(tenant(READY_AT_TARGET), False, None, None) == State.DONE
    assert rollout.state(behind, True, None, None) == State.WAITING
    assert rollout.state(behind, True, slot(), None) == State.IN_PROGRESS
    assert rollout.state(tenant({"phase": "Provisioning"}), False, slot(), None) == State.IN_PROGRESS
    assert rollout.state(tenant({"phase": "Failed"}), False, slot(), None) == State.HALTED
    assert rollout.state(tenant({"phase": "Failed"}), False, None, slot()) == State.HALTED
    assert rollout.state(tenant({"phase": "Pending"}), False, None, None) == State.OUTSIDE


# install ------------------------------------------------------------------------------------------


def test_install_records_what_the_release_runs() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 1)
    status = live(kube, 0).status
    assert Target(status.chart_version, status.values_digest) == waves.target(live(kube, 0), BEFORE)
    assert status.chart_version == BEFORE.chart_version and status.rollout == ""


def test_a_fleet_change_upgrades_at_most_n_tenants_at_a_time() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 3)
    upgrades = len(helm.operations)

    assert [deliver(kube, helm, i) for i in range(3)] == [True, True, False]
    assert held(kube) == {"rollout-slot-0": "ten0", "rollout-slot-1": "ten1"}
    assert len(helm.operations) == upgrades + 2
    assert live(kube, 2).status.phase == Phase.READY, "the third stays Ready as it is"
    assert not deliver(kube, helm, 2), "still no free slot"

    ready(kube, 0)  # t0 is Ready again, at the new target: its slot is free for the next
    assert deliver(kube, helm, 2)
    assert held(kube) == {"rollout-slot-0": "ten2", "rollout-slot-1": "ten1"}
    for i in (0, 1, 2):
        assert live(kube, i).status.values_digest == waves.target(live(kube, i), AFTER).values_digest


def test_a_changed_plan_is_a_fleet_change_for_its_tenants_only() -> None:
    """The target is the digest of the values under the Tenant's plan (``plans.release_values``, as
    install hands helm): a plan's new registry mirror puts its Tenants behind, and no other Tenant."""

    def settings(registry: str) -> Settings:
        gold = Plan.parse("gold", {"controlPlane": {"advanced": {"defaultImageRegistry": registry}}})
        return dataclasses.replace(BEFORE, plans=Plans.of([gold]))

    kube = FakeKube()
    helm = FakeHelm(kube)
    before, after = settings("mirror-a.example.com"), settings("mirror-b.example.com")
    for i, plan in enumerate(("gold", "default")):
        obj = tenant_object(name(i), cs(i))
        obj["spec"]["plan"] = plan
        assert install.handle(kube, helm, before, ref_of(kube.add_tenant(obj))) is not None
        ready(kube, i)
    assert not any(rollout.behind(live(kube, i), waves.target(live(kube, i), before)) for i in (0, 1))

    assert rollout.behind(live(kube, 0), waves.target(live(kube, 0), after)), "gold's Tenant runs the old mirror"
    assert not rollout.behind(live(kube, 1), waves.target(live(kube, 1), after)), "default's is as it was"
    assert deliver(kube, helm, 0, after) and held(kube) == {"rollout-slot-0": "ten0"}
    upgraded = helm.values_of("vc-ten0", "vcluster-ten0")
    assert upgraded["controlPlane"]["advanced"]["defaultImageRegistry"] == "mirror-b.example.com"


def test_a_tenants_own_change_is_never_held_back_by_a_rollout() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 3)
    assert [deliver(kube, helm, i) for i in range(2)] == [True, True]  # both slots held

    kube.edit_spec(TENANT_NAMESPACE, name(2), quota={"cpu": "3", "memory": "4Gi"})
    assert deliver(kube, helm, 2), "a new generation goes at once, without a slot"
    assert held(kube) == {"rollout-slot-0": "ten0", "rollout-slot-1": "ten1"}


def test_a_failed_upgrade_halts_the_rollout_until_resumed() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 4)
    assert [deliver(kube, helm, i) for i in range(2)] == [True, True]
    mark_failed(kube, live(kube, 0).ref, "helm release vc-t0 revision 2 failed")
    ready(kube, 1)

    assert not deliver(kube, helm, 2), "halted: the free slot is not taken"
    assert held(kube)["rollout-halted"] == "ten0"
    assert "RolloutHalted" in kube.event_reasons()
    assert not deliver(kube, helm, 3)

    found = waves.read(kube, TENANT_NAMESPACE, BEFORE.rollout_max_parallel)
    said = waves.resume(kube, TENANT_NAMESPACE, found)
    assert "removed the halt at Tenant ten0" in said and "released rollout-slot-0 of Failed Tenant ten0" in said
    assert held(kube) == {"rollout-slot-1": "ten1"}
    assert [deliver(kube, helm, i) for i in (2, 3)] == [True, True]
    assert waves.resume(kube, TENANT_NAMESPACE, waves.read(kube, TENANT_NAMESPACE, 2)).startswith("the rollout is not")


def test_an_upgrade_helm_refuses_fails_the_tenant_and_halts_the_rollout() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 3)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermanentError("helm upgrade --install: the chart rejected the values: refused")

    helm.install_or_upgrade = refuse  # type: ignore[method-assign]
    with pytest.raises(PermanentError):
        deliver(kube, helm, 0)
    assert live(kube, 0).status.phase == Phase.PROVISIONING, "out of Ready before helm ran"
    assert mark_failed(kube, live(kube, 0).ref, "the chart rejected the values")  # the HTTP layer's on_permanent
    assert not deliver(kube, helm, 1), "halted"
    assert held(kube)["rollout-halted"] == "ten0"


def test_an_upgrade_helm_answered_temporarily_goes_on_at_its_redelivery() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 2)
    real = helm.install_or_upgrade

    def busy(*args: Any, **kwargs: Any) -> Any:
        raise TemporaryError("helm upgrade --install: another helm operation is in progress", retry_after=5)

    helm.install_or_upgrade = busy  # type: ignore[method-assign]
    with pytest.raises(TemporaryError):
        deliver(kube, helm, 0)
    assert (live(kube, 0).status.phase, live(kube, 0).status.rollout) == (Phase.PROVISIONING, "Upgrading")
    helm.install_or_upgrade = real  # type: ignore[method-assign]
    assert deliver(kube, helm, 0), "the broker's re-delivery upgrades it, in the slot it holds"
    assert live(kube, 0).status.values_digest == waves.target(live(kube, 0), AFTER).values_digest
    assert held(kube) == {"rollout-slot-0": "ten0"}
    assert not deliver(kube, helm, 0), "done: a duplicate adds nothing"


def test_the_halt_lasts_after_the_tenant_is_fixed_until_resume() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 3)
    assert deliver(kube, helm, 0)
    mark_failed(kube, live(kube, 0).ref, "the chart rejected the values")
    assert not deliver(kube, helm, 1)  # records the halt
    # the operator fixes and retries it: Pending, install upgrades it as its own work, Ready again
    kube.set_phase(TENANT_NAMESPACE, name(0), "Pending")
    assert deliver(kube, helm, 0)
    ready(kube, 0)

    assert not deliver(kube, helm, 1), "still halted: resume says when to go on"
    waves.resume(kube, TENANT_NAMESPACE, waves.read(kube, TENANT_NAMESPACE, 2))
    assert deliver(kube, helm, 1)


def test_next_up_gives_two_slots_freed_at_once_two_tenants() -> None:
    def t(n: str, mark: str) -> Tenant:
        obj = tenant_object(n, cs(1), uid=n, finalizers=[FINALIZER], status=READY_AT_TARGET | {"rollout": mark})
        return Tenant.from_object(obj)

    a, b = t("aaa", "Upgrading"), t("bbb", "Upgrading")
    w1, w2, w3 = t("www1", "Waiting"), t("www2", "Waiting"), t("www3", "Waiting")
    fleet_now = [a, b, w3, w1, w2]
    assert rollout.next_up(a, fleet_now) == w1
    assert rollout.next_up(b, fleet_now) == w2
    assert rollout.next_up(b, [a, b, w3]) == w3, "past the end: the last"
    assert rollout.next_up(a, [a, b]) is None


def test_notify_api_asks_install_for_the_next_tenant_when_an_upgrade_is_ready() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 3)
    roll_out(kube, FakeSink(), AFTER, kube.list_tenants(TENANT_NAMESPACE, ""))  # sends ten0, ten1; ten2 waits
    assert deliver(kube, helm, 0) and deliver(kube, helm, 1)
    kube.set_phase(TENANT_NAMESPACE, name(0), "Provisioning")  # check-ready saw it up

    reply = notify_api.handle(kube, FakeKubeoperaApi(), live(kube, 0).ref)
    assert reply is not None and reply.get_type() == event_types.INSTALL
    assert reply.get_data()["name"] == "ten2"  # type: ignore[index]
    assert (live(kube, 0).status.phase, live(kube, 0).status.rollout) == (Phase.READY, "")
    assert deliver(kube, helm, 2), "the slot ten0 held is free: ten2 takes it"


def test_notify_api_of_a_tenants_own_change_asks_for_nothing() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 1)
    kube.set_phase(TENANT_NAMESPACE, name(0), "Provisioning")
    assert notify_api.handle(kube, FakeKubeoperaApi(), live(kube, 0).ref) is None


# resync -------------------------------------------------------------------------------------------


def test_resync_sends_the_next_wave_and_marks_the_rest_waiting() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 4)
    sink = FakeSink()

    assert roll_out(kube, sink, AFTER, kube.list_tenants(TENANT_NAMESPACE, "")) == {"ROLLOUT": 2, "ROLLOUT_MARK": 2}
    assert [(e.get_type(), e.get_data()["name"]) for e in sink.sent] == [  # type: ignore[index]
        (event_types.INSTALL, "ten0"),
        (event_types.INSTALL, "ten1"),
    ]
    assert [live(kube, i).status.rollout for i in range(4)] == ["", "", "Waiting", "Waiting"]

    for i in range(2):
        assert deliver(kube, helm, i)
    sink.sent.clear()
    assert roll_out(kube, sink, AFTER, kube.list_tenants(TENANT_NAMESPACE, "")) == {}, "both slots held"
    ready(kube, 0)
    ready(kube, 1)
    assert roll_out(kube, sink, AFTER, kube.list_tenants(TENANT_NAMESPACE, "")) == {"ROLLOUT": 2}
    for i in (2, 3):
        assert deliver(kube, helm, i)
        assert live(kube, i).status.rollout == "Upgrading", "install's write replaces the mark"


@pytest.mark.parametrize("last_first", [False, True], ids=["as-listed", "its-tenant-seen-last"])
def test_resync_records_a_halt_and_sends_nothing_while_halted(last_first: bool) -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 3)
    assert deliver(kube, helm, 0)
    mark_failed(kube, live(kube, 0).ref, "vCluster not ready 600s after provisioning began")
    sink = FakeSink()
    tenants = kube.list_tenants(TENANT_NAMESPACE, "")

    counts = roll_out(kube, sink, AFTER, reversed(tenants) if last_first else tenants)
    assert sink.sent == [] and "ROLLOUT" not in counts
    assert held(kube)["rollout-halted"] == "ten0"
    assert kube.event_reasons().count("RolloutHalted") == 1
    assert [live(kube, i).status.rollout for i in (1, 2)] == ["Waiting", "Waiting"], "halted: all wait"


def test_resync_sends_the_first_waiting_by_name_in_whatever_order_the_tenants_come() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 5)
    sink = FakeSink()

    last_first = reversed(kube.list_tenants(TENANT_NAMESPACE, ""))
    assert roll_out(kube, sink, AFTER, last_first) == {"ROLLOUT": 2, "ROLLOUT_MARK": 3}
    assert sorted(e.get_data()["name"] for e in sink.sent) == ["ten0", "ten1"]  # type: ignore[index]
    assert [live(kube, i).status.rollout for i in range(5)] == ["", "", "Waiting", "Waiting", "Waiting"]


def test_resync_counts_a_slot_held_by_a_tenant_it_sees_last_as_taken() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 4)
    assert deliver(kube, helm, 0)  # takes rollout-slot-0; upgrading until it is Ready again
    sink = FakeSink()

    assert roll_out(kube, sink, AFTER, reversed(kube.list_tenants(TENANT_NAMESPACE, ""))) == {
        "ROLLOUT": 1,
        "ROLLOUT_MARK": 2,
    }
    assert [e.get_data()["name"] for e in sink.sent] == ["ten1"], "one slot free: the first waiting"  # type: ignore[index]
    assert [live(kube, i).status.rollout for i in (2, 3)] == ["Waiting", "Waiting"]


@pytest.mark.parametrize("page", [100, 1])
def test_a_pass_sends_one_wave_over_all_its_pages_and_writes_both_marks_and_availability(page: int) -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 5)  # no stored kubeconfig or availability yet: resync also re-drives and writes those
    kube.tenant_page = page
    sink = FakeSink()

    counts = resync(kube, sink, AFTER)

    installs = [e.get_data()["name"] for e in sink.sent if e.get_type() == event_types.INSTALL]  # type: ignore[index]
    assert installs == ["ten0", "ten1"], "one wave a pass, as many as there are slots"
    assert counts["ROLLOUT"] == 2 and counts["ROLLOUT_MARK"] == 3
    assert [live(kube, i).status.rollout for i in range(5)] == ["", "", "Waiting", "Waiting", "Waiting"]
    assert counts["AVAILABILITY"] == 5, "each Tenant's mark written from the Tenant its availability write left"
    assert all(live(kube, i).status.condition("VClusterAvailable") is not None for i in range(5))


def test_a_wave_keeps_no_more_waiting_tenants_than_there_are_slots() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 6)
    wave = Wave.begin(kube, AFTER)
    for tenant in reversed(kube.list_tenants(TENANT_NAMESPACE, "")):
        wave.see(kube, tenant)
    assert [t.name for t in wave.waiting] == ["ten0", "ten1"], "the first by name; the others marked as they pass"
    assert [live(kube, i).status.rollout for i in range(2, 6)] == ["Waiting"] * 4


def test_a_settled_fleet_pass_writes_nothing() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 2)
    mark = len(kube.journal)
    assert roll_out(kube, FakeSink(), BEFORE, kube.list_tenants(TENANT_NAMESPACE, "")) == {}
    assert kube.journal[mark:] == []


# the command --------------------------------------------------------------------------------------


def test_rollout_status_shows_each_state_the_counts_and_the_halt() -> None:
    kube = FakeKube()
    helm = FakeHelm(kube)
    fleet(kube, helm, 4)
    roll_out(kube, FakeSink(), AFTER, kube.list_tenants(TENANT_NAMESPACE, ""))  # marks t2, t3 waiting
    assert deliver(kube, helm, 0) and deliver(kube, helm, 1)
    mark_failed(kube, live(kube, 1).ref, "the chart rejected the values")
    roll_out(kube, FakeSink(), AFTER, kube.list_tenants(TENANT_NAMESPACE, ""))  # records the halt
    ready(kube, 0)

    tenants = kube.list_tenants(TENANT_NAMESPACE, "")
    by_name = {t.name: t for t in tenants}
    markers = {n: m for (_, n), m in kube.claims.items() if n.startswith("rollout-")}
    table = cli.rollout_table(tenants, waves.listed(markers, by_name.get))
    rows = {line.split()[0]: line.split()[1:3] for line in table.splitlines()[1:5]}
    assert rows == {
        "ten0": ["done", "Ready"],
        "ten1": ["halted", "Failed"],
        "ten2": ["waiting", "Ready"],
        "ten3": ["waiting", "Ready"],
    }
    assert "1 done, 2 waiting, 0 in progress, 1 halted" in table
    assert "HALTED at Tenant ten1: the chart rejected the values" in table


def test_the_rollout_command_has_status_and_resume() -> None:
    assert cli.parser().parse_args(["rollout", "status"]).rollout_command == "status"
    args = cli.parser().parse_args(["rollout", "resume", "-n", "tenants"])
    assert (args.rollout_command, args.namespace) == ("resume", "tenants")
