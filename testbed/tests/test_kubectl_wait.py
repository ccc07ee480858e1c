"""``until_conditions_exist``: a ``kubectl wait`` that kubectl does not give up on too early.

kubectl 1.34 ends ``wait --for=condition=Established`` at once, with ``.status.conditions accessor
error: <nil> is of the type <nil>``, when it reads a CRD before the API server has written its
conditions; CI's integration group failed so once (all 60 of its tests, on the shared fixture).
"""

from __future__ import annotations

import subprocess

import pytest

from testbed.processes import ProcessError, until_conditions_exist
from testbed.processes.commands import NO_CONDITIONS_YET

EARLY = f"error: {NO_CONDITIONS_YET}, expected []interface{{}}"


def test_a_wait_that_found_no_conditions_yet_is_made_again_until_it_answers() -> None:
    calls: list[int] = []

    def wait() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ProcessError(f"`kubectl wait ...` failed (exit 1):\n{EARLY}")
        return "customresourcedefinition.apiextensions.k8s.io/tenants.kubeopera.io condition met"

    assert until_conditions_exist(wait, timeout=10).endswith("condition met")
    assert len(calls) == 3


def test_any_other_failure_is_raised_at_once() -> None:
    calls: list[int] = []

    def wait() -> str:
        calls.append(1)
        raise ProcessError('`kubectl wait ...` failed (exit 1):\nError from server (NotFound): "tenants.kubeopera.io"')

    with pytest.raises(ProcessError, match="NotFound"):
        until_conditions_exist(wait, timeout=10)
    assert len(calls) == 1


def test_a_wait_allowed_to_fail_is_made_again_too_and_its_last_answer_returned() -> None:
    answers = [
        subprocess.CompletedProcess(["kubectl"], 1, "", EARLY),
        subprocess.CompletedProcess(["kubectl"], 0, "condition met", ""),
    ]
    assert until_conditions_exist(lambda: answers.pop(0), timeout=10).returncode == 0
    assert answers == []


def test_past_its_timeout_the_early_answer_is_what_the_caller_gets() -> None:
    with pytest.raises(ProcessError, match="accessor error"):
        until_conditions_exist(lambda: (_ for _ in ()).throw(ProcessError(EARLY)), timeout=0)
    early = subprocess.CompletedProcess(["kubectl"], 1, "", EARLY)
    assert until_conditions_exist(lambda: early, timeout=0) is early
