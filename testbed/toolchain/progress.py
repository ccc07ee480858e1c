"""What a cold build of the test bed's tools tells the person waiting for it, and how long it takes.

The toolchain (:mod:`testbed.toolchain`) builds each tool in one or more steps, each one
``go build`` invocation. How long a step usually takes is what the toolchain last measured for it
on this machine, recorded in ``timings.json`` in the cache root (one number of seconds per step,
written after each successful build), or, before anything was recorded, a built-in default
measured on 2 cores with empty Go caches (``DEFAULT_SECONDS``).

From those come the lines on stderr: a plan (which tools, how long in all), a line when a tool
starts (what it builds, how long it usually takes), one every ``TICK_SECONDS`` while a step runs
(``toolchain: kube-apiserver 2m15s of ~5m30s, ~14m left in all``), a line when a tool is done,
and with each an estimate of the time left for everything still to build.

Everything here takes its clock and its output as arguments, so it is tested without Go and
without waiting; ``Ticker`` is the one thread (it calls back every interval until stopped).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

TICK_SECONDS = 15.0
UNKNOWN_SECONDS = 60.0  # a step with neither a record nor a default
TIMINGS_FILE = "timings.json"

# Measured on this machine (2 cores, empty GOCACHE, warm module cache), in the order ensure_all
# builds: a binary's figure includes what earlier builds left in the Go build cache for it.
# kubectl and kube-controller-manager reuse much of kube-apiserver's compile work; the Knative
# Eventing binaries reuse the adapter's (same module), and each after the first reuses the
# controller's: alone, with an empty cache, the seven take about 5 minutes, not one.
DEFAULT_SECONDS: Mapping[str, float] = {
    "kube-apiserver": 333.0,
    "kubectl": 60.0,
    "kube-controller-manager": 71.0,
    "etcd": 40.0,
    "helm": 112.0,
    "registry": 80.0,
    "apiserver_receive_adapter": 119.0,
    "controller": 27.0,
    "mtchannel_broker": 7.0,
    "broker_ingress": 4.0,
    "broker_filter": 5.0,
    "in_memory_channel_controller": 8.0,
    "in_memory_channel_dispatcher": 5.0,
    "mtping": 3.0,
    "service-proxy": 10.0,  # 2 s after the tools before it (net/http compiled); 23 s from an empty GOCACHE
    "knative-check": 90.0,
    # Measured alone from an empty GOCACHE, jaeger after promtool (so a little high: in ensure_all's
    # order they also find the grpc, protobuf and OpenTelemetry packages the tools before compiled).
    "promtool": 175.0,
    "jaeger": 281.0,
    # The cluster tier (ensure_cluster), after everything above: the node's binaries reuse
    # kube-apiserver's packages, Serving's reuse Eventing's.
    "kubelet": 240.0,
    "kube-scheduler": 10.0,
    "kube-proxy": 15.0,
    "coredns": 140.0,
    "pause": 5.0,
    "serving-controller": 125.0,
    "serving-webhook": 5.0,
    "serving-activator": 5.0,
    "serving-autoscaler": 6.0,
    "serving-queue": 3.0,
    "eventing-webhook": 60.0,
    "traefik": 420.0,
    # Measured with kube-node's packages in the cache and another build on the other core.
    "kube-router": 310.0,
}


@dataclass(frozen=True)
class Step:
    """One `go build` invocation: one binary of a tool. Binary names are unique across tools,
    so the binary alone names the step in timings.json."""

    tool: str
    binary: str


def load_timings(path: Path) -> dict[str, float]:
    """The recorded seconds per step; nothing (not an error) when the file is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(k): float(v) for k, v in data.items() if isinstance(v, int | float) and not isinstance(v, bool) and v > 0
    }


def record_timing(path: Path, key: str, seconds: float) -> None:
    """Remember how long a step took; replaces the file in one rename, so readers never see half."""
    timings = load_timings(path) | {key: round(seconds, 1)}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(dict(sorted(timings.items())), handle, indent=2)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def usual_seconds(step: Step, recorded: Mapping[str, float]) -> float:
    return recorded.get(step.binary, DEFAULT_SECONDS.get(step.binary, UNKNOWN_SECONDS))


def format_duration(seconds: float) -> str:
    """45s, 2m15s, 1h05m: whole seconds below an hour, whole minutes above."""
    total = max(0, int(seconds + 0.5))
    if total >= 3600:
        total = (total + 30) // 60 * 60
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def remaining_seconds(pending: Sequence[float], current: float = 0.0, elapsed: float = 0.0) -> float:
    """Time left: the usual durations of steps not started, and what is left of the running one."""
    return sum(pending) + max(current - elapsed, 0.0)


