"""The helm command line the adapter runs: ``--disable-openapi-validation`` on ``helm upgrade``
unless the manifests are to be checked (shared.adapters.helm; the real helm in
tests/integration/test_helm_adapter.py)."""

from __future__ import annotations

import asyncio

import pytest

from shared.adapters.helm import _Command


@pytest.mark.parametrize(
    ("validate", "command", "ran"),
    [
        (False, ["upgrade", "vc-a", "/charts/vcluster"], "upgrade vc-a /charts/vcluster --disable-openapi-validation"),
        (True, ["upgrade", "vc-a", "/charts/vcluster"], "upgrade vc-a /charts/vcluster"),
        (False, ["uninstall", "vc-a"], "uninstall vc-a"),  # only an upgrade builds objects to check
        (False, ["rollback", "vc-a", "1"], "rollback vc-a 1"),
    ],
)
def test_the_openapi_check_is_skipped_on_upgrades_unless_asked(validate: bool, command: list[str], ran: str) -> None:
    echo = _Command(validate, executable="echo")  # prints the arguments helm would get
    assert asyncio.run(echo.run(command)).decode().strip() == ran
