"""gunicorn's master hooks: the metrics folder for the workers, and who removes it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from functions import gunicorn_conf


def test_a_folder_made_at_start_is_removed_at_exit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    # set (empty, as unset to the hook) so that monkeypatch takes back what the hook sets
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")
    monkeypatch.setenv(gunicorn_conf._MADE_HERE, "")
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again

    gunicorn_conf.on_starting(None)
    made = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    assert made.is_dir() and made.parent == tmp_path
    (made / "counter_1.db").write_bytes(b"x")

    gunicorn_conf.on_exit(None)
    assert not made.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_folder_the_service_names_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    named = tmp_path / "metrics"
    named.mkdir()
    (named / "stale_1.db").write_bytes(b"x")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(named))
    monkeypatch.delenv(gunicorn_conf._MADE_HERE, raising=False)

    gunicorn_conf.on_starting(None)
    assert named.is_dir() and list(named.iterdir()) == []  # emptied at start, as the mode requires
    (named / "counter_1.db").write_bytes(b"x")

    gunicorn_conf.on_exit(None)
    assert (named / "counter_1.db").exists()