def left_text(seconds: float) -> str:
    return f"~{format_duration(seconds)} left in all" if seconds > 0 else "nearly done"


def plan_line(tools: Sequence[str], seconds: float, cache: Path) -> str:
    return (
        f"toolchain: {len(tools)} tool(s) to build from the Go module proxy ({', '.join(tools)}), "
        f"usually ~{format_duration(seconds)}; once only, later runs find them in {cache}"
    )


def start_line(tool: str, version: str, steps: Sequence[Step], usual: float, left: float) -> str:
    binaries = ", ".join(step.binary for step in steps)
    return f"toolchain: building {tool} {version} ({binaries}), usually ~{format_duration(usual)}; {left_text(left)}"


def tick_line(step: Step, elapsed: float, usual: float, left: float) -> str:
    over = " (longer than usual)" if elapsed > usual else ""
    return f"toolchain: {step.binary} {format_duration(elapsed)} of ~{format_duration(usual)}{over}, {left_text(left)}"


def done_line(tool: str, took: float, usual: float, left: float) -> str:
    tail = left_text(left) if left > 0 else "nothing left to build"
    return f"toolchain: built {tool} in {format_duration(took)} (usually ~{format_duration(usual)}); {tail}"


class Progress:
    """The steps still to build and the clock; says what is happening through ``emit``.

    Made once per call that may build (a plan of tools and their steps); ``toolchain`` calls
    ``tool_started``, ``step_started``/``step_finished`` around each ``go build``, ``tick`` from
    a ``Ticker`` meanwhile, and ``tool_finished`` or ``tool_skipped`` (another process built it).
    """

    def __init__(
        self,
        plan: Mapping[str, Sequence[Step]],
        recorded: Mapping[str, float],
        clock: Callable[[], float],
        emit: Callable[[str], None],
    ) -> None:
        self._usual = {step: usual_seconds(step, recorded) for steps in plan.values() for step in steps}
        self._pending = [step for steps in plan.values() for step in steps]
        self._plan = {tool: tuple(steps) for tool, steps in plan.items()}
        self._clock = clock
        self._emit = emit
        self._lock = threading.Lock()
        self._current: tuple[Step, float] | None = None
        self._tool_started = 0.0

    def total_seconds(self) -> float:
        return sum(self._usual.values())

    def left(self) -> float:
        with self._lock:
            return self._left()

    def _left(self) -> float:
        pending = [self._usual[step] for step in self._pending]
        if self._current is None:
            return remaining_seconds(pending)
        step, since = self._current
        return remaining_seconds(pending, self._usual[step], self._clock() - since)

    def announce(self, cache: Path) -> None:
        if self._plan:
            self._emit(plan_line(list(self._plan), self.total_seconds(), cache))

    def tool_started(self, tool: str, version: str) -> None:
        steps = self._plan.get(tool, ())
        self._tool_started = self._clock()
        usual = sum(self._usual[step] for step in steps)
        self._emit(start_line(tool, version, steps, usual, self.left()))

    def step_started(self, step: Step) -> None:
        with self._lock:
            if step in self._pending:
                self._pending.remove(step)
            self._usual.setdefault(step, UNKNOWN_SECONDS)
            self._current = (step, self._clock())

    def tick(self) -> None:
        with self._lock:
            if self._current is None:
                return
            step, since = self._current
            line = tick_line(step, self._clock() - since, self._usual[step], self._left())
        self._emit(line)

    def step_finished(self, failed: bool = False) -> float:
        """Ends the running step (a line if it succeeded and its tool has more); returns how long it took."""
        with self._lock:
            if self._current is None:
                return 0.0
            step, since = self._current
            self._current = None
            took = self._clock() - since
            several = len(self._plan.get(step.tool, ())) > 1
            left = self._left()
        if several and not failed:
            self._emit(done_line(step.binary, took, self._usual[step], left))
        return took

    def tool_finished(self, tool: str) -> None:
        usual = sum(self._usual[step] for step in self._plan.get(tool, ()))
        self._emit(done_line(tool, self._clock() - self._tool_started, usual, self.left()))

    def tool_skipped(self, tool: str) -> None:
        """Another process built it meanwhile: its steps no longer count."""
        with self._lock:
            self._pending = [step for step in self._pending if step.tool != tool]


class Ticker:
    """Calls ``tick`` every ``interval`` seconds on a daemon thread while the with-block runs."""

    def __init__(self, interval: float, tick: Callable[[], None]) -> None:
        self._interval = interval
        self._tick = tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="toolchain-progress", daemon=True)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._tick()
