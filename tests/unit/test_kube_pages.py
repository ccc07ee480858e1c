"""A LIST read a page at a time (``shared.adapters.kube.calls``): every item in order across the
continue tokens, and one page in memory at a time, so that what resync holds at its peak is one
page of the fleet's largest objects (StatefulSets), not two."""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from shared.adapters.kube import calls
from shared.adapters.kube.client import ApiException
from shared.errors import WatchExpired

BODIES: list[dict[str, Any]] = [
    {"metadata": {"continue": "t1", "resourceVersion": "7"}, "items": [{"n": 1}, {"n": 2}]},
    {"metadata": {"continue": "t2"}, "items": [{"n": 3}]},
    {"metadata": {}, "items": [{"n": 4}, {"n": 5}]},
]


class Page(dict[str, Any]):
    """A page's JSON, which a weak reference can follow (a plain dict cannot be weakly referenced)."""


class Items(list[dict[str, Any]]):
    """A page's items, most of its memory, followed the same way (the caller's last item aside)."""


Fetch = Callable[..., Page]


def paging(monkeypatch: pytest.MonkeyPatch) -> tuple[Fetch, list[str | None], list[str]]:
    """A fetch that serves BODIES and, at each request, names the earlier pages still in memory."""
    asked: list[str | None] = []
    held: list[str] = []
    made: list[tuple[weakref.ref[Page], weakref.ref[Items]]] = []

    def fetch(*, limit: int, _continue: str | None, _preload_content: bool, _request_timeout: Any) -> Page:
        assert limit == calls.PAGE and _preload_content is False
        for i, (page_ref, items_ref) in enumerate(made):
            held.extend(
                f"page {i + 1}'s {what} held while page {len(asked) + 1} is asked for"
                for what, ref in (("JSON", page_ref), ("items", items_ref))
                if ref() is not None
            )
        items = Items(dict(i) for i in BODIES[len(asked)]["items"])
        page = Page(metadata=BODIES[len(asked)]["metadata"], items=items)
        asked.append(_continue)
        made.append((weakref.ref(page), weakref.ref(items)))
        return page

    monkeypatch.setattr(calls, "as_json", lambda response: response)
    return fetch, asked, held


def test_every_item_comes_in_order_across_the_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    fetch, asked, _ = paging(monkeypatch)
    assert [item["n"] for item in calls.paged("list things", fetch)] == [1, 2, 3, 4, 5]
    assert asked == [None, "t1", "t2"], "the first page with no token, then each page's continue token"


def test_one_page_is_held_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller keeping a little of each item (as resync's fleet reads do) holds no earlier page
    while the next is asked for; nor does a caller's loop over the pages themselves."""
    fetch, _, held = paging(monkeypatch)
    kept = [item["n"] for item in calls.paged("list things", fetch)]
    assert kept == [1, 2, 3, 4, 5] and held == []
    fetch, _, held = paging(monkeypatch)
    versions: list[str | None] = []
    for page in calls.pages("list things", fetch):
        versions.append(page["metadata"].get("resourceVersion"))
        del page
    assert versions == ["7", None, None] and held == []


def expired(token: str | None) -> ApiException:
    """The 410 the API server answers for a continue token past etcd's compaction, as it writes it
    (k8s.io/apiserver storage/etcd3 ``handleCompactedErrorForPaging``: a Status carrying a token
    for the rest of the list from the latest state); ``token`` None: one that carries none."""
    err = ApiException(status=410, reason="Gone")
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410}
    err.body = json.dumps(status | {"metadata": {"continue": token} if token else {}})
    return err


def expiring(monkeypatch: pytest.MonkeyPatch, token: str | None) -> tuple[Fetch, list[str | None]]:
    """BODIES again, but the request for page 2 with ``t1`` finds the token expired (``expired``);
    the tokens sent, in order."""
    fetch, _, _ = paging(monkeypatch)
    sent: list[str | None] = []

    def fetch_or_expire(**kwargs: Any) -> Page:
        sent.append(kwargs["_continue"])
        if kwargs["_continue"] == "t1":
            raise expired(token)
        if kwargs["_continue"] == "latest-t1":
            kwargs["_continue"] = "t1"  # the rest, as the API server serves it from its latest state
        return fetch(**kwargs)

    return fetch_or_expire, sent


def test_an_expired_continue_token_is_raised_unless_the_caller_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    fetch, asked = expiring(monkeypatch, "latest-t1")
    with pytest.raises(WatchExpired) as raised:
        list(calls.paged("list things", fetch))
    assert raised.value.continue_token == "latest-t1" and asked == [None, "t1"]


def test_a_caller_that_goes_on_gets_the_rest_with_the_api_servers_token(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fetch, asked = expiring(monkeypatch, "latest-t1")
    items = [i["n"] for page in calls.pages("list things", fetch, go_on_if_expired=True) for i in page["items"]]
    assert items == [1, 2, 3, 4, 5], "nothing lost, nothing twice"
    assert asked == [None, "t1", "latest-t1", "t2"]
    assert "continue token expired" in caplog.text


def test_a_410_without_a_token_is_raised_even_to_a_caller_that_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    fetch, _ = expiring(monkeypatch, None)
    with pytest.raises(WatchExpired) as raised:
        list(calls.pages("list things", fetch, go_on_if_expired=True))
    assert raised.value.continue_token is None
