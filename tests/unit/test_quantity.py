"""Kubernetes quantities (shared.model.quantity): the API server's grammar, exact sums."""

from __future__ import annotations

from decimal import Decimal

import pytest

from shared.model import quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", Decimal(2)),
        (2, Decimal(2)),
        ("1500m", Decimal("1.5")),
        ("1.5", Decimal("1.5")),
        (".5", Decimal("0.5")),
        ("2Ki", Decimal(2048)),
        ("4Gi", Decimal(4 * 1024**3)),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        ("3k", Decimal(3000)),
        ("100n", Decimal("1e-7")),
    ],
)
def test_parse_reads_the_api_servers_forms(text: str | int, value: Decimal) -> None:
    assert quantity.parse(text) == value


@pytest.mark.parametrize("text", ["", "two", "1.2.3", "1Ki2", "1KB", "1 Gi"])
def test_parse_refuses_what_is_no_quantity(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        quantity.parse(text)


def test_total_is_exact_and_says_milli_units_only_when_it_must() -> None:
    assert quantity.total("10", "2") == "12"
    assert quantity.total("10", "1500m") == "11500m"
    assert quantity.total("20Gi", "2Gi") == str(22 * 1024**3)
    assert quantity.total("40Gi", "1.5Gi") == str(int(41.5 * 1024**3))
    assert quantity.total("10", "0.0001") == "10000100u"
    assert quantity.total("1", "100n") == "1000000100n"
    assert quantity.total("1e-10") == "1n", "rounded up below a nano-unit"
