"""Kubernetes resource quantities as exact numbers: parse (``1500m``, ``2Gi``, ``1e3``) and add.

The same grammar the API server accepts (``resource.Quantity``: a decimal number, then a binary
suffix ``Ki``..``Ei``, a decimal one ``n``..``E``, or an exponent); the arithmetic is exact
(``Decimal``), so a sum is written as the API server would read the parts. Only what the values
need: a namespace's quota is its workloads' share plus the control plane's own requests.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal

_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")


def parse(text: str | int) -> Decimal:
    """The exact value of a quantity; ``ValueError`` for anything else."""
    found = _QUANTITY.match(str(text).strip())
    if not found:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number, suffix = Decimal(found.group(1)), found.group(2) or ""
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number * Decimal(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def total(*parts: str | int) -> str:
    """The sum of quantities, written as a plain number or in the largest of milli-, micro- and
    nano-units that holds it exactly (``"10"`` and ``"1500m"`` add up to ``"11500m"``, ``"20Gi"``
    and ``"2Gi"`` to ``"23622320128"``); below a nano-unit it is rounded up, as Kubernetes does."""
    value = sum((parse(part) for part in parts), Decimal(0))
    for scale, suffix in ((1, ""), (10**3, "m"), (10**6, "u")):
        scaled = value * scale
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    return f"{int((value * 10**9).to_integral_value(rounding=ROUND_CEILING))}n"
