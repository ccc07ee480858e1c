"""The kubeopera-api stand-in's state and controls: :class:`ApiStandIn`.

It holds the mode and the recorded requests behind one condition (so a test can wait for
requests), opens and closes the listening socket (:mod:`.server`) on start, stop and
going ``down`` and back, and releases hung requests when the mode leaves ``hang``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from testbed.standins.kubeopera_api.records import MODES, Mode, RecordedRequest
from testbed.standins.kubeopera_api.server import ApiHandler, ApiServer


class ApiStandIn:
    """The kubeopera-api stand-in server. ``start()`` returns its base URL."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        hang_seconds: float = 60.0,
        ok_status: int = 200,
        ok_body: Any = None,
    ) -> None:
        self.host = host
        self.port = port
        self.hang_seconds = hang_seconds
        self.ok_status = ok_status
        self.ok_body: Any = ok_body if ok_body is not None else {"status": "ok"}
        self._mode: Mode = "ok"
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Condition()
        self._release = threading.Event()
        self._release.set()
        self._server: ApiServer | None = None
        self._thread: threading.Thread | None = None
        self._started = False

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (valid once started)."""
        if not self._started:
            raise RuntimeError("the kubeopera-api stand-in is not started")
        return f"http://{self.host}:{self.port}"

    @property
    def mode(self) -> Mode:
        with self._lock:
            return self._mode

    def start(self) -> str:
        """Listen and serve in a background thread; return the base URL."""
        with self._lock:
            if self._started:
                return self.url
            self._listen()
            self._started = True
        return self.url

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        with self._lock:
            self._started = False
            self._release.set()
            self._close()

    def __enter__(self) -> ApiStandIn:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def requests(self) -> list[RecordedRequest]:
        """Every request recorded so far, oldest first (control requests excluded)."""
        with self._lock:
            return list(self._requests)

    def clear(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._requests.clear()

    def wait_for_requests(self, count: int = 1, timeout: float = 30.0) -> list[RecordedRequest]:
        """Block until at least ``count`` requests were recorded; return them (TimeoutError if not)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self._requests) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{len(self._requests)} of {count} requests arrived in {timeout}s")
                self._lock.wait(remaining)
            return list(self._requests)

    def set_mode(self, mode: Mode) -> None:
        """Switch between ``ok``, ``error``, ``hang`` and ``down`` (see :mod:`testbed.standins.kubeopera_api`)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        with self._lock:
            previous, self._mode = self._mode, mode
            if mode == "hang":
                self._release.clear()
            else:
                self._release.set()
            if not self._started:
                return
            if mode == "down" and previous != "down":
                self._close()
            elif mode != "down" and previous == "down":
                self._listen()

    def _down_for(self, seconds: float) -> None:
        self.set_mode("down")
        time.sleep(seconds)
        with self._lock:
            still_down = self._mode == "down"
        if still_down:
            self.set_mode("ok")

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)
            self._lock.notify_all()

    def _wait_released(self) -> bool:
        return self._release.wait(self.hang_seconds)

    def _listen(self) -> None:
        server = ApiServer((self.host, self.port), ApiHandler)
        server.standin = self
        self.port = int(server.server_address[1])
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="api-standin", daemon=True
        )
        thread.start()
        self._server, self._thread = server, thread

    def _close(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)
