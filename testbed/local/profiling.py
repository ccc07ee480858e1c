"""A function's WSGI app with every request profiled by pyinstrument: where its wall time goes
under load (``python -m bench burst --profile tenant-install``).

The stack starts a profiled function as it starts any (the image's gunicorn command and settings)
with the app ``testbed.local.profiling:create_app('functions.install')`` instead of
``functions.install:create_app()``. Each request is profiled in the thread that serves it (a
pyinstrument ``Profiler`` follows the thread it started in; gunicorn's gthread worker serves each
request in a thread of its pool), wall time, so waiting on the API server, on helm or on a lock
shows beside the Python that runs. The requests' sessions are added into one per worker process,
saved as pyinstrument's JSON to ``$PROFILE_DIR/<K_SERVICE>-<pid>.json`` every ``SAVE_SECONDS``
and when the worker exits; :func:`combined` adds up a folder of them and :func:`render` prints
the call tree. The test bed only: pyinstrument is not a dependency of the runtime.
"""

from __future__ import annotations

import atexit
import importlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pyinstrument import Profiler
from pyinstrument.renderers import ConsoleRenderer
from pyinstrument.session import Session

SAVE_SECONDS = 5.0
INTERVAL = 0.001  # pyinstrument's default sampling interval, seconds

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Sessions:
    """The sessions of one worker process's requests, added up, saved now and then."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._session: Session | None = None
        self._saved_at = time.monotonic()

    def add(self, session: Session) -> None:
        with self._lock:
            self._session = session if self._session is None else Session.combine(self._session, session)
            if time.monotonic() - self._saved_at >= SAVE_SECONDS:
                self._save()

    def save(self) -> None:
        with self._lock:
            self._save()

    def _save(self) -> None:
        if self._session is not None:
            self._session.save(str(self._path))
        self._saved_at = time.monotonic()


def create_app(module: str) -> WsgiApp:
    """``module``'s ``create_app()``, each request profiled (see the module)."""
    app: WsgiApp = importlib.import_module(module).create_app()
    folder = Path(os.environ["PROFILE_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    sessions = _Sessions(folder / f"{os.environ.get('K_SERVICE', module)}-{os.getpid()}.json")
    atexit.register(sessions.save)

    def profiled(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        profiler = Profiler(interval=INTERVAL, async_mode="disabled")
        profiler.start()
        try:
            return list(app(environ, start_response))  # the body made inside the profile
        finally:
            sessions.add(profiler.stop())

    return profiled


def combined(folder: Path, service: str) -> Session | None:
    """The sessions ``service``'s workers saved in ``folder``, added up (None: none saved)."""
    found = [Session.load(str(path)) for path in sorted(folder.glob(f"{service}-*.json"))]
    if not found:
        return None
    total = found[0]
    for session in found[1:]:
        total = Session.combine(total, session)
    return total


def render(session: Session) -> str:
    """The call tree, wall time in seconds, plain text (library frames folded)."""
    return str(ConsoleRenderer(unicode=False, color=False, show_all=False, short_mode=False).render(session))
