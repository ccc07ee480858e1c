"""How the Kubernetes adapter makes a request: each in a client span, its failure classified once.

A 409 becomes ``Conflict``; a 410 (a watch's or a page's version too old) ``WatchExpired``; 429,
5xx and connection failures ``TemporaryError``; a 403 for a namespace being deleted
``NamespaceTerminating`` (temporary); other 401/403 ``Forbidden``, a ``PermanentError``
(a missing RBAC rule does not heal by retrying; the callers that read where install grants access at
run time make it temporary, ``shared.steps.access``); 400/422 ``PermanentError`` (the object we sent
is invalid). Also the forms a request's answer can take (created or there already, absent or not,
read as JSON, listed a page at a time) and ``Apis``, the API groups every part of the adapter calls.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import urllib3

from shared.adapters.kube.client import ApiException, k8s
from shared.errors import Conflict, Forbidden, NamespaceTerminating, PermanentError, TemporaryError, WatchExpired
from shared.observability import tracing

T = TypeVar("T")
log = logging.getLogger(__name__)


class Apis:
    """The API groups of one client, made once by ``Kube``; each part of the adapter calls these.
    The client's generated types are loose (objects and optionals everywhere), so answers are Any
    here and become this project's values in the part that reads them."""

    _api: Any
    _component: str  # who reports the Events the adapter records
    _core: Any
    _custom: Any
    _coordination: Any
    _apps: Any
    _authentication: Any
    _rbac: Any
    _authorization: Any
    _networking: Any


def _api_status(err: ApiException) -> dict[str, Any]:
    """The Status object an API error's body carries ({} when it carries none)."""
    try:
        status = json.loads(err.body or "{}")
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


def _api_message(err: ApiException) -> str:
    """The Status message of an API error (never a request body, so never a secret)."""
    return str(_api_status(err).get("message", ""))[:300]


def _api_continue(err: ApiException) -> str | None:
    """The continue token a 410 for an expired one carries (k8s.io/apiserver storage/etcd3
    ``handleCompactedErrorForPaging``: the rest of the list from the latest state), if any."""
    token = (_api_status(err).get("metadata") or {}).get("continue")
    return str(token) if token else None


def call(what: str, fn: Callable[[], T]) -> T:
    """One API request, in a client span (``k8s <verb> <resource>``), its failure classified."""
    verb, _, rest = what.partition(" ")
    with tracing.client_span(f"k8s {verb} {rest.split(' ')[0]}", {"k8s.request": what}):
        return _classified(what, fn)


def _classified(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ApiException as err:
        status = int(err.status or 0)
        reason = err.reason or ""
        if status == 409:
            raise Conflict(f"{what}: conflict ({reason})") from None
        if status == 403 and "because it is being terminated" in _api_message(err):
            raise NamespaceTerminating(f"{what}: the namespace is being deleted", retry_after=2) from None
        if status in (401, 403):
            # Permanent on purpose: a rule missing from deploy/ does not heal by retrying, and the
            # Tenant is better Failed at once with the verb and resource named than re-delivered
            # until the broker gives up. The one 403 that heals is a read in a Tenant's vcluster-*
            # namespace, where install grants the other functions their access at run time
            # (shared.steps.access): a RoleBinding just made counts only once the API server's RBAC
            # cache has it, and a Tenant of an earlier version gets its bindings on its next
            # install delivery. Only those callers know that they read there, so they turn this
            # Forbidden into a TemporaryError themselves (access.granted_at_run_time).
            raise Forbidden(f"{what}: the API server refused it ({status} {reason})") from None
        if status == 410:
            token = _api_continue(err)
            raise WatchExpired(
                f"{what}: the API server no longer holds that version ({reason})", continue_token=token
            ) from None
        if status in (400, 422):
            raise PermanentError(f"{what}: the API server found it invalid ({status}): {_api_message(err)}") from None
        if status == 429 or status >= 500 or status == 0:
            raise TemporaryError(f"{what}: API server answered {status} {reason}", retry_after=2) from None
        raise
    except (urllib3.exceptions.HTTPError, OSError) as err:
        raise TemporaryError(f"{what}: API server unreachable ({type(err).__name__})", retry_after=2) from None


def created(what: str, fn: Callable[[], object]) -> bool:
    """A create for which "it exists already" (409) is an answer: False. Its namespace gone (404)
    is temporary: whoever deletes it is at work, and the next delivery sees the outcome."""
    try:
        call(what, fn)
    except Conflict:
        return False
    except ApiException as err:
        if err.status == 404:
            raise TemporaryError(f"{what}: its namespace does not exist", retry_after=2) from None
        raise
    return True


def unless_absent(what: str, fn: Callable[[], object]) -> None:
    """A delete for which "it is not there" (404) is success."""
    try:
        call(what, fn)
    except ApiException as err:
        if err.status != 404:
            raise


def precondition(resource_version: str) -> Any:
    """Delete only the version we read (409 if it changed meanwhile)."""
    return k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(resource_version=resource_version))


