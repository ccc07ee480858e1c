"""shared.delivery.sink posts resync's own events to the broker, with the SinkBinding's sender token when
Knative mounts one. A real HTTP server on loopback stands in for the broker's ingress (what it
answers is the only thing under test here; the real ingress is in the e2e suite)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from shared.delivery import events
from shared.delivery.sink import Sink
from shared.errors import TemporaryError
from shared.model import event_types
from shared.model.tenant import TenantRef

REF = TenantRef("kubeopera-system", "alice", "u-1", 1)


class Ingress(BaseHTTPRequestHandler):
    received: list[dict[str, str]] = []
    status = 202

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Ingress.received.append({k.lower(): v for k, v in self.headers.items()})
        self.send_response(Ingress.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def ingress() -> Iterator[str]:
    Ingress.received, Ingress.status = [], 202
    server = HTTPServer(("127.0.0.1", 0), Ingress)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


def test_the_sinkbindings_token_is_read_at_each_send(ingress: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    sink = Sink(ingress, token_file=token_file)
    sink.send(events.make(event_types.INSTALL, "resync", REF))  # no token mounted: none sent
    token_file.write_text("first\n")
    sink.send(events.make(event_types.INSTALL, "resync", REF))
    token_file.write_text("rotated")  # Knative refreshes the Secret behind the mount
    sink.send(events.make(event_types.INSTALL, "resync", REF))
    assert [h.get("authorization") for h in Ingress.received] == [None, "Bearer first", "Bearer rotated"]
    assert all(h["ce-type"] == event_types.INSTALL for h in Ingress.received)


def test_a_refusal_by_the_broker_is_temporary(ingress: str, tmp_path: Path) -> None:
    Ingress.status = 401
    with pytest.raises(TemporaryError, match="401"):
        Sink(ingress, token_file=tmp_path / "absent").send(events.make(event_types.INSTALL, "resync", REF))
