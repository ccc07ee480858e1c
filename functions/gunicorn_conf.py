"""gunicorn settings shared by every function: ``gunicorn -c python:functions.gunicorn_conf APP``.

The container image starts each function with exactly that command, the app argument choosing
the function (``functions.install:create_app()`` ...). Everything comes from the environment, so
the Knative Service decides:

- ``PORT`` (Knative sets it from the container port; default 8080): listen on ``0.0.0.0:$PORT``.
- ``GUNICORN_WORKERS`` (default 1) x ``GUNICORN_THREADS`` (default 4) is how many requests one
  pod serves at once; the Service's ``containerConcurrency`` is set to the same product, so
  Knative never queues more on a pod than it can serve and scales out instead. Always the
  ``gthread`` worker: with the ``sync`` worker ``timeout`` would kill any request longer than it
  (a helm install).
- ``GUNICORN_TIMEOUT`` (default 30 s): how long a silent worker process may go before it is
  restarted. For gthread workers this is the worker's heartbeat, not a request limit; the
  request limit is the Service's ``timeoutSeconds``.
- ``GUNICORN_GRACEFUL_TIMEOUT`` (default 10 s): on SIGTERM, how long running requests may finish.
  Knative's pre-stop hook lets queue-proxy drain the pod before the container gets SIGTERM, and
  the pod's grace period is the Service's ``timeoutSeconds`` (>= 60 s here), so a short value is
  enough and always below Knative's.
- ``GUNICORN_ACCESS_LOG``: ``-`` for a one-line JSON access log on stdout; unset (the default)
  for none, since the probes would fill it and queue-proxy can log requests itself.
- ``LOG_LEVEL`` (default INFO): gunicorn's own error log level, on stderr.

Pure standard library, no side effects beyond reading the environment at import. The hooks:
``on_starting`` gives the workers one metrics folder (``PROMETHEUS_MULTIPROC_DIR``, see
``shared.observability.metrics``) and ``on_exit`` removes it if ``on_starting`` made it,
``child_exit`` retires a dead worker's gauges, ``worker_exit`` flushes the worker's spans
(``shared.observability.tracing``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any


def _int_from_env(name: str, default: int, minimum: int) -> int:
    """An integer setting from the environment, or ``default``; out of range is an error."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as err:
        raise ValueError(f"{name} must be an integer, not {raw!r}") from err
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return value


_ACCESS_LOG_FORMAT = (
    '{"remote": "%(h)s", "method": "%(m)s", "path": "%(U)s", "status": %(s)s, '
    '"bytes": "%(B)s", "duration_us": %(D)s, "traceparent": "%({traceparent}i)s", '
    '"user_agent": "%(a)s"}'
)

bind: list[str] = [f"0.0.0.0:{_int_from_env('PORT', 8080, 1)}"]
worker_class: str = "gthread"
workers: int = _int_from_env("GUNICORN_WORKERS", 1, 1)
threads: int = _int_from_env("GUNICORN_THREADS", 4, 1)
timeout: int = _int_from_env("GUNICORN_TIMEOUT", 30, 1)
graceful_timeout: int = _int_from_env("GUNICORN_GRACEFUL_TIMEOUT", 10, 1)
# queue-proxy keeps its connections to the container open; do not drop them between requests.
keepalive: int = _int_from_env("GUNICORN_KEEPALIVE", 5, 0)

accesslog: str | None = os.environ.get("GUNICORN_ACCESS_LOG") or None
access_log_format: str = _ACCESS_LOG_FORMAT
errorlog: str = "-"
loglevel: str = os.environ.get("LOG_LEVEL", "INFO").strip().lower() or "info"
# Error log lines carry the Knative Service's name (K_SERVICE), so mixed logs stay readable.
proc_name: str = os.environ.get("K_SERVICE", "kubeopera-tenants")
# Build the app in each worker, after fork: no client or thread is shared across processes.
preload_app: bool = False


# Set by ``on_starting`` to the folder it made, so that ``on_exit`` removes that one only.
_MADE_HERE = "KUBEOPERA_METRICS_DIR_MADE"


def on_starting(server: object) -> None:
    """Before any worker: the folder where every worker keeps its metrics (prometheus_client's
    multiprocess mode), so ``/metrics`` adds them up. ``PROMETHEUS_MULTIPROC_DIR`` if the
    Service sets it, else a fresh folder under ``$TMPDIR`` (``/tmp``, an emptyDir in every
    Service); emptied at start, as the mode requires."""
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder, exist_ok=True)
    else:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = os.environ[_MADE_HERE] = tempfile.mkdtemp(prefix="kubeopera-metrics-")


def on_exit(server: object) -> None:
    """The master stops: remove the metrics folder ``on_starting`` made (one the Service named
    is the Service's to keep). Without this each start outside a pod (``make run``, the tests)
    left a folder in ``/tmp``."""
    made = os.environ.pop(_MADE_HERE, "")
    if made and os.environ.get("PROMETHEUS_MULTIPROC_DIR") == made:
        shutil.rmtree(made, ignore_errors=True)


def child_exit(server: object, worker: Any) -> None:
    """A worker is gone: its live gauges no longer count."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def worker_exit(server: object, worker: object) -> None:
    """A worker stops (SIGTERM, a restart): send the spans it still holds."""
    from shared.observability import tracing

    tracing.shutdown()
