"""The chart's own values contract (its ``values.schema.json``) as a check of values: the one
importer of ``jsonschema``.

helm refuses values that fail the chart's schema only when it installs (design.md section 5: the
vcluster 0.21 schema refuses unknown keys). install checks its plans with this at start
(``shared.steps.plans``), so a plan the chart would refuse fails there, naming the plan and the key,
instead of failing each Tenant of that plan later. ``jsonschema`` is imported on the first check,
not with the module: it is install's readiness that runs it, not a cold start's first request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def problems(schema: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """Each way ``values`` fail ``schema``, as ``<dotted key>: <why>``, sorted; none: they pass. A key
    the schema does not allow is named itself (``a.b.unknown: ...``), not by the map that holds it."""
    from jsonschema.validators import validator_for

    validator = validator_for(schema)(schema)
    found = set()
    for error in validator.iter_errors(values):
        where = [str(part) for part in error.absolute_path]
        schema_here = error.schema if isinstance(error.schema, Mapping) else {}
        if (
            error.validator == "additionalProperties"
            and isinstance(error.instance, Mapping)
            and "patternProperties" not in schema_here
        ):
            allowed = set(schema_here.get("properties") or {})
            for key in sorted(set(map(str, error.instance)) - allowed):
                found.add(f"{'.'.join([*where, key])}: not a value of the chart ({error.message})")
            continue
        found.add(f"{'.'.join(where) or '(the top level)'}: {error.message}")
    return sorted(found)
