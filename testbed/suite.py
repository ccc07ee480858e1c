"""``make test``'s runner: the suite as groups that run side by side, each in a network namespace
of its own, and one verdict.

The suite's time is mostly waiting (a vCluster booting, a Retry-After poll, a retry budget running
out), not CPU, and each end-to-end module starts a stack of its own. So the tiers run at once:
lint and the type check, the unit and deploy tiers, the integration tier, the end-to-end modules
in a few groups and the cluster tier, at most ``jobs`` at a time (the cluster tier counting as two,
and at most one stack beside it), the longest first. Each group is
one pytest process under ``tools/isolated`` (a private network namespace: Knative's channel
dispatcher takes the fixed ports 8080 and 8443, so two stacks cannot share one), with its own
``--basetemp`` and no cache plugin, so groups never touch each other's files.

Every module of ``tests/`` and ``testbed/tests/`` is in exactly one group (:func:`plan` checks it, and so does a unit
test): a new module goes to the group of its folder unless :data:`GROUPS` names it.

A group's output goes to its log file; when it ends, its closing lines are printed, and all of
its output when it failed, so that a red run is diagnosed from CI's log alone. The last line is
the verdict over all groups, ``N passed, N failed, N skipped``, and the exit code is pytest's
worst.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The test folders: the project's, and the test bed's own tests beside it.
TEST_ROOTS = (ROOT / "tests", ROOT / "testbed" / "tests")


@dataclass(frozen=True)
class Group:
    """One pytest process (or a check) of the suite."""

    name: str
    paths: tuple[str, ...] = ()  # test modules or folders, relative to the clone
    pytest_args: tuple[str, ...] = ()
    command: tuple[str, ...] = ()  # a check that is not pytest (lint, types)
    weight: float = 60.0  # its usual seconds, to start the longest first
    cluster: bool = False  # the cluster tier: needs its tools and root
    slots: int = 1  # of the ``jobs`` running at once, how many this group takes (its CPU)
    stack: bool = False  # it starts Knative stacks of its own (an end-to-end group)

    def argv(self, python: str, basetemp: Path) -> list[str]:
        if self.command:
            return [
                str(ROOT / "tools" / "isolated"),
                *(python if part == "{python}" else part for part in self.command),
            ]
        return [
            str(ROOT / "tools" / "isolated"),
            python,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            f"--basetemp={basetemp}",
            "--durations=15",  # where a group's time goes, in its log (setup: a stack's start)
            *self.pytest_args,
            *self.paths,
        ]


# The weights order the groups: the heaviest start first, the cluster tier before all. Beside it
# runs one stack at most (:data:`STACKS_BESIDE_CLUSTER`), so the lighter groups (integration, unit
# and deploy, the test bed's, lint) go beside it while they last, and e2e-faults, the longest
# stack, comes next after e2e-pipeline. Measured orders: e2e-faults first beside the cluster tier,
# the cluster tier 733 s and the suite 1,250 s (run of e7ce397); e2e-pipeline, then
# e2e-observability beside it at three at a time, 521 s and 1,200 s (run of a15878a).
GROUPS: tuple[Group, ...] = (
    Group("lint+types", command=("{python}", "-m", "testbed.suite", "--checks"), weight=60),
    Group("unit+deploy", paths=("tests/unit", "tests/deploy"), weight=120),
    Group("integration", paths=("tests/integration",), weight=300),
    Group("testbed", paths=("testbed/tests",), weight=90),  # the test bed's own tests
    Group("e2e-lifecycle", paths=("tests/e2e/test_lifecycle.py",), weight=400, stack=True),
    Group("e2e-faults", paths=("tests/e2e/test_faults.py",), weight=480, stack=True),
    # ten Tenants through a fleet upgrade in waves, one whose upgrade helm refuses (80 s here)
    Group("e2e-rollout", paths=("tests/e2e/test_rollout.py",), weight=150, stack=True),
    Group(
        "e2e-pipeline",
        paths=("tests/e2e/test_pipeline.py", "tests/e2e/test_sender_identity.py"),
        weight=500,
        stack=True,
    ),
    Group(
        "e2e-observability",
        paths=(
            "tests/e2e/test_tracing.py",
            "tests/e2e/test_observability.py",
            "tests/e2e/test_no_secret_leaks.py",
            "tests/e2e/test_local_command.py",
        ),
        weight=350,
        stack=True,
    ),
    # Two slots: a real node with Knative Serving, whose pods' cold starts and autoscaler are
    # timed by its tests.
    Group("cluster", paths=("tests/cluster",), pytest_args=("-m", "cluster"), weight=600, cluster=True, slots=2),
)

# Stacks that may run beside the cluster tier: next to two, its cold starts and the autoscaler's
# timing stretched past what its tests allow.
STACKS_BESIDE_CLUSTER = 1

_SUMMARY = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)\b")
# pytest's last line: "==== 3 passed, 1 failed in 2.01s (0:00:02) ====", without the rules under -q
_CLOSING = re.compile(r"^(=+ )?(\d+ \w+(, \d+ \w+)*|no tests ran) in [\d.]+s( \([\d:]+\))?( =+)?$")


def modules(roots: Sequence[Path] = TEST_ROOTS, base: Path = ROOT) -> list[str]:
    """Every test module of the suite, relative to the clone."""
    return sorted(str(p.relative_to(base)) for root in roots for p in root.rglob("test_*.py"))


def plan(groups: Sequence[Group], roots: Sequence[Path] = TEST_ROOTS, base: Path = ROOT) -> dict[str, str]:
    """Module -> its group; raises ``ValueError`` when a module is in no group or in two."""
    owner: dict[str, str] = {}
    for module in modules(roots, base):
        claimed = [
            g.name for g in groups if any(module == p or module.startswith(p.rstrip("/") + "/") for p in g.paths)
        ]
        if len(claimed) != 1:
            raise ValueError(
                f"{module} is in {len(claimed)} groups ({', '.join(claimed) or 'none'}): it must be in one"
            )
        owner[module] = claimed[0]
    return owner


def fits(group: Group, running: Sequence[Group], jobs: int) -> bool:
    """Whether ``group`` may start beside ``running``: a free slot for it, and no more stacks
    beside the cluster tier than :data:`STACKS_BESIDE_CLUSTER`."""
    if sum(g.slots for g in running) + min(group.slots, jobs) > jobs:
        return False
    beside_cluster = group.cluster or any(g.cluster for g in running)
    return not beside_cluster or sum(g.stack for g in (group, *running)) <= STACKS_BESIDE_CLUSTER


def next_group(todo: Sequence[Group], running: Sequence[Group], jobs: int) -> Group | None:
    """The heaviest group of ``todo`` (already in that order) that fits now, if any."""
    return next((group for group in todo if fits(group, running, jobs)), None)


def counts(output: str) -> dict[str, int]:
    """The figures of pytest's closing line (``3 passed, 1 failed in 2.0s``); empty if there is none."""
    closing = [line for line in output.splitlines() if _CLOSING.match(line.strip())]
    if not closing:
        return {}
    found: dict[str, int] = {}
    for number, word in _SUMMARY.findall(closing[-1]):
        key = "errors" if word.startswith("error") else word
        found[key] = found.get(key, 0) + int(number)
    return found


