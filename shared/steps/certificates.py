"""When the credential a Tenant's customer holds runs out: the client certificate of its kubeconfig.

vcluster 0.21.2 exports a ``system:masters`` client certificate valid for 10 years and never
rotates it (design.md section 5). resync lists every stored kubeconfig (the one kubeopera-api
hands out) on every pass anyway; :func:`client_certificate_expiry` says when that one's
certificate expires, and :func:`expiring` counts those that expire within a window, for the
metric and alert that tell a platform team before a customer is locked out. The only module that
imports ``cryptography`` (loaded on first use, so the functions that never read a certificate
never import it).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from shared.adapters.vcluster_api import UnusableKubeconfig, read_kubeconfig

WARN_WITHIN = timedelta(days=30)  # the alert's window: time to re-issue before anyone is locked out


def client_certificate_expiry(kubeconfig: bytes) -> datetime | None:
    """When the kubeconfig's client certificate expires (UTC); None when there is none to read."""
    from cryptography import x509

    try:
        pem = read_kubeconfig(kubeconfig).cert_pem
        return x509.load_pem_x509_certificate(pem).not_valid_after_utc
    except (UnusableKubeconfig, ValueError):
        return None


def expiring(expiries: Iterable[datetime], now: datetime, within: timedelta = WARN_WITHIN) -> int:
    """How many of ``expiries`` fall before ``now + within`` (expired ones included)."""
    return sum(1 for moment in expiries if moment - now < within)
