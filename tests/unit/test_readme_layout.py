"""The README's Layout section names what the tree holds, so a newcomer can trust it: every
top-level folder, every part of the test bed, every module of the runtime's library and every
function."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _layout() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Layout\n(.*?)^## ", text, re.M | re.S)
    assert section, "README.md has no Layout section"
    return section.group(1)


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=False)
    if out.returncode == 0 and out.stdout:
        return [Path(line) for line in out.stdout.splitlines()]
    return [p.relative_to(REPO) for p in REPO.rglob("*") if p.is_file() and ".venv" not in p.parts]


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text))


def test_every_top_level_folder_is_in_the_layout() -> None:
    layout = _layout()
    folders = {p.parts[0] for p in _tracked() if len(p.parts) > 1 and not p.parts[0].startswith(".")}
    missing = sorted(f for f in folders if f"{f}/" not in layout)
    assert missing == []


def test_every_part_of_the_test_bed_is_in_the_layout() -> None:
    layout = _layout()
    parts = {
        p.parts[1] for p in _tracked() if p.parts[0] == "testbed" and len(p.parts) > 2 and p.parts[1] != "__pycache__"
    }
    modules = {
        p.parts[1] for p in _tracked() if p.parts[0] == "testbed" and len(p.parts) == 2 and p.suffix == ".py"
    } - {"__init__.py"}
    assert sorted(f for f in parts if f"{f}/" not in layout) == []
    assert sorted(m for m in modules if m not in layout) == []


def test_every_runtime_module_is_in_the_layout() -> None:
    words = _words(_layout())
    for package in ("shared", "functions"):
        modules = {p.stem for p in _tracked() if p.parts[0] == package and p.suffix == ".py"} - {"__init__"}
        assert sorted(modules - words) == [], package
