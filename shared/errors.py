"""The error hierarchy: every failure says whether it is temporary or permanent.

The HTTP layer (``shared.delivery.http``) maps these to status codes in one place, following Knative's
delivery rules (design.md section 2, rule 4): a ``TemporaryError`` becomes 503 (with
``Retry-After`` when it names a delay) so the broker re-delivers; a ``PermanentError`` becomes
422, which Knative does not retry, and the function marks the Tenant Failed with the message
first; a ``BadEvent`` becomes 400. Messages never contain secrets (rule 5).
"""

from __future__ import annotations


class TenantError(Exception):
    """Base of every error the functions raise on purpose."""


class TemporaryError(TenantError):
    """Will likely succeed later: the broker should re-deliver the event."""

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class WorkInHand(TemporaryError):
    """Another process is doing this very work now (it holds the release's Lease). Asked again
    later, the delivery may find it done; if the broker gives up first, nothing has failed: the
    holder's own delivery answers for the outcome, and a holder that died leaves its Tenant to
    resync's re-drive. Its answer says so (``"inHand": true``), and dead-letter reads it."""


class NotReadyYet(TemporaryError):
    """The vCluster is still booting; ask again after the poll interval."""

    def __init__(self, message: str, *, retry_after: int = 15) -> None:
        super().__init__(message, retry_after=retry_after)


class Conflict(TemporaryError):
    """Someone else changed the object first (HTTP 409 from the API server)."""


class WatchExpired(TemporaryError):
    """A watch's resourceVersion is older than the history the API server keeps (410 Gone): list
    again, and watch from the list's version. For a LIST's expired continue token the API server
    adds a token to go on with from its latest state (``continue_token``; an inconsistent list)."""

    def __init__(self, message: str, *, continue_token: str | None = None) -> None:
        super().__init__(message)
        self.continue_token = continue_token


class NamespaceTerminating(TemporaryError):
    """Nothing new can be made in a namespace that is being deleted (the API server's 403)."""


class PermanentError(TenantError):
    """Will never succeed as things are: mark the Tenant Failed and do not retry.

    ``reason`` becomes the ``Ready`` condition's reason and the Kubernetes Event's reason.
    """

    reason = "ProvisioningFailed"


class Forbidden(PermanentError):
    """The API server refused the request (401, 403): a rule this identity lacks. Permanent, since
    a missing rule of ``deploy/`` does not heal by retrying; the one exception is access that
    install grants at run time in a Tenant's namespace, where ``shared.steps.access`` makes it
    temporary (the grant may not be in force yet)."""


class OwnershipConflict(PermanentError):
    """What this Tenant needs (its namespace, release or kubeconfig Secret) belongs to someone
    else: another Tenant, a Tenant that is gone, or nobody we know of. Nothing of it is touched."""

    reason = "OwnershipConflict"


class ReleaseTampered(PermanentError):
    """helm's history of a release holds a Secret that is not one of helm's records: it carries the
    release's labels (``owner=helm``, ``name=<release>``) but not the type, the name or the
    ``version`` label helm gives a record (``shared.adapters.release``). No helm operation may trust that
    history; the message names each such Secret, its type and labels, never its data."""

    reason = "ReleaseTampered"


class ProvisionTimeout(PermanentError):
    """The vCluster was not ready within ``PROVISION_TIMEOUT_SECONDS``."""

    reason = "ProvisionTimeout"


class UnknownPlan(PermanentError):
    """The Tenant's ``spec.plan`` names no plan of ``PLANS_DIR``; the message lists the plans."""

    reason = "UnknownPlan"


class CleanupStalled(PermanentError):
    """Nothing of a Tenant's deletion moved for ``CLEANUP_STALL_SECONDS``; the message says what is stuck."""

    reason = "CleanupFailed"


class TenantGone(TenantError):
    """The Tenant disappeared while a step worked on it; there is nothing left to do."""


class BadEvent(TenantError):
    """The request is not a CloudEvent this function understands; nothing was changed."""


class ConfigError(TenantError):
    """A setting from the environment is missing or malformed; raised at start-up."""
