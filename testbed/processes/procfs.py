"""What /proc says of a process: its children, resident memory and CPU seconds (Linux only)."""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(p) for p in path.read_text().split()]
    except OSError:
        return []


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """Resident memory in MiB (``VmHWM``: its peak so far); 0 for a process that is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of a process: utime+stime, cutime+cstime."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime) / TICKS, (cutime + cstime) / TICKS
