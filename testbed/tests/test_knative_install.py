"""What the test bed changes in Knative's own CRDs before it applies them (testbed.knative.install):
conversion by name where Knative's webhook would convert, and no source CRD enrolled in the
EventType registry, whose reconciler cannot converge without that webhook."""

from __future__ import annotations

from typing import Any

from testbed.knative import install


def crd(labels: dict[str, str], conversion: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"group": "sources.knative.dev"}
    if conversion:
        spec["conversion"] = {"strategy": conversion, "webhook": {"clientConfig": {}}}
    return {
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "pingsources.sources.knative.dev", "labels": labels},
        "spec": spec,
    }


def test_a_source_crd_leaves_the_event_type_registry_and_keeps_its_other_labels() -> None:
    source = crd(
        {install.SOURCE_DUCK_LABEL: "true", "duck.knative.dev/addressable": "true", "knative.dev/crd-install": "true"}
    )
    changed = install._without_event_type_registry(source)
    assert changed["metadata"]["labels"] == {"duck.knative.dev/addressable": "true", "knative.dev/crd-install": "true"}
    assert source["metadata"]["labels"][install.SOURCE_DUCK_LABEL] == "true", "the original is not changed"
    other = crd({"knative.dev/crd-install": "true"})
    assert install._without_event_type_registry(other) is other


def test_webhook_conversion_becomes_conversion_by_name() -> None:
    converted = install._without_conversion_webhook(crd({}, conversion="Webhook"))
    assert converted["spec"]["conversion"] == {"strategy": "None"}
    plain = crd({})
    assert install._without_conversion_webhook(plain) is plain
