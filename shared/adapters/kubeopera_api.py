"""The kubeopera-api callback client: ``PATCH /api/v1/cloudspaces/{id}``.

The body is exactly the original operator's (spec: kubeopera-api Callback) with ``status``
``active`` once the vCluster is ready; the original had no call for a deletion, and cleanup sends
the same body with ``status: deleted`` once the vCluster is gone (README, "kubeopera-api"). The
call is
non-fatal: it never raises; it returns a ``CallbackResult`` saying whether kubeopera-api took it,
and why not. A refused connection is retried briefly (tenacity); a timeout or an error answer is
not, because the Tenant must not wait on another team's service. The bearer token is never
logged or returned.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import requests
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_fixed

from shared.observability import metrics, tracing

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallbackResult:
    delivered: bool
    detail: str


@dataclass(frozen=True)
class CloudSpaceUpdate:
    """What kubeopera-api is told: the vCluster is ready (``active``) or gone (``deleted``)."""

    cloud_space_id: str
    vcluster_id: str
    namespace: str
    kubeconfig_secret: str
    status: str = "active"

    def body(self) -> dict[str, str]:
        return {
            "vcluster_id": self.vcluster_id,
            "namespace": self.namespace,
            "kubeconfig_secret": self.kubeconfig_secret,
            "status": self.status,
        }


class KubeoperaApi:
    def __init__(self, base_url: str, token: str = "", timeout: float = 5.0) -> None:
        self._base_url = base_url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._session = requests.Session()

    def report(self, update: CloudSpaceUpdate) -> CallbackResult:
        """PATCH the CloudSpace, in a client span whose context the request carries on."""
        with tracing.client_span(
            "PATCH /api/v1/cloudspaces/{id}", {"http.request.method": "PATCH", "kubeopera.status": update.status}
        ) as span:
            result = self._report(update)
            span.set_attribute("kubeopera.callback_delivered", result.delivered)
            metrics.CALLBACKS.labels("delivered" if result.delivered else "failed").inc()
            if not result.delivered:
                span.set_status(tracing.error_status(result.detail))
            return result

    def _report(self, update: CloudSpaceUpdate) -> CallbackResult:
        url = f"{self._base_url}/api/v1/cloudspaces/{update.cloud_space_id}"
        headers = tracing.inject({"Content-Type": "application/json"})
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        try:
            response = self._patch(url, update.body(), headers)
        except requests.Timeout:
            return CallbackResult(False, f"no answer within {self._timeout:g}s")
        except requests.RequestException as err:
            return CallbackResult(False, f"unreachable: {type(err).__name__}")
        if 200 <= response.status_code < 300:
            return CallbackResult(True, f"answered {response.status_code}")
        return CallbackResult(False, f"answered {response.status_code}")

    @retry(
        retry=retry_if_exception_type(requests.ConnectionError),
        stop=stop_after_attempt(3),
        wait=wait_fixed(0.5),
        reraise=True,
    )
    def _patch(self, url: str, body: dict[str, str], headers: dict[str, str]) -> requests.Response:
        return self._session.patch(url, json=body, headers=headers, timeout=(2.0, self._timeout))
