"""The event of the resync PingSource, to send one tick now.

Knative's PingSource ``tenant-resync`` (``eventing/resync-pingsource.yaml``) sends
``dev.knative.sources.ping`` from ``/apis/v1/namespaces/<ns>/pingsources/<name>`` with its
``data`` to the Broker on a cron schedule (every 5 minutes; in the local stack the real ``mtping``
adapter runs it). The stack sends the same event, read from that same file, once at start (a
Tenant created while nothing was running is picked up) and whenever a test asks for a tick.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml


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
