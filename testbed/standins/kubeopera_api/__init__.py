"""A stand-in for kubeopera-api: a small real HTTP server that records what it receives.

kubeopera-api is another team's service; the tenant functions only PATCH it
(``/api/v1/cloudspaces/{id}``). :class:`ApiStandIn` listens on 127.0.0.1 (port 0 = any free
port) with one thread per request, records every request (method, path, query, headers, body
and its JSON) as a frozen :class:`RecordedRequest`, and answers according to its mode:

- ``ok``: 200 with a small JSON body;
- ``error``: 500;
- ``hang``: holds the request until the mode changes or ``hang_seconds`` (60) pass, then
  answers as the new mode says (504 when it simply timed out);
- ``down``: the listening socket is closed, so connections are refused; switching to another
  mode listens again on the same port.

Control endpoints under ``/_/`` are not recorded: ``GET /_/requests`` (the recorded list as
JSON, so another process can read it), ``DELETE /_/requests`` (clear), ``GET /_/mode`` and
``PUT /_/mode`` with ``{"mode": "ok"|"error"|"hang"}`` or ``{"mode": "down", "seconds": N}``
(back up after N seconds, default 30). Run it on its own with
``python -m testbed.standins.kubeopera_api --port N`` (``__main__.py``).

The parts: :mod:`.records` (``RecordedRequest``, ``Mode``, ``MODES``),
:mod:`.server` (the server and request handler, the control endpoints),
:mod:`.standin` (``ApiStandIn``: mode, recorded requests, the socket); this module
re-exports them, ``__main__`` is the process entry point.
"""

from __future__ import annotations

from testbed.standins.kubeopera_api.records import MODES, Mode, RecordedRequest
from testbed.standins.kubeopera_api.server import CONTROL_PREFIX
from testbed.standins.kubeopera_api.standin import ApiStandIn

__all__ = ["CONTROL_PREFIX", "MODES", "ApiStandIn", "Mode", "RecordedRequest"]
