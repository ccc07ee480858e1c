"""What a local stack can be asked for: the knobs of ``start_stack``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType


@dataclass(frozen=True)
class StackOptions:
    kubeopera_api_url: str | None = None
    api_token: str = field(default="", repr=False)
    vcluster_boot_seconds: float = 20.0
    vcluster_never_boot: str = ""  # releases matching this regular expression never boot
    vcluster_api_down: str = ""  # ... boot, but their API refuses every connection
    vcluster_short_names: str = ""  # ... boot with a certificate that ignores controlPlane.proxy.extraSANs
    ready_poll_seconds: int = 15
    cleanup_poll_seconds: int = 5
    resync_at_start: bool = True  # one tick once everything is up, answered before the stack is handed over
    # The PingSource's own schedule (every 5 minutes, on the wall clock's 5-minute marks), run by
    # the real ``mtping``. Off, its adapter is held once the stack is up (its Deployment stays), so
    # no tick comes but those the caller sends (``Stack.tick``): a test or a benchmark then never
    # races with a tick nobody chose. ``kubeopera-tenants local`` runs it, as a cluster would.
    resync_schedule: bool = False
    stuck_release_seconds: int = 180
    helm_deadline_seconds: int = 120  # HELM_DEADLINE_SECONDS; with the above, within Settings' rule
    provision_timeout_seconds: int = 600
    run_dir: Path | None = None
    log_level: str = "INFO"
    # Knative Eventing's authentication-oidc: the broker sends each delivery with a token of the
    # Trigger's identity and each function checks it (SENDER_*); off: no tokens, SENDER_IDENTITY=off.
    sender_identity: bool = True
    # More environment for every function's process, over the stack's own (OTEL_* to trace,
    # GUNICORN_WORKERS, ...): what a Service's env or the ConfigMap would add.
    function_env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # More environment for one function's process, by Knative Service name, over function_env.
    service_env: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}))
    # Knative Services whose every request is profiled (pyinstrument, :mod:`.profiling`), each
    # worker's call tree saved in ``profile_dir``.
    profile: tuple[str, ...] = ()
    profile_dir: Path | None = None
    # More flags for kube-apiserver, over the test bed's own (``--profiling=true`` for its pprof).
    apiserver_args: tuple[str, ...] = ()
