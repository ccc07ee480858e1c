"""A Tenant's maximum quota as the CRD states it: the first rule of each quota field, whose
quantity is written twice (in the CEL rule and in its message), read and checked to agree."""

from __future__ import annotations

import re
from typing import Any

QUOTA_FIELDS = ("cpu", "memory")
_RULE = re.compile(
    r"^!isQuantity\(string\(self\)\) \|\| !quantity\(string\(self\)\)\.isGreaterThan\(quantity\('([^']+)'\)\)$"
)
_MESSAGE = re.compile(r"^string\(self\) \+ ' is more than (\S+), the maximum (CPU|memory) of a Tenant'$")


def quota_schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    quota: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["quota"]
    return quota


def maximum(field_schema: dict[str, Any], field: str) -> str:
    """The field's maximum quantity; fails unless its first rule is the maximum's, with the same
    quantity in the rule and in the message, and no other rule of the field is one."""
    first, *others = field_schema["x-kubernetes-validations"]
    rule, message = _RULE.match(first["rule"]), _MESSAGE.match(first.get("messageExpression", ""))
    assert rule and message, f"quota.{field}: the first rule is not the maximum's: {first}"
    assert first.get("reason") == "FieldValueForbidden", first
    assert rule[1] == message[1], f"quota.{field}: the rule says {rule[1]}, its message {message[1]}"
    assert message[2] == {"cpu": "CPU", "memory": "memory"}[field], first
    assert not any(_RULE.match(other["rule"]) or other.get("reason") for other in others), others
    return rule[1]


def maxima(crd: dict[str, Any]) -> dict[str, str]:
    fields = quota_schema(crd)["properties"]
    return {field: maximum(fields[field], field) for field in QUOTA_FIELDS}
