"""A stand-in for kubeopera-api: a small real HTTP server that records what it receives.

kubeopera-api is another team's service; the tenant functions only PATCH it
(``/api/v1/cloudspaces/{id}``). :class:`ApiStandIn` listens on 127.0.0.1 (port 0 = any free
port) with one thread per request, records every request (method, path, query, headers, body
and its JSON) as a frozen :class:`RecordedRequest`, and answers according to its mode:

- ``ok``: 200 with a small JSON body;
- ``error``: 500;
- ``hang``: holds the request until the mode changes or ``hang_seconds`` (60) pass, then
  answers as the new mode says (504 when it simply timed out);
- ``down``: the listening socket is closed, so connections are refused; switching to another
  mode listens again on the same port.

Control endpoints under ``/_/`` are not recorded: ``GET /_/requests`` (the recorded list as
JSON, so another process can read it), ``DELETE /_/requests`` (clear), ``GET /_/mode`` and
``PUT /_/mode`` with ``{"mode": "ok"|"error"|"hang"}`` or ``{"mode": "down", "seconds": N}``
(back up after N seconds, default 30). Run it on its own with
``python -m testbed.standins.kubeopera_api --port N``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, cast
from urllib.parse import urlsplit

Mode = Literal["ok", "error", "hang", "down"]
MODES: tuple[Mode, ...] = ("ok", "error", "hang", "down")
CONTROL_PREFIX = "/_/"


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the stand-in received it."""

    method: str
    path: str
    query: str
    headers: tuple[tuple[str, str], ...]
    body: str
    json: Any
    received_at: float

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        lowered = name.lower()
        for key, value in self.headers:
            if key.lower() == lowered:
                return value
        return None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["headers"] = [list(pair) for pair in self.headers]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordedRequest:
        return cls(
            method=str(data["method"]),
            path=str(data["path"]),
            query=str(data.get("query", "")),
            headers=tuple((str(k), str(v)) for k, v in data.get("headers", [])),
            body=str(data.get("body", "")),
            json=data.get("json"),
            received_at=float(data.get("received_at", 0.0)),
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    standin: ApiStandIn


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base class name
        return

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _read_body(self) -> str:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length).decode("utf-8", errors="replace") if length else ""

    def _handle(self) -> None:
        standin = self.server.standin
        parts = urlsplit(self.path)
        body = self._read_body()
        if parts.path.startswith(CONTROL_PREFIX):
            self._control(standin, parts.path, body)
            return
        parsed: Any = None
        if body:
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = None
        standin._record(
            RecordedRequest(
                method=self.command,
                path=parts.path,
                query=parts.query,
                headers=tuple((k, v) for k, v in self.headers.items()),
                body=body,
                json=parsed,
                received_at=time.time(),
            )
        )
        mode = standin.mode
        if mode == "hang":
            released = standin._wait_released()
            mode = standin.mode
            if not released or mode == "hang":
                self._reply(504, {"error": "kubeopera-api stand-in: hung request timed out"})
                return
        if mode == "down":
            self.close_connection = True  # drop it without an answer
            return
        if mode == "error":
            self._reply(500, {"error": "kubeopera-api stand-in told to fail"})
            return
        self._reply(standin.ok_status, standin.ok_body)

    def _control(self, standin: ApiStandIn, path: str, body: str) -> None:
        if path == "/_/requests" and self.command == "GET":
            self._reply(200, [r.to_dict() for r in standin.requests()])
        elif path == "/_/requests" and self.command == "DELETE":
            standin.clear()
            self._reply(200, {"cleared": True})
        elif path == "/_/mode" and self.command == "GET":
            self._reply(200, {"mode": standin.mode})
        elif path == "/_/mode" and self.command in ("PUT", "POST"):
            try:
                data = json.loads(body or "{}")
                mode = data["mode"]
                if mode not in MODES:
                    raise ValueError(mode)
            except (ValueError, KeyError, TypeError):
                self._reply(400, {"error": f'body must be {{"mode": one of {list(MODES)}}}'})
                return
            if mode == "down":
                seconds = float(data.get("seconds", 30))
                self._reply(200, {"mode": "down", "seconds": seconds})
                threading.Thread(target=standin._down_for, args=(seconds,), daemon=True).start()
            else:
                standin.set_mode(cast(Mode, mode))
                self._reply(200, {"mode": mode})
        else:
            self._reply(404, {"error": f"no control endpoint {self.command} {path}"})

    def _reply(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. while we hung)


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
        self._server: _Server | None = None
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
        """Switch between ``ok``, ``error``, ``hang`` and ``down`` (see the module docstring)."""
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
        server = _Server((self.host, self.port), _Handler)
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


def main(argv: list[str] | None = None) -> int:
    """Serve until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(description="kubeopera-api stand-in (records requests)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", choices=MODES, default="ok")
    parser.add_argument("--hang-seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    standin = ApiStandIn(args.host, args.port, hang_seconds=args.hang_seconds)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    url = standin.start()
    standin.set_mode(args.mode)
    print(f"kubeopera-api stand-in listening on {url}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        standin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
