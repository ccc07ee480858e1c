"""``make test``'s runner (testbed.suite): every test module runs in exactly one group, and the
verdict over the groups is read from pytest's own closing lines."""

from __future__ import annotations

import _thread
import signal
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from testbed import suite


def test_every_module_of_the_suite_is_in_exactly_one_group() -> None:
    owner = suite.plan(suite.GROUPS)
    assert set(owner) == set(suite.modules())
    assert len(owner) > 50, "the plan saw the suite's modules"
    assert owner["tests/e2e/test_lifecycle.py"] == "e2e-lifecycle"
    assert owner["tests/cluster/test_scaling.py"] == "cluster"
    assert owner["testbed/tests/test_suite_plan.py"] == "testbed"
    assert {g.name for g in suite.GROUPS} == set(owner.values()) | {"lint+types"}


def test_a_module_in_no_group_or_in_two_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tests" / "e2e").mkdir(parents=True)
    (tmp_path / "tests" / "e2e" / "test_new.py").write_text("")
    with pytest.raises(ValueError, match=r"tests/e2e/test_new.py is in 0 groups \(none\)"):
        suite.plan([suite.Group("unit", paths=("tests/unit",))], (tmp_path / "tests",), tmp_path)
    twice = [suite.Group("a", paths=("tests/e2e",)), suite.Group("b", paths=("tests/e2e/test_new.py",))]
    with pytest.raises(ValueError, match=r"is in 2 groups \(a, b\)"):
        suite.plan(twice, (tmp_path / "tests",), tmp_path)


def _starts(groups: tuple[suite.Group, ...], jobs: int) -> list[list[str]]:
    """The order the runner starts ``groups`` in, as waves: what starts at once, then what starts
    as each running group ends (the earliest started ending first)."""
    todo = sorted(groups, key=lambda g: -g.weight)
    running: list[suite.Group] = []
    waves: list[list[str]] = []
    while todo:
        wave = []
        while (group := suite.next_group(todo, running, jobs)) is not None:
            todo.remove(group)
            running.append(group)
            wave.append(group.name)
        waves.append(wave)
        running.pop(0)
    return waves


def test_at_most_one_stack_runs_beside_the_cluster_tier() -> None:
    waves = _starts(suite.GROUPS, jobs=4)
    by_name = {g.name: g for g in suite.GROUPS}
    assert waves[0] == ["cluster", "e2e-pipeline", "integration"], "the light groups fill the place of a second stack"
    running: list[str] = []
    for wave in waves:
        running = [*running[1:], *wave] if running else wave
        if "cluster" in running:
            assert sum(by_name[name].stack for name in running) <= suite.STACKS_BESIDE_CLUSTER, running
    assert sorted(name for wave in waves for name in wave) == sorted(by_name)


def test_a_group_waits_for_its_slots_and_for_the_cluster_tier_s_neighbours() -> None:
    cluster = suite.Group("cluster", weight=9, cluster=True, slots=2)
    a, b = suite.Group("a", weight=8, stack=True), suite.Group("b", weight=7, stack=True)
    light = suite.Group("light", weight=1)
    assert suite.next_group([cluster, a, b, light], [], jobs=4) is cluster
    assert suite.next_group([a, b, light], [cluster], jobs=4) is a
    assert suite.next_group([b, light], [cluster, a], jobs=4) is light, "b is a second stack beside the cluster"
    assert suite.next_group([b], [cluster, a, light], jobs=4) is None, "no slot"
    assert suite.next_group([b], [a, light], jobs=4) is b, "without the cluster tier, stacks side by side"
    assert suite.next_group([cluster], [a, b], jobs=4) is None, "two stacks running: the cluster tier waits"
    assert suite.next_group([cluster], [], jobs=1) is cluster, "a group wider than jobs runs alone"


def test_counts_come_from_the_closing_line_only() -> None:
    output = "\n".join(
        [
            "tests/unit/test_x.py ..F",
            "FAILED tests/unit/test_x.py::test_y - assert 3 passed == 4 passed",
            "==== 1 failed, 880 passed, 2 skipped, 10 deselected, 1 error in 928.12s (0:15:28) ====",
        ]
    )
    assert suite.counts(output) == {"failed": 1, "passed": 880, "skipped": 2, "deselected": 10, "errors": 1}
    assert suite.counts("Traceback: the session could not start") == {}
    totals = {"passed": 880, "failed": 1, "errors": 1, "skipped": 2}
    assert suite.verdict(totals) == "suite: 880 passed, 2 failed, 2 skipped"


def test_groups_run_side_by_side_and_the_verdict_adds_them_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = tmp_path / "tmp"  # where the suite makes its temporary root
    roots.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(roots))
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_ok.py").write_text(
        "def test_a(tmp_path):\n    assert tmp_path.is_dir()\n\ndef test_b():\n    pass\n"
    )
    (tests / "test_bad.py").write_text("def test_c():\n    assert 1 == 2\n")
    groups = [
        suite.Group("ok", paths=(str(tests / "test_ok.py"),)),
        suite.Group("bad", paths=(str(tests / "test_bad.py"),)),
    ]
    code = suite.run(groups, jobs=2, out_dir=tmp_path / "out", python=sys.executable, extra=["-q", "-p", "no:randomly"])
    printed = capsys.readouterr().out.splitlines()
    assert code == 1
    assert printed[-2] == "suite: 2 passed, 1 failed, 0 skipped"
    (kept,) = roots.iterdir()
    assert printed[-1] == f"suite: the groups' temporary files are kept in {kept}", "a failed run keeps them"
    assert (kept / "ok").is_dir(), "the ok group's --basetemp (its test used tmp_path)"
    assert any(line.startswith("===== suite: bad FAILED (exit 1)") for line in printed)
    assert any("assert 1 == 2" in line for line in printed), "a failed group's whole output is printed"
    assert (tmp_path / "out" / "ok.log").is_file() and (tmp_path / "out" / "bad.log").is_file()


def test_a_suite_that_passes_leaves_no_temporary_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = tmp_path / "tmp"
    roots.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(roots))
    test = tmp_path / "test_ok.py"
    test.write_text("def test_a(tmp_path):\n    (tmp_path / 'kept-by-pytest').write_text('x')\n")
    code = suite.run([suite.Group("ok", paths=(str(test),))], jobs=1, out_dir=tmp_path / "out", python=sys.executable)
    assert code == 0
    assert capsys.readouterr().out.splitlines()[-1] == "suite: 1 passed, 0 failed, 0 skipped"
    assert list(roots.iterdir()) == [], "the group's --basetemp, with what pytest kept in it, is gone"


def test_an_interrupted_suite_stops_its_running_groups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = tmp_path / "test_slow.py"
    slow.write_text("import time\n\ndef test_slow():\n    time.sleep(120)\n")
    # Python's own Ctrl-C handler, whatever this process was started with: a job started in the
    # background by a shell (`make test &`) inherits SIGINT ignored, and then interrupt_main does nothing.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(3, _thread.interrupt_main)  # Ctrl-C, three seconds in
    timer.start()
    try:
        code = suite.run(
            [suite.Group("slow", paths=(str(slow),))], jobs=1, out_dir=tmp_path / "out", python=sys.executable
        )
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, before)
    assert code == 130
    assert "suite: interrupted; stopped ['slow']" in capsys.readouterr().out
    assert "KeyboardInterrupt" in (tmp_path / "out" / "slow.log").read_text(), "pytest was stopped as by Ctrl-C"