def verdict(totals: Mapping[str, int]) -> str:
    """The plain closing line CI reads: ``N passed, N failed`` with ``, N skipped`` after."""
    failed = totals.get("failed", 0) + totals.get("errors", 0)
    return f"suite: {totals.get('passed', 0)} passed, {failed} failed, {totals.get('skipped', 0)} skipped"


@dataclass
class Running:
    group: Group
    process: subprocess.Popen[bytes]
    log: Path
    started: float = field(default_factory=time.monotonic)


def run(groups: Sequence[Group], jobs: int, out_dir: Path, python: str, extra: Iterable[str] = ()) -> int:
    """Run the groups, at most ``jobs`` at once, the heaviest first; print each as it ends."""
    # pytest makes each --basetemp, not its parents. A short root: the cluster tier's kubelet puts
    # unix sockets under its test's tmp_path, and a socket's path has at most 107 characters.
    temp_root = Path(tempfile.mkdtemp(prefix="kt"))
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = sorted(groups, key=lambda g: -g.weight)
    running: list[Running] = []
    totals: dict[str, int] = {}
    started = time.monotonic()
    extra = tuple(extra)
    print(f"suite: {len(todo)} groups, {jobs} at a time; logs in {out_dir}", flush=True)
    try:
        worst = _run(todo, running, jobs, out_dir, temp_root, python, extra, totals)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: each running group stops as pytest does on Ctrl-C
        for entry in running:
            entry.process.send_signal(signal.SIGINT)
        for entry in running:
            try:
                entry.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                entry.process.kill()
        print(f"\nsuite: interrupted; stopped {[entry.group.name for entry in running]}", flush=True)
        return 130
    print(f"\nsuite: all groups done in {time.monotonic() - started:.0f}s", flush=True)
    print(verdict(totals), flush=True)
    if worst == 0:  # each group's --basetemp (pytest keeps its tests' tmp_path) is of no more use
        shutil.rmtree(temp_root, ignore_errors=True)
    else:
        print(f"suite: the groups' temporary files are kept in {temp_root}", flush=True)
    return worst


