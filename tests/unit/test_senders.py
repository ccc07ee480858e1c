"""Sender identity (shared.delivery.senders) and its place in the HTTP layer: a request that does not
carry the broker's token for this function is refused with 401 before its body is read.

The TokenReview is a small fake of ``Kube.review_token`` that knows a few tokens, as the API
server would; the integration of the real TokenReview is in tests/e2e (the real broker's tokens).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from shared.delivery.http import Step, function_app
from shared.delivery.senders import REMEMBER_SECONDS, Refused, Review, SenderCheck, SenderPolicy, bearer_token
from shared.errors import ConfigError, PermanentError, TemporaryError
from shared.model import event_types
from shared.observability import metrics
from shared.settings import Settings

AUDIENCE = "tenant-install"
TRIGGER = "system:serviceaccount:kubeopera-system:oidc-tenant-install"
POLICY = SenderPolicy(AUDIENCE, frozenset({TRIGGER}))
NOW = time.time()


def jwt(**claims: Any) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


GOOD = jwt(sub=TRIGGER, aud=[AUDIENCE], exp=NOW + 3600)


class FakeReviewer:
    """The API server's answer for the tokens it knows: GOOD for TRIGGER, OTHER for another SA."""

    def __init__(self, tokens: dict[str, Review] | None = None) -> None:
        self.tokens = tokens if tokens is not None else {GOOD: Review(True, TRIGGER, (AUDIENCE,))}
        self.calls: list[tuple[str, str]] = []

    def __call__(self, token: str, audience: str) -> Review:
        self.calls.append((token, audience))
        review = self.tokens.get(token, Review(False))
        return review if audience in review.audiences else Review(False)


def check(reviewer: FakeReviewer, now: list[float] | None = None) -> SenderCheck:
    clock = now if now is not None else [NOW]
    return SenderCheck(POLICY, reviewer, clock=lambda: clock[0])


def test_the_triggers_token_is_accepted_and_remembered_for_a_minute() -> None:
    reviewer, now = FakeReviewer(), [NOW]
    sender = check(reviewer, now)
    assert sender.verify(f"Bearer {GOOD}") == TRIGGER
    assert sender.verify(f"bearer {GOOD}") == TRIGGER
    assert reviewer.calls == [(GOOD, AUDIENCE)]  # the second one was remembered
    now[0] += REMEMBER_SECONDS + 1
    assert sender.verify(f"Bearer {GOOD}") == TRIGGER
    assert len(reviewer.calls) == 2  # reviewed again: a revoked identity is refused within a minute


def test_a_token_is_not_remembered_past_its_expiry() -> None:
    short = jwt(sub=TRIGGER, aud=[AUDIENCE], exp=NOW + 5)
    reviewer, now = FakeReviewer({short: Review(True, TRIGGER, (AUDIENCE,))}), [NOW]
    sender = check(reviewer, now)
    sender.verify(f"Bearer {short}")
    now[0] += 6
    sender.verify(f"Bearer {short}")
    assert len(reviewer.calls) == 2


@pytest.mark.parametrize(
    ("authorization", "reason"),
    [
        (None, "no-token"),
        ("", "no-token"),
        ("Bearer", "no-token"),
        ("Bearer   ", "no-token"),
        (f"Basic {GOOD}", "no-token"),
        ("Bearer not a token", "invalid"),
        ("Bearer \u00e9t\u00e9", "invalid"),
        ("Bearer " + "a" * 20000, "invalid"),
    ],
)
def test_no_bearer_token_is_refused_without_asking_the_api_server(authorization: str | None, reason: str) -> None:
    reviewer = FakeReviewer()
    with pytest.raises(Refused) as refused:
        check(reviewer).verify(authorization)
    assert refused.value.reason == reason
    assert reviewer.calls == []


@pytest.mark.parametrize(
    ("token", "review", "reason"),
    [
        # forged: well-formed, names the Trigger, but the API server does not know its signature
        (jwt(sub=TRIGGER, aud=[AUDIENCE], exp=NOW + 60), Review(False), "invalid"),
        # the Trigger's own token, but for another function's audience
        (
            jwt(sub=TRIGGER, aud=["tenant-cleanup"], exp=NOW + 60),
            Review(True, TRIGGER, ("tenant-cleanup",)),
            "audience",
        ),
        (jwt(sub=TRIGGER, aud=[AUDIENCE], exp=NOW - 1), Review(False), "expired"),
        # a real token of another identity (any pod's ServiceAccount) for the right audience
        (
            jwt(sub="system:serviceaccount:default:default", aud=[AUDIENCE], exp=NOW + 60),
            Review(True, "system:serviceaccount:default:default", (AUDIENCE,)),
            "subject",
        ),
        ("a.b.c", Review(False), "invalid"),
    ],
)
def test_tokens_the_api_server_or_the_policy_refuse(token: str, review: Review, reason: str) -> None:
    reviewer = FakeReviewer({token: review})
    sender = check(reviewer)
    for _ in range(2):  # a refusal is not remembered as a success
        with pytest.raises(Refused) as refused:
            sender.verify(f"Bearer {token}")
        assert refused.value.reason == reason
    assert len(reviewer.calls) == 2


