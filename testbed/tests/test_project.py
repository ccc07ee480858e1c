"""What the test bed reads from the clone's manifests (testbed.project): how many requests each
function's Knative Service serves at once across the cluster, which the bench gives install's
one local process."""

from __future__ import annotations

from typing import Any

from testbed.local.manifests import declared_concurrency, declared_functions
from testbed.project import cluster_concurrency


def _service(name: str, per_pod: int | None, max_scale: str | None) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"containers": [{"args": ["functions.x:create_app()"]}]}}
    if per_pod is not None:
        template["spec"]["containerConcurrency"] = per_pod
    if max_scale is not None:
        template["metadata"] = {"annotations": {"autoscaling.knative.dev/max-scale": max_scale}}
    return {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"template": template},
    }


def test_a_services_ceiling_is_its_pods_times_what_each_serves_at_once() -> None:
    docs = [
        _service("both", 2, "4"),
        _service("no-max-scale", 3, None),
        _service("unbounded", 0, "5"),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}},
    ]
    assert cluster_concurrency(docs) == {"both": 8, "no-max-scale": 3, "unbounded": 5}


def test_every_deployed_function_has_a_ceiling_and_install_is_four_pods_of_two() -> None:
    ceilings = declared_concurrency()
    assert set(ceilings) == set(declared_functions())
    assert ceilings["tenant-install"] == 8
    assert ceilings["tenant-resync"] == 1  # one pass at a time