def _run(
    todo: list[Group],
    running: list[Running],
    jobs: int,
    out_dir: Path,
    temp_root: Path,
    python: str,
    extra: tuple[str, ...],
    totals: dict[str, int],
) -> int:
    worst = 0
    while todo or running:
        while (group := next_group(todo, [r.group for r in running], jobs)) is not None:
            todo.remove(group)
            log = out_dir / f"{group.name}.log"
            argv = group.argv(python, temp_root / group.name.replace("+", "-"))
            if not group.command:
                argv += list(extra)
            with open(log, "wb") as handle:
                process = subprocess.Popen(
                    argv, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
            running.append(Running(group, process, log))
            print(f"suite: {group.name} started ({' '.join(group.paths) or ' '.join(group.command)})", flush=True)
        time.sleep(0.5)
        for entry in [r for r in running if r.process.poll() is not None]:
            running.remove(entry)
            code = entry.process.returncode
            output = entry.log.read_text(errors="replace")
            found = counts(output)
            if code == 5 and not found.get("failed"):  # pytest: every test of the group deselected
                code = 0
            for key, value in found.items():
                totals[key] = totals.get(key, 0) + value
            if code != 0 and not entry.group.command and not (found.get("failed") or found.get("errors")):
                totals["errors"] = totals.get("errors", 0) + 1  # it died before it could say
            worst = max(worst, code)
            seconds = time.monotonic() - entry.started
            state = "passed" if code == 0 else f"FAILED (exit {code})"
            print(f"\n===== suite: {entry.group.name} {state} in {seconds:.0f}s =====", flush=True)
            lines = output.splitlines()
            shown = lines if code != 0 else lines[-12:]
            print("\n".join(shown), flush=True)
    return worst


def checks(python: str) -> int:
    """Lint and the type check, one after the other (the ``lint+types`` group)."""
    code = 0
    for argv in (
        [python, "-m", "ruff", "check", "shared", "functions", "testbed", "tests", "bench"],
        [python, "-m", "mypy"],
    ):
        print("$ python", " ".join(argv[1:]), flush=True)
        code = max(code, subprocess.run(argv, cwd=ROOT, check=False).returncode)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.suite", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("SUITE_JOBS", "4")), help="groups at once")
    parser.add_argument("--only", action="append", default=[], help="run only these groups (repeatable)")
    parser.add_argument("--no-cluster", action="store_true", help="leave the cluster tier out")
    parser.add_argument("--out", type=Path, default=None, help="where the groups' logs go (default: a new folder)")
    parser.add_argument("--checks", action="store_true", help=argparse.SUPPRESS)
    args, pytest_args = parser.parse_known_args(argv)  # the rest goes to every group's pytest
    if args.checks:
        return checks(sys.executable)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped like Ctrl-C: the groups too
    # Started in the background by a non-interactive shell (CI, nohup), SIGINT is ignored, and the
    # groups would inherit that: they could not be stopped with their stacks torn down, and the
    # suite's interrupt left them running (found stopping a CI run). Handled here, the groups start
    # with SIGINT at its default and stop as pytest does on Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    plan(GROUPS)
    groups = [g for g in GROUPS if (not args.only or g.name in args.only) and not (args.no_cluster and g.cluster)]
    if unknown := set(args.only) - {g.name for g in GROUPS}:
        parser.error(f"no group {sorted(unknown)}; the groups are {[g.name for g in GROUPS]}")
    out = args.out or Path(tempfile.mkdtemp(prefix="kubeopera-suite-"))  # two runs at once never share one
    return run(groups, max(1, args.jobs), out, sys.executable, pytest_args)


if __name__ == "__main__":
    sys.exit(main())
