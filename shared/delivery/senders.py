"""Sender identity: only the broker can make a function act.

Any pod in the cluster can reach a ``cluster-local`` Knative Service, so a function must know who
sent a request before it reads it. With Knative Eventing's ``authentication-oidc`` feature the
broker attaches to every delivery a JWT (``Authorization: Bearer ...``) for the Trigger's own
identity, a ServiceAccount the eventing controller makes for it, with the subscriber's audience.
A function accepts a delivery only when

1. it carries a bearer token,
2. the API server, asked by a TokenReview for the function's own audience, says the token is
   valid (signed by the cluster, not expired, bound to an object that still exists, and meant for
   this audience), and
3. the identity it names is one of those allowed to deliver to this function
   (``SENDER_SUBJECTS``: its Trigger's, and the dead-letter path's for dead-letter).

Anything else is refused with 401 before the body is read, so nothing is parsed, read or written
for it. A TokenReview that cannot be made (the API server unreachable) is a ``TemporaryError``:
the broker re-delivers, the sender is not at fault.

The filter re-uses a token for many deliveries, so a verified token is remembered for at most
``REMEMBER_SECONDS`` (never past its own ``exp``): one TokenReview a minute per Trigger, not one
per delivery. A revoked identity (its ServiceAccount deleted) is therefore refused within a minute.

Pure apart from the review itself, which the caller gives (``Kube.review_token`` in production).
Tokens are never logged; the refusal's reason and the subject are.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

REMEMBER_SECONDS = 60.0
_REMEMBER_AT_MOST = 1024  # distinct tokens; the broker sends one per Trigger


@dataclass(frozen=True)
class Review:
    """What the API server said of a token (a TokenReview's status)."""

    authenticated: bool
    username: str = ""
    audiences: tuple[str, ...] = ()


@dataclass(frozen=True)
class SenderPolicy:
    """Who may deliver to one function: the audience its tokens carry and the allowed subjects."""

    audience: str
    subjects: frozenset[str]


class Refused(Exception):
    """The request does not come from an allowed sender. ``reason`` is a metrics label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


Reviewer = Callable[[str, str], Review]  # (token, audience) -> what the API server says


class SenderCheck:
    """Verifies the bearer token of each delivery against one ``SenderPolicy``. Thread-safe."""

    def __init__(self, policy: SenderPolicy, review: Reviewer, *, clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self._review = review
        self._clock = clock
        self._lock = threading.Lock()
        self._verified: dict[str, tuple[str, float]] = {}  # sha256(token) -> (subject, until)

    def verify(self, authorization: str | None) -> str:
        """The sender's identity (``system:serviceaccount:<ns>:<name>``), or ``Refused``."""
        token = bearer_token(authorization)
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        with self._lock:
            remembered = self._verified.get(key)
        if remembered is not None and remembered[1] > now:
            return remembered[0]
        review = self._review(token, self.policy.audience)
        claims = unverified_claims(token)
        if not review.authenticated or self.policy.audience not in review.audiences:
            raise Refused(*_why_invalid(claims, self.policy.audience, now))
        if review.username not in self.policy.subjects:
            raise Refused("subject", f"{review.username} may not deliver here")
        until = now + REMEMBER_SECONDS
        exp = claims.get("exp")
        if isinstance(exp, int | float):
            until = min(until, float(exp))
        with self._lock:
            if len(self._verified) >= _REMEMBER_AT_MOST:
                self._verified = {k: v for k, v in self._verified.items() if v[1] > now}
                if len(self._verified) >= _REMEMBER_AT_MOST:
                    self._verified.clear()
            self._verified[key] = (review.username, until)
        return review.username


def bearer_token(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Refused("no-token", "no bearer token: only the broker may deliver here")
    if len(token) > 16384 or not token.isascii() or any(c.isspace() for c in token):
        raise Refused("invalid", "the bearer token is not a JWT")
    return token


def unverified_claims(token: str) -> dict[str, object]:
    """The JWT's payload, NOT verified: only to say why the API server refused a token, and for
    the ``exp`` of one it accepted. Empty when the token is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return {}
    return claims if isinstance(claims, dict) else {}


def _why_invalid(claims: dict[str, object], audience: str, now: float) -> tuple[str, str]:
    exp = claims.get("exp")
    if isinstance(exp, int | float) and exp <= now:
        return "expired", "the bearer token has expired"
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if claims and audience not in audiences:
        return "audience", f"the bearer token is not meant for audience {audience!r}"
    return "invalid", "the API server did not accept the bearer token"
