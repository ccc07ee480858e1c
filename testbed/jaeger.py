"""The test bed's trace receiver: a real OTLP receiver with a query API (Jaeger v2 all-in-one, in memory).

:func:`start_jaeger` writes a Jaeger v2 config of its own into the run folder and starts the
``jaeger`` binary of the toolchain under the supervisor: the OTLP receiver (HTTP and gRPC), the
``jaeger_storage`` extension with the memory backend (nothing on disk, gone when it stops), the
``jaeger_query`` extension (the HTTP query API the Jaeger UI uses; the UI's assets are not in the
binary) and ``healthcheckv2``, each on its own free 127.0.0.1 port written into the config (Jaeger
does not report ports chosen with ``:0``). Jaeger traces nothing of itself (``enable_tracing:
false``, internal metrics off), so everything stored came from the processes under test. It is
ready when ``GET /status`` on the health port answers 200.

:class:`Jaeger` is the running receiver: ``otlp_endpoint`` is what a process is given as
``OTEL_EXPORTER_OTLP_ENDPOINT`` (OTLP over HTTP/protobuf; the SDK appends ``/v1/traces``),
:meth:`Jaeger.trace` reads one trace back as :class:`TraceSpan` s (what :mod:`testbed.local.waterfall`
draws), :meth:`Jaeger.trace_ids` finds the traces a service took part in, and
:meth:`Jaeger.wait_for_spans` waits until a trace holds what a test expects (SDKs batch, so spans
arrive a moment after the work that made them). Requests never go through an ``HTTP(S)_PROXY``
(the test bed sets one for some processes).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from testbed.processes import HttpProbe, ProcessSpec, Supervisor, free_port
from testbed.toolchain import Toolchain

MAX_TRACES = 10_000  # the memory backend keeps this many traces, dropping the oldest
REQUEST_TIMEOUT = 5.0


@dataclass(frozen=True)
class TraceSpan:
    """One span as the receiver stored it (times in microseconds since the epoch)."""

    span_id: str
    parent_id: str | None
    service: str
    name: str
    start_us: int
    duration_us: int
    attributes: Mapping[str, object] = field(default_factory=dict)
    error: bool = False

    @property
    def outcome(self) -> str:
        """What the span says of how it ended, shortest first."""
        for key in ("kubeopera.outcome", "helm.outcome", "kubeopera.callback_delivered"):
            if key in self.attributes:
                value = self.attributes[key]
                code = self.attributes.get("http.response.status_code")
                if key == "kubeopera.callback_delivered":
                    value = "delivered" if value in (True, "true") else "failed"
                return f"{value} {code}" if code is not None else str(value)
        return "error" if self.error else "ok"


class JaegerError(Exception):
    """The query API answered something other than what it documents."""


@dataclass(frozen=True)
class Jaeger:
    """A running Jaeger: where to send spans and where to read them back."""

    otlp_endpoint: str  # http://127.0.0.1:<port>: OTEL_EXPORTER_OTLP_ENDPOINT (http/protobuf)
    otlp_grpc_endpoint: str  # 127.0.0.1:<port>: OTLP over gRPC, for an exporter that wants it
    query_url: str  # http://127.0.0.1:<port>: Jaeger's HTTP query API (/api/...)
    config_file: Path

    def trace(self, trace_id: str) -> list[TraceSpan]:
        """The spans of one trace (32 hex digits) in start order; [] when Jaeger has none of it."""
        body = self._get(f"/api/traces/{trace_id}", missing_ok=True)
        if body is None:
            return []
        spans = [span for data in _data(body) for span in _spans(data)]
        return sorted(spans, key=lambda s: (s.start_us, -s.duration_us, s.span_id))

    def trace_ids(self, service: str, limit: int = 100) -> list[str]:
        """The traces with spans of ``service``, most recently received first (at most ``limit``)."""
        body = self._get("/api/traces", params={"service": service, "limit": str(limit)})
        ids = [_hex(str(data.get("traceID", "")), 32) for data in _data(body or {})]
        return list(dict.fromkeys(i for i in ids if i.strip("0")))

    def services(self) -> list[str]:
        """The services Jaeger has spans of, sorted."""
        body = self._get("/api/services") or {}
        names = body.get("data") or []
        return sorted(str(name) for name in names)

    def wait_for_spans(
        self,
        trace_id: str,
        predicate: Callable[[list[TraceSpan]], bool] = bool,
        timeout: float = 10.0,
    ) -> list[TraceSpan]:
        """Poll :meth:`trace` until ``predicate(spans)`` holds (by default: any span); return them.

        Raises ``TimeoutError`` naming the spans it last saw when ``timeout`` seconds pass.
        """
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            spans = self.trace(trace_id)
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                seen = ", ".join(f"{s.service}/{s.name}" for s in spans) or "no spans"
                raise TimeoutError(f"trace {trace_id} in Jaeger after {timeout:.0f}s: {seen}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _get(
        self, path: str, params: Mapping[str, str] | None = None, *, missing_ok: bool = False
    ) -> dict[str, Any] | None:
        with requests.Session() as session:
            session.trust_env = False  # never through the test bed's HTTP(S)_PROXY: Jaeger is on loopback
            response = session.get(f"{self.query_url}{path}", params=params, timeout=REQUEST_TIMEOUT)
        if response.status_code == 404 and missing_ok:
            return None
        if response.status_code != 200:
            raise JaegerError(f"GET {response.url} answered {response.status_code}: {response.text[:500]}")
        body = response.json()
        if not isinstance(body, dict):
            raise JaegerError(f"GET {response.url} answered {type(body).__name__}, not an object")
        return body


def _data(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [item for item in body.get("data") or [] if isinstance(item, Mapping)]


def _spans(data: Mapping[str, Any]) -> list[TraceSpan]:
    """The spans of one trace of the query API's answer (Jaeger's JSON model)."""
    processes: Mapping[str, Any] = data.get("processes") or {}
    spans = []
    for raw in data.get("spans") or []:
        process = processes.get(raw.get("processID", "")) or {}
        attributes = _tags(raw.get("tags") or [])
        parents = [ref for ref in raw.get("references") or [] if ref.get("refType") == "CHILD_OF"]
        spans.append(
            TraceSpan(
                span_id=_hex(str(raw["spanID"]), 16),
                parent_id=_hex(str(parents[0]["spanID"]), 16) if parents else None,
                service=str(process.get("serviceName", "")),
                name=str(raw.get("operationName", "")),
                start_us=int(raw.get("startTime", 0)),
                duration_us=int(raw.get("duration", 0)),
                attributes=attributes,
                error=attributes.get("error") is True or attributes.get("otel.status_code") == "ERROR",
            )
        )
    return spans


def _tags(tags: Sequence[Mapping[str, Any]]) -> dict[str, object]:
    """Jaeger's typed tags as attributes: int64 as int, float64 as float, bool as bool, the rest as is."""
    attributes: dict[str, object] = {}
    for tag in tags:
        kind, value = tag.get("type"), tag.get("value")
        if kind == "int64" and isinstance(value, int | float | str):
            value = int(value)
        elif kind == "float64" and isinstance(value, int | float | str):
            value = float(value)
        elif kind == "bool":
            value = value if isinstance(value, bool) else str(value).lower() == "true"
        attributes[str(tag.get("key"))] = value
    return attributes


