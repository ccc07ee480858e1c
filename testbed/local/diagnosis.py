"""What a stack was doing, as text: the report an end-to-end test's failure carries.

A red CI run must be diagnosed from its log alone. :func:`explain` gathers, for the window since
a test started, what a person would look at first:

- every Tenant's status (phase, generations, message, conditions) as the API server has it now;
- the Tenants' Kubernetes Events, in the order they were last recorded;
- the broker's deliveries to the functions (:class:`~testbed.knative.broker_watch.BrokerWatch`):
  trigger, subject, event type and id, the answer, its ``Retry-After`` and the reply's type;
- each function's log lines about a Tenant and its ``answered`` lines (one per delivery), merged
  in time order.

Each section is cut to its last lines and gathered on its own: a section that cannot be read (the
API server already gone) says why instead of hiding the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from testbed.knative.broker_watch import Delivery
from testbed.local.stack import Stack
from testbed.project import TENANT_NAMESPACE


class Kubectl(Protocol):
    """A stack that runs kubectl as admin: a local :class:`Stack` or the cluster tier's."""

    def kubectl(self, *args: str, input: str | None = None) -> str: ...


MAX_LINES = 60


def explain(stack: Stack, since: float, max_lines: int = MAX_LINES) -> str:
    """The stack's state and what happened since ``since`` (``time.time()``)."""
    sections: list[tuple[str, Callable[[], list[str]]]] = [
        ("Tenants now", lambda: tenant_lines(stack)),
        ("Tenant Events", lambda: event_lines(stack)),
        ("broker deliveries since the test started", lambda: delivery_lines(stack.watch.deliveries(), since)),
        (
            "function log lines since the test started",
            lambda: function_log_lines(stack.log_dir(), stack.functions, since),
        ),
    ]
    return report(sections, max_lines)


def report(sections: Iterable[tuple[str, Callable[[], list[str]]]], max_lines: int = MAX_LINES) -> str:
    """The sections, each gathered on its own and cut to its last ``max_lines`` lines."""
    out: list[str] = []
    for title, gather in sections:
        try:
            lines = gather()
        except Exception as err:  # the report must never hide the failure it explains
            lines = [f"(not available: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"]
        cut = len(lines) - max_lines
        out.append(f"--- {title}" + (f" (last {max_lines} of {len(lines)})" if cut > 0 else ""))
        out.extend(lines[max(cut, 0) :] or ["(none)"])
    return "\n".join(out)


def tenant_lines(stack: Kubectl) -> list[str]:
    listed = json.loads(stack.kubectl("get", "tenants", "-n", TENANT_NAMESPACE, "-o", "json"))
    lines = []
    for item in listed["items"]:
        meta, status = item["metadata"], item.get("status") or {}
        deleting = " deleting" if meta.get("deletionTimestamp") else ""
        lines.append(
            f"{meta['name']} uid={meta['uid'][:8]} gen={meta.get('generation')} "
            f"observed={status.get('observedGeneration')} phase={status.get('phase')}{deleting} "
            f"message={status.get('message', '')!r}"
        )
        for condition in status.get("conditions") or []:
            lines.append(
                f"    {condition.get('type')}={condition.get('status')} {condition.get('reason', '')}: "
                f"{condition.get('message', '')}"
            )
    return lines


def event_lines(stack: Kubectl) -> list[str]:
    selector = "--field-selector=involvedObject.kind=Tenant"
    listed = json.loads(stack.kubectl("get", "events", "-n", TENANT_NAMESPACE, selector, "-o", "json"))
    items = sorted(listed["items"], key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [
        f"{e.get('lastTimestamp') or e.get('eventTime')} {e['involvedObject']['name']} {e.get('type')} "
        f"{e.get('reason')} x{e.get('count', 1)}: {e.get('message', '')}"
        for e in items
    ]


def delivery_lines(deliveries: Iterable[Delivery], since: float) -> list[str]:
    """One line a delivery answered at or after ``since``."""
    lines = []
    for d in deliveries:
        if d.finished < since:
            continue
        extra = "".join(
            [
                f" retry-after={d.retry_after}" if d.retry_after else "",
                f" reply={d.reply_type}" if d.reply_type else "",
                f" errorcode={d.error_code}" if d.error_code else "",
            ]
        )
        lines.append(
            f"{_clock(d.time)}+{d.finished - d.time:.2f}s {d.trigger} -> {d.service} ({d.target}) "
            f"{d.subject} {d.type} id={d.event_id[:8]}: {d.status} {d.outcome}{extra}"
        )
    return lines


def function_log_lines(log_dir: Path, services: Iterable[str], since: float) -> list[str]:
    """The functions' lines about a Tenant and their ``answered`` lines since ``since``, in time order:
    from ``<service>.log`` (a local stack's process) and ``<service>/*.log`` (the cluster tier's pods)."""
    found: list[tuple[float, str]] = []
    for service in services:
        for path in (log_dir / f"{service}.log", *sorted((log_dir / service).glob("*.log"))):
            found.extend(_log_records(path, service, since))
    return [line for _, line in sorted(found)]


def _log_records(path: Path, service: str, since: float) -> Iterator[tuple[float, str]]:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return
    for raw in text.splitlines():
        try:
            record: dict[str, Any] = json.loads(raw)
            at = datetime.strptime(record["time"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except (ValueError, KeyError, TypeError):
            continue  # gunicorn's own lines, a traceback's continuation
        if at < since or not (record.get("tenant") or record.get("message") == "answered"):
            continue
        if record.get("message") == "answered":
            text_of = (
                f"answered {record.get('status')} {record.get('result')} {record.get('type')} "
                f"id={str(record.get('id') or '')[:8]} {record.get('seconds')}s"
            )
        else:
            text_of = f"{record.get('level')} {record.get('tenant')}: {record.get('message')}"
        yield at, f"{_clock(at)} {service}: {text_of}"


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at).strftime("%H:%M:%S.%f")[:-3]
