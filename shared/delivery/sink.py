"""Sending an event on one's own (not as a reply): the one HTTP client for the broker.

A function answers most events with at most one reply, which the broker takes back. resync
re-drives many Tenants from one tick, so it posts its events to its sink instead: ``K_SINK``,
which Knative's SinkBinding sets to the Broker's address (``eventing/resync-sinkbinding.yaml``)
and the local stack sets to its broker. Events go in binary mode, carrying the trace of the
delivery that caused them (``shared.observability.tracing``: the ``traceparent`` extension and header), inside
a client span. A refused connection is retried briefly (tenacity); any answer other
than 2xx is a ``TemporaryError``, so the tick is re-delivered and the pass runs again (every
re-drive is idempotent).

With Knative's ``authentication-oidc`` the broker admits only senders with a token: the
SinkBinding then mounts its identity's token at ``/oidc/token`` (``SINK_TOKEN_FILE``) (refreshed by Knative, so it is
read at each send) and the event carries it as a bearer token. Without that file none is sent.
"""

from __future__ import annotations

from pathlib import Path

import requests
from cloudevents.core.base import BaseCloudEvent
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_fixed

from shared.delivery import events
from shared.errors import TemporaryError
from shared.observability import tracing


class Sink:
    def __init__(self, url: str, timeout: float = 5.0, token_file: Path | None = None) -> None:
        self._url = url
        self._timeout = timeout
        self._token_file = token_file
        self._session = requests.Session()

    def send(self, event: BaseCloudEvent) -> None:
        with tracing.client_span("send " + event.get_type(), tracing.event_attributes(event)) as span:
            headers, body = events.to_binary(tracing.stamp(event))
            response = self._deliver(event, tracing.inject(headers) | self._authorization(), body)
            span.set_attribute("http.response.status_code", response.status_code)

    def _authorization(self) -> dict[str, str]:
        if self._token_file is None:
            return {}
        try:
            token = self._token_file.read_text().strip()
        except FileNotFoundError:
            return {}
        except OSError as err:
            raise TemporaryError(f"cannot read the sender token {self._token_file} ({type(err).__name__})") from None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _deliver(self, event: BaseCloudEvent, headers: dict[str, str], body: bytes) -> requests.Response:
        try:
            response = self._post(headers, body)
        except requests.RequestException as err:
            raise TemporaryError(
                f"the broker at {self._url} is unreachable ({type(err).__name__})", retry_after=5
            ) from None
        if not 200 <= response.status_code < 300:
            raise TemporaryError(f"the broker answered {response.status_code} to {event.get_type()}", retry_after=5)
        return response

    @retry(
        retry=retry_if_exception_type(requests.ConnectionError),
        stop=stop_after_attempt(3),
        wait=wait_fixed(0.5),
        reraise=True,
    )
    def _post(self, headers: dict[str, str], body: bytes) -> requests.Response:
        return self._session.post(self._url, headers=headers, data=body, timeout=(2.0, self._timeout))
