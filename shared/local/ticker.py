"""The PingSource of the local stack: a resync tick to the broker every N seconds.

Knative's PingSource ``tenant-resync`` (``eventing/resync-pingsource.yaml``) sends
``dev.knative.sources.ping`` from ``/apis/v1/namespaces/<ns>/pingsources/<name>`` with its
``data`` to the Broker on a cron schedule. This thread sends the same event, read from that same
file, at a fixed interval, and once right away: a Tenant created while nothing was running is
picked up at start.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
import yaml

log = logging.getLogger(__name__)


def ping_event(pingsource: Path) -> tuple[dict[str, str], bytes]:
    """Headers and body of the tick the PingSource in ``pingsource`` sends (binary mode)."""
    doc: Any = yaml.safe_load(pingsource.read_text())
    meta, spec = doc["metadata"], doc["spec"]
    headers = {
        "ce-specversion": "1.0",
        "ce-id": str(uuid.uuid4()),
        "ce-type": "dev.knative.sources.ping",
        "ce-source": f"/apis/v1/namespaces/{meta['namespace']}/pingsources/{meta['name']}",
        "ce-time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "content-type": spec.get("contentType", "application/json"),
    }
    data = spec.get("data", "")
    return headers, data.encode() if isinstance(data, str) else json.dumps(data).encode()


class Ticker:
    def __init__(self, broker_url: str, pingsource: Path, seconds: float) -> None:
        self._url = broker_url
        self._pingsource = pingsource
        self._seconds = seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resync-ticker", daemon=True)
        self.ticks = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def tick(self) -> None:
        headers, body = ping_event(self._pingsource)
        try:
            requests.post(self._url, headers=headers, data=body, timeout=5).raise_for_status()
            self.ticks += 1
        except requests.RequestException as err:
            log.warning("resync tick not delivered to the broker", extra={"error": str(err)})

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self._seconds)
