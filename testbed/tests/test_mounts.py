"""The local stack mounts a Knative Service's ConfigMap volumes as its pod would
(``testbed.local.mounts``): the files where the setting points, and no mount it cannot name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.settings import PLANS_DIR
from testbed.local.errors import StackError
from testbed.local.mounts import config_map_env


def service(mount_path: str) -> dict[str, Any]:
    return {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": "tenant-install"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "function", "volumeMounts": [{"name": "plans", "mountPath": mount_path}]}],
                    "volumes": [{"name": "plans", "configMap": {"name": "tenant-plans"}}],
                }
            }
        },
    }


PLANS = {
    "kind": "ConfigMap",
    "metadata": {"name": "tenant-plans"},
    "data": {"default.yaml": "{}\n", "gold.yaml": "a: 1\n"},
}


def test_a_config_map_volume_is_written_where_its_setting_points(tmp_path: Path) -> None:
    env = config_map_env([PLANS, service(str(PLANS_DIR))], ["tenant-install"], tmp_path)
    folder = Path(env["tenant-install"]["PLANS_DIR"])
    assert {f.name: f.read_text() for f in folder.iterdir()} == PLANS["data"]


def test_a_mount_no_setting_names_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="at /etc/elsewhere, which no setting names"):
        config_map_env([PLANS, service("/etc/elsewhere")], ["tenant-install"], tmp_path)
