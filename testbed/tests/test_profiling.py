"""The profiling wrapper of ``bench burst --profile``: each request profiled in its own thread,
the sessions of a worker added up and saved, a folder of them added up again and rendered."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from testbed.local import profiling

APP = '''
import time

def slow_part():
    time.sleep(0.05)

def create_app():
    def app(environ, start_response):
        slow_part()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"done"]
    return app
'''


def _call(app: Callable[..., Iterable[bytes]]) -> bytes:
    started: list[str] = []
    body = b"".join(app({}, lambda status, headers: started.append(status)))
    assert started == ["200 OK"]
    return body


def test_each_request_is_profiled_and_a_folder_adds_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "profiled_fixture_app.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PROFILE_DIR", str(tmp_path / "profiles"))
    monkeypatch.setenv("K_SERVICE", "tenant-fixture")
    monkeypatch.setattr(profiling, "SAVE_SECONDS", 0.0)  # save on every request
    at_exit: list[Callable[[], Any]] = []
    monkeypatch.setattr(profiling.atexit, "register", at_exit.append)

    app = profiling.create_app("profiled_fixture_app")
    threads = [threading.Thread(target=_call, args=(app,)) for _ in range(3)]  # as gthread serves them
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _call(app) == b"done", "the app's answer, unchanged"
    assert len(at_exit) == 1, "the last requests are saved when the worker exits"
    at_exit[0]()

    saved = list((tmp_path / "profiles").glob("tenant-fixture-*.json"))
    assert len(saved) == 1, saved
    session = profiling.combined(tmp_path / "profiles", "tenant-fixture")
    assert session is not None
    root = session.root_frame()
    assert root is not None and root.time >= 4 * 0.05 * 0.95, "all four requests' sleeps, added up"
    text = profiling.render(session)
    assert "slow_part" in text and "profiled_fixture_app.py" in text, text
    assert profiling.combined(tmp_path / "profiles", "tenant-other") is None
