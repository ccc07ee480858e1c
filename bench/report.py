"""The benchmarks' tables: figures with their spread, printed, and appended to ``bench/RESULTS.md``.

A :class:`Table` is a value (title, columns, rows, notes). :func:`record` prints the tables of
one benchmark run and appends them to ``bench/RESULTS.md`` under a heading that names the date,
the machine (cores, memory, CPU model, kernel), the pinned versions and the exact command, so a
figure is never read without what produced it. Figures are wall-clock on one machine; nothing in
the test suite asserts them.
"""

from __future__ import annotations

import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from testbed.toolchain.versions import VERSIONS

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def markdown(self) -> str:
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |"]
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(self.columns) - 1)) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        lines += [""] + [f"- {note}" for note in self.notes] if self.notes else []
        return "\n".join(lines) + "\n"


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]], notes: Iterable[str] = ()) -> Table:
    return Table(title, tuple(columns), tuple(tuple(r) for r in rows), tuple(notes))


def percentile(samples: Sequence[float], p: float) -> float:
    """The nearest-rank percentile (p in 0-100) of a non-empty sample."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def spread(samples: Sequence[float], scale: float = 1.0, digits: int = 2) -> str:
    """``median (min-max)`` of repeated runs, ``n/a`` for none; one run is shown alone."""
    if not samples:
        return "n/a"
    values = [s * scale for s in samples]
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def machine() -> str:
    cpuinfo = _read("/proc/cpuinfo").splitlines()
    models = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
    cpu = models[0] if models else platform.processor() or "unknown CPU"
    mem_kib = next(
        (int(line.split()[1]) for line in _read("/proc/meminfo").splitlines() if line.startswith("MemTotal:")), 0
    )
    cores = len(os.sched_getaffinity(0))
    return f"{cores} cores ({cpu}), {mem_kib / 1024 / 1024:.0f} GiB, Linux {platform.release()}"


def versions() -> str:
    pinned = ", ".join(f"{name} {version}" for name, version in VERSIONS.items() if not name.endswith("-module"))
    return f"Python {platform.python_version()}; {pinned}; vcluster chart 0.21.2 (the test bed's stand-in)"


def code() -> str:
    """The commit the benchmark ran, and whether the tree had changes on top of it."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=RESULTS.parent
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "shared", "functions", "bench", "testbed", ":!bench/RESULTS.md"],
            capture_output=True,
            text=True,
            cwd=RESULTS.parent.parent,
        )
    except OSError:
        return "unknown (no git)"
    changes = " + uncommitted changes" if dirty.stdout.strip() else ""
    return (sha.stdout.strip() or "unknown") + changes


def record(benchmark: str, tables: Sequence[Table], argv: Sequence[str] | None = None, ran: str | None = None) -> None:
    """Print ``tables`` and append them to bench/RESULTS.md with the run's context."""
    command = "python -m bench " + shlex.join(list(sys.argv[1:] if argv is None else argv))
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = [
        f"### {benchmark} — {stamp}",
        "",
        f"- command: `{command}`",
        f"- code: {ran or code()}",
        f"- machine: {machine()}",
        f"- versions: {versions()}",
        "",
    ]
    body = "\n".join(t.markdown() for t in tables)
    print("\n" + body)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Benchmark results\n\nAppended by `python -m bench` (see bench/__main__.py); newest last. "
            "Wall-clock figures on the machine named; compare ratios measured in the same run.\n\n"
        )
    with RESULTS.open("a") as out:
        out.write("\n".join(head) + "\n" + body + "\n")


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""
