"""The kubeopera-api stand-in's HTTP side: the threaded server and the request handler.

Every request outside ``/_/`` is recorded on the
:class:`~testbed.standins.kubeopera_api.standin.ApiStandIn` the server belongs to, then answered as
its mode says (``hang`` holds it until released or timed out). Requests under ``/_/`` are the
control endpoints (recorded list, clear, mode) and are not recorded.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from testbed.standins.kubeopera_api.records import MODES, Mode, RecordedRequest

if TYPE_CHECKING:
    from testbed.standins.kubeopera_api.standin import ApiStandIn

CONTROL_PREFIX = "/_/"


class ApiServer(ThreadingHTTPServer):
    """One listening socket of the stand-in, a thread per request."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    standin: ApiStandIn


class ApiHandler(BaseHTTPRequestHandler):
    """Records a request and answers it as the stand-in's mode says, or serves a control endpoint."""

    server: ApiServer
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
