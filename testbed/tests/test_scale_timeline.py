"""ScaleTimeline ends at what is true when it is stopped, not at its thread's last sample."""

from __future__ import annotations

import threading

from testbed.cluster.scaling import ScaleTimeline
from testbed.processes import ProcessError


def test_stop_takes_a_last_sample_after_the_thread_has_stopped() -> None:
    counts = {"install": 1}
    sampled = threading.Event()

    def sample() -> dict[str, int]:
        sampled.set()
        return dict(counts)

    timeline = ScaleTimeline(sample, interval=3600).start()  # the thread samples once, then waits
    assert sampled.wait(10)
    counts["install"] = 0  # gone after the thread's sample, before stop
    changes = timeline.stop()
    assert [c for _, c in changes] == [{"install": 1}, {"install": 0}]


def test_a_failed_last_sample_is_tried_again() -> None:
    answers: list[dict[str, int] | Exception] = [
        {"install": 2},
        ProcessError("kubectl get pods failed"),
        {"install": 0},
    ]

    def sample() -> dict[str, int]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    timeline = ScaleTimeline(sample, interval=3600).start()
    while len(answers) == 3:  # until the thread has taken its one sample
        threading.Event().wait(0.01)
    assert [c for _, c in timeline.stop()] == [{"install": 2}, {"install": 0}]
