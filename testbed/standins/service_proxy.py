"""STAND-IN for cluster DNS and kube-proxy: ``*.svc.cluster.local`` → the local port that serves it.

In a cluster, Knative's data plane reaches its peers by Service names on port 80:
``broker-ingress.knative-eventing.svc.cluster.local``, the channel's
``<channel>-kn-channel.<ns>.svc.cluster.local``, ``broker-filter...``, and each function's Knative
Service ``tenant-install.kubeopera-system.svc.cluster.local``. Here every one of those is a process
on 127.0.0.1 with a port of its own, and there is no DNS. The proxy is an HTTP forward proxy: the
Knative processes (and the functions) get ``HTTP_PROXY`` pointing at it, Go's and Python's HTTP
clients then send requests for those names here (loopback targets such as the API server are
never proxied: ``NO_PROXY=127.0.0.1,localhost``), and the proxy forwards each to the port its host
maps to, keeping the ``Host`` header (the in-memory channel's dispatcher routes by it).

Because every hop of an event crosses it (source → ingress → channel → filter → function, the
reply back to the ingress, the dead-letter delivery), the proxy is also where the test bed watches
the real broker work: each forwarded request is kept as a :class:`Hop` (what was asked, of whom,
and what came back), the way a packet capture on the cluster network would see it. Nothing is
changed on the way; plain HTTP, as the data plane uses in the cluster domain.

HTTPS to a Service (check-ready asking a vCluster's API at ``https://vc-<t>.vcluster-<t>.svc:443``)
comes as ``CONNECT host:443`` (the functions' ``HTTPS_PROXY``): the proxy opens a byte tunnel to
the port :attr:`ServiceProxy.tunnels` maps the host to, and the TLS inside is end to end between
the client and that server (SNI, certificates and all). A host no tunnel route names is answered
502, as a name cluster DNS does not know leaves the client without a connection.

The forwarding is a Go program of ours (``tools/service-proxy``, built by the toolchain); this
module starts it, sends it the routes and reads back a JSON line for every hop. In a cluster the
forwarding is the kernel's and costs next to nothing; the Python proxy this replaced cost about
1.1 ms of CPU a request in the process that ran it (9% of a burst's CPU on two cores), the Go
program about 0.5 ms (bench/RESULTS.md, 2026-12-07 19:07 and 19:31). A benchmark
still tells the proxy's CPU apart from its own (:meth:`ServiceProxy.cpu_seconds`: the Go process's);
reading the hop lines and calling the listeners is the watcher's work, in the watcher's process.
"""

from __future__ import annotations

import base64
import http.server
import json
import logging
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from testbed.processes import procfs
from testbed.toolchain import ensure

log = logging.getLogger(__name__)

CLUSTER_DOMAIN = ".svc.cluster.local"
# Headers of one hop only, never forwarded (RFC 9110 section 7.6.1; Content-Length is set anew).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "proxy-connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
        "proxy-authenticate",
        "content-length",
    }
)


@dataclass(frozen=True)
class Hop:
    """One request the proxy forwarded and its answer (``status`` 502: the target did not answer)."""

    started: float  # time.time()
    finished: float
    method: str
    host: str
    path: str
    status: int
    request: Mapping[str, str] = field(default_factory=dict)  # ce-* headers and trace context
    response: Mapping[str, str] = field(default_factory=dict)  # ce-* of a reply, Retry-After

    @property
    def service(self) -> str:
        """The Service's name: the first label of the host."""
        return self.host.split(".", 1)[0]

    @property
    def namespace(self) -> str:
        parts = self.host.split(".")
        return parts[1] if len(parts) > 2 else ""

    def ce(self, attribute: str) -> str | None:
        """A CloudEvent attribute of the request (binary mode), e.g. ``ce("type")``."""
        return self.request.get(f"ce-{attribute}")


