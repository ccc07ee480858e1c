"""The service proxy (cluster DNS + kube-proxy stand-in): forwarding by Service name and the hops it records.

Real loopback HTTP: the proxy and a small upstream server both listen on 127.0.0.1 in this process.
"""

from __future__ import annotations

import http.server
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import requests

from testbed.standins.service_proxy import Exchange, Hop, ServiceProxy

HOST = "tenant-install.kubeopera-system.svc.cluster.local"
TRACEPARENT = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
EVENT = {
    "ce-specversion": "1.0",
    "ce-id": "e-1",
    "ce-source": "/apis/v1/namespaces/kubeopera-system/tenants",
    "ce-type": "dev.knative.apiserver.resource.add",
    "traceparent": TRACEPARENT,
    "Content-Type": "application/json",
}


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Upstream:
    """A loopback HTTP server answering every request with the same canned reply."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    seen: list[Seen] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    gate: threading.Event | None = None  # when set, the answer waits for it
    server: http.server.ThreadingHTTPServer | None = None

    def start(self) -> int:
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
                return

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                upstream.seen.append(
                    Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                upstream.arrived.set()
                if upstream.gate is not None:
                    upstream.gate.wait(10)
                self.send_response(upstream.status)
                for key, value in upstream.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(upstream.body)))
                self.end_headers()
                self.wfile.write(upstream.body)

            do_GET = do_POST = _answer

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return int(self.server.server_address[1])

    def stop(self) -> None:
        if self.gate is not None:
            self.gate.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def proxy() -> Iterator[ServiceProxy]:
    with ServiceProxy() as started:
        yield started


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as client:
        client.trust_env = False  # no HTTP_PROXY / NO_PROXY from the environment
        yield client


def send(
    session: requests.Session, proxy: ServiceProxy, url: str, *, method: str = "POST", **kw: object
) -> requests.Response:
    return session.request(method, url, proxies={"http": proxy.url}, timeout=10, **kw)  # type: ignore[arg-type]


def recorded(proxy: ServiceProxy, count: int = 1) -> list[Hop]:
    """The hops once ``count`` are recorded (a hop is kept just after its answer is written)."""
    assert proxy.wait(lambda hops: len(hops) >= count, 5)
    return proxy.hops()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_request_reaches_the_mapped_port_with_host_body_and_cloudevent_headers(
    proxy: ServiceProxy, upstream: Upstream, session: requests.Session
) -> None:
    proxy.routes.add(HOST, upstream.start())
    send(session, proxy, f"http://{HOST}/tenants?x=1", headers=EVENT, data=b'{"name": "alice"}')
    [seen] = upstream.seen
    assert (seen.method, seen.path, seen.body) == ("POST", "/tenants?x=1", b'{"name": "alice"}')
    assert seen.headers["host"] == HOST
    assert {k: seen.headers[k.lower()] for k in EVENT} == EVENT


def test_the_upstream_answer_comes_back_with_status_headers_and_body(
    proxy: ServiceProxy, upstream: Upstream, session: requests.Session
) -> None:
    upstream.status, upstream.body = 503, b'{"error": "booting"}'
    upstream.headers = {"Retry-After": "15", "ce-type": "io.kubeopera.tenant.ready"}
    proxy.routes.add(HOST, upstream.start())
    response = send(session, proxy, f"http://{HOST}/", headers=EVENT, data=b"{}")
    assert response.status_code == 503
    assert (response.headers["Retry-After"], response.headers["ce-type"]) == ("15", "io.kubeopera.tenant.ready")
    assert response.content == b'{"error": "booting"}'


def test_a_suffix_route_serves_every_name_under_it(
    proxy: ServiceProxy, upstream: Upstream, session: requests.Session
) -> None:
    proxy.routes.add_suffix(".knative-eventing.svc.cluster.local", upstream.start())
    response = send(session, proxy, "http://broker-ingress.knative-eventing.svc.cluster.local/ns/default", data=b"x")
    assert response.status_code == 200
    assert upstream.seen[0].headers["host"] == "broker-ingress.knative-eventing.svc.cluster.local"


def test_an_exact_route_wins_over_a_suffix_and_routes_ignore_case_and_a_trailing_dot(
    proxy: ServiceProxy, session: requests.Session
) -> None:
    by_suffix, exact = Upstream(body=b"suffix"), Upstream(body=b"exact")
    try:
        proxy.routes.add_suffix(".knative-eventing.svc.cluster.local", by_suffix.start())
        proxy.routes.add("broker-filter.knative-eventing.svc.cluster.local", exact.start())
        answers = [
            send(session, proxy, f"http://{host}/").text
            for host in (
                "broker-filter.knative-eventing.svc.cluster.local",
                "Broker-Filter.Knative-Eventing.svc.cluster.local.",
                "broker-ingress.knative-eventing.svc.cluster.local",
            )
        ]
        assert answers == ["exact", "exact", "suffix"]
        assert send(session, proxy, f"http://{HOST}/").status_code == 502
    finally:
        by_suffix.stop()
        exact.stop()


def test_routes_added_before_the_proxy_starts_apply_once_it_starts(
    upstream: Upstream, session: requests.Session
) -> None:
    proxy = ServiceProxy()
    proxy.routes.add(HOST, upstream.start())
    with proxy:
        assert send(session, proxy, f"http://{HOST}/").status_code == 200


def test_an_unknown_host_gets_502_with_a_message_and_is_recorded(
    proxy: ServiceProxy, session: requests.Session
) -> None:
    response = send(session, proxy, "http://nobody.kubeopera-system.svc.cluster.local/", data=b"x")
    assert response.status_code == 502
    assert "no Service answers for 'nobody.kubeopera-system.svc.cluster.local'" in response.text
    [hop] = recorded(proxy)
    assert (hop.host, hop.status) == ("nobody.kubeopera-system.svc.cluster.local", 502)


def test_an_upstream_that_is_down_gives_502_and_is_recorded(proxy: ServiceProxy, session: requests.Session) -> None:
    port = free_port()
    proxy.routes.add(HOST, port)
    response = send(session, proxy, f"http://{HOST}/", headers=EVENT, data=b"{}")
    assert response.status_code == 502
    assert f"127.0.0.1:{port}" in response.text
    [hop] = recorded(proxy)
    assert (hop.host, hop.status, hop.ce("id")) == (HOST, 502, "e-1")
    assert proxy.in_flight() == 0


def test_a_chunked_request_body_is_forwarded_whole(
    proxy: ServiceProxy, upstream: Upstream, session: requests.Session
) -> None:
    proxy.routes.add(HOST, upstream.start())
    response = send(session, proxy, f"http://{HOST}/", data=iter([b"hello ", b"chunked ", b"world"]))
    assert response.status_code == 200
    [seen] = upstream.seen
    assert seen.body == b"hello chunked world"
    assert "transfer-encoding" not in seen.headers
    assert seen.headers["content-length"] == str(len(b"hello chunked world"))


def test_a_hop_records_the_request_its_cloudevent_and_trace_context_and_the_reply(
    proxy: ServiceProxy, upstream: Upstream, session: requests.Session
) -> None:
    upstream.status = 200
    upstream.headers = {"ce-type": "io.kubeopera.tenant.provisioning", "ce-id": "r-1", "Retry-After": "3"}
    proxy.routes.add(HOST, upstream.start())
    send(session, proxy, f"http://{HOST}/a/b?c=d", headers=EVENT, data=b"{}")
    [hop] = recorded(proxy)
    assert (hop.method, hop.host, hop.path, hop.status) == ("POST", HOST, "/a/b?c=d", 200)
    assert dict(hop.request) == {k.lower(): v for k, v in EVENT.items() if k != "Content-Type"}
    assert dict(hop.response) == {"ce-type": "io.kubeopera.tenant.provisioning", "ce-id": "r-1", "retry-after": "3"}
    assert hop.started <= hop.finished
    assert proxy.quiet_since() == hop.finished


def test_a_hop_names_its_service_namespace_and_cloudevent_attributes() -> None:
    hop = Hop(1.0, 2.0, "POST", HOST, "/", 200, {"ce-type": "t", "ce-id": "1"}, {})
    assert (hop.service, hop.namespace) == ("tenant-install", "kubeopera-system")
    assert (hop.ce("type"), hop.ce("id"), hop.ce("subject")) == ("t", "1", None)
    assert Hop(1.0, 2.0, "GET", "localhost", "/", 200).namespace == ""


def test_in_flight_counts_a_request_while_the_upstream_is_answering(
    proxy: ServiceProxy, upstream: Upstream, session: requests.Session
) -> None:
    upstream.gate = threading.Event()
    proxy.routes.add(HOST, upstream.start())
    answers: list[int] = []
    client = threading.Thread(target=lambda: answers.append(send(session, proxy, f"http://{HOST}/").status_code))
    client.start()
    assert upstream.arrived.wait(5)
    assert proxy.in_flight() == 1
    upstream.gate.set()
    client.join(5)
    recorded(proxy)
    assert (answers, proxy.in_flight()) == ([200], 0)


def test_listeners_see_every_hop_and_one_that_raises_does_not_break_forwarding(
    proxy: ServiceProxy, upstream: Upstream, session: requests.Session
) -> None:
    seen: list[Hop] = []
    both = threading.Event()

    def broken(hop: Hop) -> None:
        raise RuntimeError("a watcher's bug")

    def watcher(hop: Hop) -> None:  # listeners run after the hop is kept: wait for them, not for hops
        seen.append(hop)
        if len(seen) == 2:
            both.set()

    proxy.on_hop(broken)
    proxy.on_hop(watcher)
    proxy.routes.add(HOST, upstream.start())
    assert [send(session, proxy, f"http://{HOST}/").status_code for _ in range(2)] == [200, 200]
    assert both.wait(5)
    assert seen == proxy.hops()


def test_wait_is_true_once_the_predicate_holds(
    proxy: ServiceProxy, upstream: Upstream, session: requests.Session
) -> None:
    proxy.routes.add(HOST, upstream.start())
    send(session, proxy, f"http://{HOST}/", headers=EVENT)
    assert proxy.wait(lambda hops: any(hop.ce("id") == "e-1" for hop in hops), 5) is True


def test_wait_is_false_on_timeout(proxy: ServiceProxy) -> None:
    assert proxy.wait(lambda hops: len(hops) > 0, 0.05) is False


def test_the_url_of_a_proxy_that_is_not_started_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = ServiceProxy().url


def test_the_proxy_counts_its_own_cpu_and_not_its_listeners(
    proxy: ServiceProxy, upstream: Upstream, session: requests.Session
) -> None:
    """A benchmark's CPU table puts the proxy (in a cluster: the kernel's forwarding) on a row of
    its own: the proxy process's time counts, a listener's (the benchmark's watch) does not."""
    burned: list[float] = []

    def busy_watcher(hop: Hop) -> None:
        started = time.thread_time()
        while time.thread_time() - started < 0.2:  # CPU, not sleep: what a slow watcher costs
            pass
        burned.append(time.thread_time() - started)

    proxy.on_hop(busy_watcher)
    proxy.routes.add(HOST, upstream.start())
    before = proxy.cpu_seconds()
    assert [send(session, proxy, f"http://{HOST}/", headers=EVENT).status_code for _ in range(3)] == [200] * 3
    deadline = time.monotonic() + 5
    while len(burned) < 3 and time.monotonic() < deadline:  # each hop's listener runs after its answer
        time.sleep(0.01)
    assert proxy.handled() == 3 and len(burned) == 3
    spent = proxy.cpu_seconds() - before
    assert 0.0 <= spent < 0.2, f"three forwards cost {spent:.3f} CPU-s; the watcher alone burned {sum(burned):.2f}"
    assert ServiceProxy().cpu_seconds() == 0.0  # not started: nothing spent


def test_a_tap_sees_each_exchange_in_full_and_an_unrouted_request_is_not_one(
    proxy: ServiceProxy, upstream: Upstream, session: requests.Session
) -> None:
    upstream.headers = {"Ce-Id": "reply-1", "Content-Type": "application/json"}
    upstream.body = b'{"answer": 1}'
    tapped: list[Exchange] = []
    proxy.tap(tapped.append)
    proxy.routes.add(HOST, port := upstream.start())
    send(session, proxy, f"http://{HOST}/path?q=1", headers=EVENT, data=b'{"tenant": "a"}')
    send(session, proxy, "http://nobody.kubeopera-system.svc.cluster.local/", data=b"x")
    recorded(proxy, 2)
    [exchange] = tapped
    assert (exchange.target, exchange.host, exchange.method, exchange.path) == (
        f"127.0.0.1:{port}",
        HOST,
        "POST",
        "/path?q=1",
    )
    assert exchange.request_body == b'{"tenant": "a"}' and ("Ce-Id", "e-1") in exchange.request_headers
    assert exchange.status == 200 and exchange.response_body == b'{"answer": 1}'
    assert ("Ce-Id", "reply-1") in exchange.response_headers


def test_a_proxy_that_dies_under_the_test_bed_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    proxy = ServiceProxy()
    proxy.start()
    try:
        with caplog.at_level(logging.ERROR, logger="testbed.standins.service_proxy"):
            os.kill(proxy.pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while not caplog.records and time.monotonic() < deadline:
                time.sleep(0.01)
        assert [r.getMessage() for r in caplog.records] == [f"the service proxy (pid {proxy.pid}) exited with code -9"]
    finally:
        proxy.stop()
