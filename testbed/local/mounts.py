"""The ConfigMap volumes of each function's Knative Service, as the kubelet would mount them for
its pod: each ConfigMap's files written into a folder of the run, and the setting whose default is
the mount path pointed at that folder (a host process cannot have ``/etc/...``). So install reads
the plans of ``deploy/base/plans.yaml`` (ConfigMap ``tenant-plans``) as its pod would.

A mount no setting names is refused: the stack would otherwise run a function without a file
its pod has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from shared.settings import PLANS_DIR
from testbed.local.errors import StackError

# Mount path -> the setting that points there (its default in shared.settings).
SETTING_OF_MOUNT = {str(PLANS_DIR): "PLANS_DIR"}


def config_map_env(
    manifests: Iterable[Mapping[str, Any]], services: Iterable[str], run_dir: Path
) -> dict[str, dict[str, str]]:
    """Knative Service name -> the settings of its ConfigMap mounts, their files written under
    ``run_dir/mounts/<service>/<volume>``."""
    docs = list(manifests)
    config_maps = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d.get("kind") == "ConfigMap"}
    knative = {
        d["metadata"]["name"]: d
        for d in docs
        if d.get("kind") == "Service" and str(d.get("apiVersion", "")).startswith("serving.knative.dev/")
    }
    env: dict[str, dict[str, str]] = {}
    for service in services:
        pod = knative[service]["spec"]["template"]["spec"]
        volumes = {v["name"]: v["configMap"]["name"] for v in pod.get("volumes") or () if "configMap" in v}
        for container in pod["containers"]:
            for mount in container.get("volumeMounts") or ():
                if mount["name"] not in volumes:
                    continue
                setting = SETTING_OF_MOUNT.get(mount["mountPath"])
                if setting is None:
                    raise StackError(
                        f"{service} mounts ConfigMap {volumes[mount['name']]} at {mount['mountPath']}, which no "
                        "setting names (testbed.local.mounts.SETTING_OF_MOUNT)"
                    )
                name = volumes[mount["name"]]
                if name not in config_maps:
                    raise StackError(f"{service} mounts ConfigMap {name}, which deploy/base does not make")
                folder = run_dir / "mounts" / service / mount["name"]
                folder.mkdir(parents=True, exist_ok=True)
                for key, text in config_maps[name].items():
                    (folder / key).write_text(text, encoding="utf-8")
                env.setdefault(service, {})[setting] = str(folder)
    return env