class Routes:
    """Host → (address, port), as the proxy applies them: exact names first (case and a trailing
    dot ignored), then the first matching suffix. Routes added before the proxy starts are sent
    when it starts; after that, :meth:`add` returns once the proxy applies the route."""

    def __init__(self, exact_op: str, suffix_op: str) -> None:
        self._ops = (exact_op, suffix_op)
        self._entries: list[tuple[str, str, str, int]] = []  # (op, host or suffix, address, port)
        self._send: Callable[[dict[str, object]], None] | None = None
        self._lock = threading.Lock()

    def add(self, host: str, port: int, address: str = "127.0.0.1") -> None:
        self._add(self._ops[0], host, port, address)

    def add_suffix(self, suffix: str, port: int, address: str = "127.0.0.1") -> None:
        self._add(self._ops[1], suffix, port, address)

    def _add(self, op: str, host: str, port: int, address: str) -> None:
        with self._lock:
            self._entries.append((op, host, address, port))
            send = self._send
        if send is not None:
            send({"op": op, "host": host, "address": address, "port": port})

    def _connect(self, send: Callable[[dict[str, object]], None]) -> None:
        with self._lock:
            self._send = send
            entries = list(self._entries)
        for op, host, address, port in entries:
            send({"op": op, "host": host, "address": address, "port": port})


@dataclass(frozen=True)
class Exchange:
    """A request the proxy forwarded to a Service, in full, and the Service's answer (:meth:`ServiceProxy.tap`)."""

    started: float
    target: str  # address:port of the Service
    method: str
    path: str
    request_headers: tuple[tuple[str, str], ...]  # as sent on: Host first, hop-by-hop ones left out
    request_body: bytes
    status: int
    response_headers: tuple[tuple[str, str], ...]
    response_body: bytes

    @property
    def host(self) -> str:
        return next((v for k, v in self.request_headers if k.lower() == "host"), self.target)


