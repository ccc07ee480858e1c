"""What a function process builds once at start: settings, logs, and its clients.

Each ``functions.<name>.create_app()`` calls ``Runtime.start(name)``; a bad setting fails the
process start with ``ConfigError`` instead of failing requests later. Clients are built once per
process and shared by its threads.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared import logs
from shared.errors import PermanentError
from shared.helm import Helm
from shared.kube import Kube
from shared.kubeopera_api import KubeoperaApi
from shared.reconcile import mark_failed
from shared.settings import Settings
from shared.tenant import TenantRef


@dataclass(frozen=True)
class Runtime:
    function: str
    settings: Settings
    kube: Kube

    @classmethod
    def start(cls, function: str) -> Runtime:
        settings = Settings.from_env()
        logs.configure(settings.log_level, function=function, environment=settings.environment)
        return cls(function=function, settings=settings, kube=Kube.connect(component=f"tenant-{function}"))

    def helm(self) -> Helm:
        return Helm(
            self.settings.chart_ref,
            self.settings.chart_version,
            self.settings.chart_cache_dir,
            executable=self.settings.helm_executable,
            stuck_after=self.settings.stuck_release_seconds,
        )

    def kubeopera_api(self) -> KubeoperaApi:
        return KubeoperaApi(
            self.settings.kubeopera_api_base_url,
            self.settings.internal_service_token,
            self.settings.callback_timeout_seconds,
        )

    def mark_failed(self, ref: TenantRef, err: PermanentError) -> None:
        mark_failed(self.kube, ref, str(err), err.reason)
