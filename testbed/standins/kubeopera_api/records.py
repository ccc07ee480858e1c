"""What the kubeopera-api stand-in keeps and how it can be told to answer.

:class:`RecordedRequest` is one request as the stand-in received it (method, path, query, headers,
body and its JSON, arrival time), frozen, and round-trips through a JSON-ready dict so another
process can read the recorded list (``GET /_/requests``). ``MODES`` are the stand-in's answers:
``ok``, ``error``, ``hang`` and ``down`` (see :mod:`testbed.standins.kubeopera_api`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Mode = Literal["ok", "error", "hang", "down"]
MODES: tuple[Mode, ...] = ("ok", "error", "hang", "down")


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the stand-in received it."""

    method: str
    path: str
    query: str
    headers: tuple[tuple[str, str], ...]
    body: str
    json: Any
    received_at: float

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        lowered = name.lower()
        for key, value in self.headers:
            if key.lower() == lowered:
                return value
        return None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["headers"] = [list(pair) for pair in self.headers]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordedRequest:
        return cls(
            method=str(data["method"]),
            path=str(data["path"]),
            query=str(data.get("query", "")),
            headers=tuple((str(k), str(v)) for k, v in data.get("headers", [])),
            body=str(data.get("body", "")),
            json=data.get("json"),
            received_at=float(data.get("received_at", 0.0)),
        )