def test_bearer_token_strips_the_scheme() -> None:
    assert bearer_token(f"Bearer {GOOD}") == GOOD


# --- the HTTP layer -------------------------------------------------------------------------------

EVENT_HEADERS = {
    "ce-specversion": "1.0",
    "ce-id": "1",
    "ce-source": "/test",
    "ce-type": event_types.PROVISIONING,
    "Content-Type": "application/json",
}
BODY = json.dumps({"namespace": "kubeopera-system", "name": "alice", "uid": "u-1", "generation": 1})


def app_with(reviewer: Any, handled: list[str]) -> Any:
    step = Step(
        name="t-senders",
        accepts=frozenset({event_types.PROVISIONING}),
        handle=lambda event, ref: handled.append(ref.key),  # type: ignore[func-returns-value]
    )
    return function_app(step, SenderCheck(POLICY, reviewer)).test_client()


def refused_count(reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "kubeopera_tenant_deliveries_refused_total", {"function": "t-senders", "reason": reason}
    )
    return value or 0.0


def test_a_forged_delivery_is_refused_with_401_and_nothing_handled() -> None:
    handled: list[str] = []
    client = app_with(FakeReviewer(), handled)
    before = refused_count("no-token")
    response = client.post("/", headers=EVENT_HEADERS, data=BODY)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert "only the broker" in response.json["error"]
    assert refused_count("no-token") == before + 1
    forged = jwt(sub=TRIGGER, aud=[AUDIENCE], exp=NOW + 60)
    response = client.post("/", headers=EVENT_HEADERS | {"Authorization": f"Bearer {forged}"}, data=BODY)
    assert response.status_code == 401
    assert handled == []


def test_a_refused_request_is_not_read_even_when_it_is_no_event() -> None:
    handled: list[str] = []
    client = app_with(FakeReviewer(), handled)
    response = client.post("/", headers={"Content-Type": "text/plain"}, data=b"\xff" * 10)
    assert response.status_code == 401  # not 400: the body was never parsed


def test_the_brokers_delivery_is_handled() -> None:
    handled: list[str] = []
    client = app_with(FakeReviewer(), handled)
    response = client.post("/", headers=EVENT_HEADERS | {"Authorization": f"Bearer {GOOD}"}, data=BODY)
    assert response.status_code == 204
    assert handled == ["kubeopera-system/alice"]


@pytest.mark.parametrize("err", [TemporaryError("API server unreachable", retry_after=2), PermanentError("403")])
def test_a_review_that_cannot_be_made_asks_for_redelivery(err: Exception) -> None:
    def failing(token: str, audience: str) -> Review:
        raise err

    handled: list[str] = []
    client = app_with(failing, handled)
    response = client.post("/", headers=EVENT_HEADERS | {"Authorization": f"Bearer {GOOD}"}, data=BODY)
    assert response.status_code == 503
    assert response.headers["Retry-After"] in ("2", "10")
    assert handled == []


# --- settings -------------------------------------------------------------------------------------


def test_settings_read_the_sender_policy() -> None:
    s = Settings.from_env({"SENDER_IDENTITY": "oidc", "SENDER_AUDIENCE": AUDIENCE, "SENDER_SUBJECTS": f" {TRIGGER} ,"})
    assert (s.verify_senders, s.sender_audience, s.sender_subjects) == (True, AUDIENCE, frozenset({TRIGGER}))
    assert not Settings.from_env({"SENDER_IDENTITY": "off"}).verify_senders


@pytest.mark.parametrize(
    ("environ", "names"),
    [
        ({"SENDER_IDENTITY": "oidc"}, "SENDER_AUDIENCE"),
        ({"SENDER_IDENTITY": "oidc", "SENDER_AUDIENCE": AUDIENCE}, "SENDER_SUBJECTS"),
        ({"SENDER_IDENTITY": "maybe"}, "oidc or off"),
        (
            {"SENDER_IDENTITY": "oidc", "SENDER_AUDIENCE": AUDIENCE, "SENDER_SUBJECTS": "default"},
            "system:serviceaccount",
        ),
    ],
)
def test_settings_refuse_an_incomplete_sender_policy(environ: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        Settings.from_env(environ)