def _hex(value: str, digits: int) -> str:
    """An id as OpenTelemetry writes it: Jaeger's JSON drops leading zeros of trace ids."""
    return value.lower().rjust(digits, "0")


def jaeger_config(
    *, health_port: int, query_port: int, query_grpc_port: int, otlp_port: int, otlp_grpc_port: int
) -> dict[str, Any]:
    """Jaeger v2's configuration: OTLP in, memory storage, the query API and a health check."""
    loopback = "127.0.0.1"
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
            "pipelines": {
                "traces": {"receivers": ["otlp"], "processors": [], "exporters": ["jaeger_storage_exporter"]}
            },
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
        },
        "extensions": {
            "healthcheckv2": {"use_v2": True, "http": {"endpoint": f"{loopback}:{health_port}"}},
            "jaeger_query": {
                # Otherwise the query service traces its own requests (to an OTLP endpoint of its own).
                "enable_tracing": False,
                "storage": {"traces": "mem"},
                "http": {"endpoint": f"{loopback}:{query_port}"},
                "grpc": {"endpoint": f"{loopback}:{query_grpc_port}"},
            },
            "jaeger_storage": {"backends": {"mem": {"memory": {"max_traces": MAX_TRACES}}}},
        },
        "receivers": {
            "otlp": {
                "protocols": {
                    "http": {"endpoint": f"{loopback}:{otlp_port}"},
                    "grpc": {"endpoint": f"{loopback}:{otlp_grpc_port}"},
                }
            }
        },
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "mem"}},
    }


@contextlib.contextmanager
def start_jaeger(
    tools: Toolchain, supervisor: Supervisor, run_dir: Path, *, ready_timeout: float = 60.0
) -> Iterator[Jaeger]:
    """Start Jaeger with its config in ``run_dir``; stop it when the block ends."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    health, query, query_grpc, otlp, otlp_grpc = (free_port() for _ in range(5))
    config_file = run_dir / "jaeger.yaml"
    settings = jaeger_config(
        health_port=health, query_port=query, query_grpc_port=query_grpc, otlp_port=otlp, otlp_grpc_port=otlp_grpc
    )
    config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    process = supervisor.start(
        ProcessSpec(
            name="jaeger",
            argv=(str(tools.jaeger), "--config", str(config_file)),
            # Whatever OTEL_* the caller's environment holds is for the processes under test.
            env={"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "none"},
        ),
        HttpProbe(f"http://127.0.0.1:{health}/status"),
        ready_timeout=ready_timeout,
    )
    try:
        yield Jaeger(
            otlp_endpoint=f"http://127.0.0.1:{otlp}",
            otlp_grpc_endpoint=f"127.0.0.1:{otlp_grpc}",
            query_url=f"http://127.0.0.1:{query}",
            config_file=config_file,
        )
    finally:
        supervisor.stop(process)
