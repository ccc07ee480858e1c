"""A trace as a waterfall in the terminal: what ``kubeopera-tenants local --trace`` prints.

Pure: it gets the spans of one trace (:class:`TraceSpan`, read from the receiver by
:mod:`testbed.tracing`) and returns lines. One line per span, in start order, indented under
its parent: the start offset from the trace's first span, the duration, the function (the
span's service without ``tenant-``), the step (the span's name), its outcome, and a bar placed
on the trace's time line. Deliveries that took long but did little (a poll answered 503) show
as short bars separated by the broker's waits.
"""

from __future__ import annotations

from collections.abc import Sequence

from testbed.jaeger import TraceSpan

BAR_WIDTH = 40


def _depths(spans: Sequence[TraceSpan]) -> dict[str, int]:
    by_id = {s.span_id: s for s in spans}
    depths: dict[str, int] = {}

    def depth(span: TraceSpan, seen: frozenset[str] = frozenset()) -> int:
        if span.span_id in depths:
            return depths[span.span_id]
        parent = by_id.get(span.parent_id or "")
        found = 0 if parent is None or parent.span_id in seen else depth(parent, seen | {span.span_id}) + 1
        depths[span.span_id] = found
        return found

    for span in spans:
        depth(span)
    return depths


def _bar(start: float, duration: float, total: float, width: int) -> str:
    if total <= 0:
        return "#".ljust(width)
    left = min(width - 1, int(start / total * width))
    length = max(1, round(duration / total * width))
    return (" " * left + "#" * min(length, width - left)).ljust(width)


def render(spans: Sequence[TraceSpan], width: int = BAR_WIDTH) -> list[str]:
    """The waterfall of one trace, a header line first."""
    if not spans:
        return ["(no spans)"]
    ordered = sorted(spans, key=lambda s: (s.start_us, -s.duration_us))
    origin = ordered[0].start_us
    end = max(s.start_us + s.duration_us for s in ordered)
    total = (end - origin) / 1e6
    depths = _depths(ordered)
    rows = [
        (
            f"{(s.start_us - origin) / 1e6:7.2f}s",
            _duration(s.duration_us),
            s.service.removeprefix("tenant-"),
            "  " * depths[s.span_id] + s.name,
            s.outcome,
            _bar((s.start_us - origin) / 1e6, s.duration_us / 1e6, total, width),
        )
        for s in ordered
    ]
    scale = f"{total:.1f}s"
    header = ("START", "DURATION", "FUNCTION", "STEP", "OUTCOME", "0s".ljust(width - len(scale)) + scale)
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(5)]
    return ["  ".join(c.ljust(widths[i]) if i < 5 else c for i, c in enumerate(row)).rstrip() for row in table]


def _duration(microseconds: int) -> str:
    if microseconds >= 1_000_000:
        return f"{microseconds / 1e6:.2f}s"
    return f"{microseconds / 1e3:.1f}ms"