class ServiceProxy:
    """The proxy, its routes and the hops it forwarded. Start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(self, binary: Path | None = None) -> None:
        self.routes = Routes("route", "suffix")
        self.tunnels = Routes("tunnel", "tunnel_suffix")  # CONNECT host → (address, port): HTTPS to a Service
        self._binary = binary
        self._hops: list[Hop] = []
        self._in_flight = 0
        self._changed = threading.Condition()
        self._process: subprocess.Popen[bytes] | None = None
        self._address = ""
        self._listeners: list[Callable[[Hop], None]] = []
        self._taps: list[Callable[[Exchange], None]] = []
        self._write_lock = threading.Lock()
        self._seq = 0
        self._acked = 0
        self._reader: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self, port: int = 0) -> str:
        """Start the proxy on 127.0.0.1 (``port`` 0: any free one); returns its URL for ``HTTP_PROXY``."""
        binary = self._binary or ensure("service-proxy") / "service-proxy"
        process = subprocess.Popen(
            [str(binary), str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
        )
        assert process.stdout is not None
        first = process.stdout.readline()
        try:
            self._address = json.loads(first)["address"]
        except (ValueError, KeyError) as err:
            process.kill()
            process.wait()
            raise RuntimeError(f"the service proxy did not start ({binary}): {first!r}") from err
        self._process = process
        self._reader = threading.Thread(target=self._read, args=(process,), name="service-proxy", daemon=True)
        self._reader.start()
        self.routes._connect(self._send)
        self.tunnels._connect(self._send)
        log.info("service proxy (cluster DNS + kube-proxy stand-in) on %s (pid %d)", self.url, process.pid)
        return self.url

    @property
    def url(self) -> str:
        if self._process is None:
            raise RuntimeError("the service proxy is not started")
        return f"http://{self._address}"

    @property
    def pid(self) -> int:
        """The proxy's process (a benchmark counts its CPU on a row of its own)."""
        if self._process is None:
            raise RuntimeError("the service proxy is not started")
        return self._process.pid

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()  # the proxy ends when its stdin closes
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)

    def __enter__(self) -> ServiceProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ what it saw
    def hops(self) -> list[Hop]:
        with self._changed:
            return list(self._hops)

    def in_flight(self) -> int:
        with self._changed:
            return self._in_flight

    def on_hop(self, listener: Callable[[Hop], None]) -> None:
        """Call ``listener`` (in the thread that reads the proxy) with every hop once answered."""
        self._listeners.append(listener)

    def tap(self, listener: Callable[[Exchange], None]) -> None:
        """From now on, call ``listener`` with every exchange with a Service in full, bodies included."""
        self._taps.append(listener)
        self._send({"op": "tap"})

    def wait(self, predicate: Callable[[list[Hop]], bool], timeout: float) -> bool:
        """Wait until ``predicate(hops)`` holds; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self._hops), timeout)

    def cpu_seconds(self) -> float:
        """CPU seconds the proxy's process has spent so far: what the kernel does in a cluster."""
        return 0.0 if self._process is None else procfs.cpu_seconds(self._process.pid)[0]

    def handled(self) -> int:
        """How many requests the proxy has answered so far (a tunnel is one, once it closes)."""
        with self._changed:
            return len(self._hops)

    def quiet_since(self) -> float:
        """When the last hop finished (or 0.0); with :meth:`in_flight` it says the network is idle."""
        with self._changed:
            return max((hop.finished for hop in self._hops), default=0.0)

    # ------------------------------------------------------------------ talking to the process
    def _send(self, op: dict[str, object]) -> None:
        """Send ``op`` to the proxy and wait until it applies it (its ack)."""
        process = self._process
        if process is None or process.stdin is None:
            raise RuntimeError("the service proxy is not started")
        with self._write_lock:
            self._seq += 1
            seq = self._seq
            process.stdin.write(json.dumps({**op, "seq": seq}).encode() + b"\n")
            process.stdin.flush()
        with self._changed:
            if not self._changed.wait_for(lambda: self._acked >= seq or self._process is None, 10):
                raise RuntimeError(f"the service proxy did not apply {op}")

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            record = json.loads(line)
            kind = record["kind"]
            if kind == "begin":
                with self._changed:
                    self._in_flight += 1
            elif kind == "ack":
                with self._changed:
                    self._acked = max(self._acked, record["seq"])
                    self._changed.notify_all()
            elif kind == "hop":
                self._record(record)
        if self._process is process:  # not stopped by us: every request for a Service now goes unanswered
            log.error("the service proxy (pid %d) exited with code %s", process.pid, process.wait())
        with self._changed:
            self._changed.notify_all()

    def _record(self, record: dict[str, Any]) -> None:
        hop = Hop(
            record["started"],
            record["finished"],
            record["method"],
            record["host"],
            record["path"],
            record["status"],
            MappingProxyType(record["request"]),
            MappingProxyType(record["response"]),
        )
        with self._changed:
            if record["counted"]:
                self._in_flight -= 1
            self._hops.append(hop)
            self._changed.notify_all()
        for listener in self._listeners:
            try:
                listener(hop)
            except Exception:  # a watcher's bug must not stop the record
                log.exception("service proxy listener failed")
        if "target" in record and self._taps:
            exchange = Exchange(
                record["started"],
                record["target"],
                record["method"],
                record["path"],
                tuple((k, v) for k, v in record["request_headers"]),
                base64.b64decode(record.get("request_body") or ""),
                record["status"],
                tuple((k, v) for k, v in record["response_headers"]),
                base64.b64decode(record.get("response_body") or ""),
            )
            for tap in self._taps:
                tap(exchange)


def send_answer(
    request: http.server.BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], data: bytes
) -> None:
    """Answer ``request`` with what the next hop answered, its hop-by-hop headers left out."""
    try:
        request.send_response_only(status)
        for key, value in headers:
            if key.lower() not in HOP_BY_HOP:
                request.send_header(key, value)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(data)
    except OSError:  # the client gave up (its request was cancelled)
        request.close_connection = True
