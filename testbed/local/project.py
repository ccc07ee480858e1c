"""The clone the local stack runs from: it reads ``deploy/``, ``eventing/`` and the test bed's chart
where they are in the tree."""

from __future__ import annotations

from pathlib import Path

from testbed.local.errors import StackError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = Path(__file__).resolve().parents[1] / "chart"


def project_path(*parts: str) -> Path:
    """A file or folder of the clone; ``StackError`` if it is missing."""
    path = PROJECT_ROOT.joinpath(*parts)
    if not path.exists():
        raise StackError(f"{path} is missing: run from a clone of kubeopera-tenants (pip install -e .)")
    return path