# Items per LIST request: a fleet-wide list comes a page at a time (``limit`` and ``continue``),
# never as one answer the size of the fleet, in the API server's memory or ours. A page is held
# as JSON while it is read, and a worker keeps the memory it once held: resync's pass over 1,001
# Tenants held 39 MiB of Python objects at its peak with pages of 500, 14 MiB with pages of 100
# (tracemalloc), for the same pass time and a few more requests.
PAGE = 100
# (connect, read) seconds for one page: an API server gone silent mid-answer (its node lost, no
# reset) is a TemporaryError, not a caller (the vCluster watch's LIST) blocked for good.
PAGE_TIMEOUT = (10, 60)


def as_json(response: Any) -> dict[str, Any]:
    """A response asked for with ``_preload_content=False``: its JSON as is, without the client's
    deserialization into its models (for a StatefulSet, more CPU than the request itself; resync
    reads thousands)."""
    found: dict[str, Any] = json.loads(response.data)
    return found


def paged(what: str, fetch: Callable[..., Any]) -> Iterator[dict[str, Any]]:
    """Every item of a LIST as JSON, ``PAGE`` at a time (``pages``): a caller that keeps a little
    of each item never holds more than one page as JSON."""
    for page in pages(what, fetch):
        items = page.get("items") or []
        del page  # its items are all this keeps of it
        yield from items
        del items  # let go before the next page is asked for


def pages(what: str, fetch: Callable[..., Any], *, go_on_if_expired: bool = False) -> Iterator[dict[str, Any]]:
    """Each page of a LIST as JSON (its ``items`` and ``metadata``): ``fetch`` is called with
    ``limit``, ``_continue`` and ``_preload_content``, until the API server gives no ``continue``
    token. A page is asked for when the one before has been consumed, and let go of here first; a
    caller looping over the pages lets go of each before its next turn too (``del page``, as
    ``paged`` does), or two pages are held at once. Every page of one LIST is of the same
    snapshot: the first page's ``metadata.resourceVersion`` is the list's, the one to watch from.

    A continue token lasts as long as the API server keeps the snapshot's history (etcd's
    compaction, 5 minutes by default). A caller that works between pages for longer may say
    ``go_on_if_expired``: on the 410 the rest comes from the API server's latest state, with the
    token it gives for that (logged), so an object made, changed or deleted meanwhile may be
    seen or missed. Otherwise, and when the 410 carries no token, ``WatchExpired`` is raised."""
    token: str | None = None
    while True:
        try:
            page = call(what, functools.partial(_page, fetch, token))
        except WatchExpired as err:
            if not go_on_if_expired or err.continue_token is None or token is None:
                raise
            log.warning("continue token expired; the rest of the list from the latest state", extra={"list": what})
            token = err.continue_token
            continue
        token = page.get("metadata", {}).get("continue") or None
        yield page
        del page
        if token is None:
            return


def _page(fetch: Callable[..., Any], token: str | None) -> dict[str, Any]:
    return as_json(fetch(limit=PAGE, _continue=token, _preload_content=False, _request_timeout=PAGE_TIMEOUT))


def found_or_none(what: str, fn: Callable[[], T]) -> T | None:
    """A get for which "it is not there" (404) is an answer: None."""
    try:
        return call(what, fn)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
