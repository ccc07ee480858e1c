"""Settings from the environment, read and checked once at start-up.

The names and defaults are the original operator's (spec: Environment Variables) plus the ones
this design adds (chart reference, Tenant namespace, timeouts). A bad value raises
``ConfigError`` naming the variable, so a misconfigured Service fails its start, not a request.
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlparse

import yaml

from shared.errors import ConfigError
from shared.model import service_range
from shared.model.isolation import Isolation
from shared.model.naming import DEFAULT_TENANT_NAMESPACE
from shared.model.plans import PLAN_NAME, Plan, Plans
from shared.model.values import DISTROS

# The check-ready and cleanup Triggers' retryAfterMax (eventing/triggers): the broker caps every
# Retry-After at it, so a longer poll would silently become this one (and check-ready's count of
# polls, which keeps the timeout honest, would be wrong).
RETRY_AFTER_MAX_SECONDS = 15

# After HELM_DEADLINE_SECONDS helm gets TERM (it cancels its context and stops at once); KILL
# follows this much later, for a helm that does not.
HELM_KILL_AFTER_SECONDS: Final = 2
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# Where install's Knative Service mounts the ConfigMap tenant-plans (deploy/base/services/tenant-install.yaml).
PLANS_DIR = Path("/etc/kubeopera-tenants/plans")
_DNS_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)+$")


@dataclass(frozen=True)
class Settings:
    """Everything a function needs to know about its environment."""

    kubeopera_api_base_url: str = "http://kubeopera-api:8080"
    internal_service_token: str = field(default="", repr=False)
    environment: str = "development"
    chart_ref: str = "oci://ghcr.io/loft-sh/charts/vcluster"
    chart_version: str = "0.21.2"
    tenant_namespace: str = DEFAULT_TENANT_NAMESPACE
    log_level: str = "INFO"
    provision_timeout_seconds: int = 600
    callback_timeout_seconds: float = 5.0
    ready_poll_seconds: int = 15
    cleanup_poll_seconds: int = 5
    # CLEANUP_STALL_SECONDS: cleanup gives up (Failed, CleanupFailed) only when nothing of the
    # deletion has moved for this long, saying what is stuck; a slow deletion that moves is waited for.
    cleanup_stall_seconds: int = 300
    # STUCK_RELEASE_SECONDS: a release pending longer than this was left by a helm that is no more
    # (helm runs at most HELM_DEADLINE_SECONDS + HELM_KILL_AFTER_SECONDS), and is recovered.
    stuck_release_seconds: int = 180
    # HELM_DEADLINE_SECONDS: a helm process still running after this is stopped (TERM, then KILL).
    helm_deadline_seconds: int = 120
    # HELM_VALIDATE_MANIFESTS: helm checks each object it renders against the cluster's OpenAPI
    # schema before it sends it (helm's own default; 60% of a helm upgrade's CPU). Off by default:
    # the values are checked by the chart's values.schema.json either way, and the objects by the
    # API server when they are made (shared.adapters.helm).
    validate_manifests: bool = False
    # ORPHAN_GRACE_SECONDS: a vcluster-* namespace whose owner Tenant no longer exists is removed
    # (resync finds it, cleanup removes it) once it is older than this.
    orphan_grace_seconds: int = 600
    chart_cache_dir: Path = Path("/tmp/kubeopera-tenants/charts")
    helm_executable: str = "helm"
    sink_url: str = ""  # K_SINK: where a function sends events of its own (resync; SinkBinding sets it)
    # SINK_TOKEN_FILE: the sender token for K_SINK, where Knative's SinkBinding mounts it with OIDC on
    sink_token_file: Path = Path("/oidc/token")
    # Sender identity (shared.delivery.senders). From the environment it is on unless SENDER_IDENTITY=off;
    # a Settings built in code (the unit tests) checks no sender unless it is given an audience.
    sender_audience: str = ""  # SENDER_AUDIENCE: the audience the broker's tokens carry for this function
    sender_subjects: frozenset[str] = frozenset()  # SENDER_SUBJECTS: identities allowed to deliver
    # A tenant's namespace policies and Pod Security level (shared.model.isolation: TENANT_RESOURCE_QUOTA,
    # TENANT_LIMIT_DEFAULT, TENANT_LIMIT_DEFAULT_REQUEST, TENANT_EGRESS_CIDR, TENANT_EGRESS_EXCEPT,
    # POD_SECURITY_ENFORCE; each defaults to the vcluster 0.21.2 chart's own default, baseline).
    isolation: Isolation = Isolation()
    # SERVICE_CIDR: the host cluster's Service range, sent to every vCluster as ``serviceCIDR``
    # (shared.model.service_range). Empty: install reads it from the cluster at start.
    service_cidr: str = ""
    # DELETE_RETAINED_VOLUMES: cleanup deletes a PersistentVolume of the Tenant's namespace left
    # behind with reclaim policy Retain (default: it only reports it, functions.cleanup).
    delete_retained_volumes: bool = False
    # VCLUSTER_DISTRO: the control plane a new vCluster runs, ``k3s`` (the original's) or ``k8s``
    # (upstream vcluster has since removed k3s). A vCluster keeps the distro it was made with
    # (shared.model.values.keep_distro): changing it would be a new, empty cluster, not an upgrade.
    distro: str = "k3s"
    # VCLUSTER_EXTERNAL_SERVER: an address outside the cluster where each vCluster is reachable
    # (your ingress or load balancer), with the Tenant's names in it, e.g.
    # ``https://{tenant}.vclusters.example.com:443``. Its host becomes a name of the vCluster's
    # certificate, and the stored Secret gets a second kubeconfig with it (KUBECONFIG_EXTERNAL_KEY).
    external_server: str = ""
    # PLANS_DIR: the platform's plans (shared.model.plans), one values file <plan>.yaml each (the
    # ConfigMap tenant-plans); read and checked here, so a bad plan fails the start naming plan and key.
    plans: Plans = Plans()
    # ROLLOUT_MAX_PARALLEL: a fleet change (the chart version, a plan, the base values) upgrades at
    # most this many Ready Tenants at a time across the fleet (shared.model.rollout).
    rollout_max_parallel: int = 2
    # RESYNC_TICK_SECONDS: the time between two ticks of the PingSource tenant-resync
    # (eventing/resync-pingsource.yaml: every 5 minutes; a deploy test checks they agree).
    resync_tick_seconds: int = 300
    # VCLUSTER_LOOK_PASSES: resync looks closely at each Ready Tenant (vcluster's Secret read by
    # name, its API probed) once in this many passes, a share of the fleet on each
    # (shared.model.cadence). 1: every Tenant on every pass.
    vcluster_look_passes: int = 1

    @property
    def verify_senders(self) -> bool:
        return bool(self.sender_audience)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, deliveries: bool = True) -> Settings:
        """The settings the environment gives; without ``deliveries`` (a process nothing is
        delivered to: the vCluster watch) no sender settings are read or needed."""
        env = os.environ if environ is None else environ
        defaults = cls()

        def get(name: str, default: str) -> str:
            value = env.get(name, "").strip()
            return value or default

        base_url = get("KUBEOPERA_API_BASE_URL", defaults.kubeopera_api_base_url).rstrip("/")
        parsed = urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"KUBEOPERA_API_BASE_URL must be an http(s) URL, got {base_url!r}")
        chart_ref = get("VCLUSTER_CHART", defaults.chart_ref)
        if not (chart_ref.startswith("oci://") or chart_ref.startswith("/")):
            raise ConfigError(f"VCLUSTER_CHART must be an oci:// reference or an absolute path, got {chart_ref!r}")
        chart_version = get("VCLUSTER_CHART_VERSION", defaults.chart_version)
        if not _SEMVER.match(chart_version):
            raise ConfigError(f"VCLUSTER_CHART_VERSION must be an exact version like 0.21.2, got {chart_version!r}")
        log_level = get("LOG_LEVEL", defaults.log_level).upper()
        if log_level not in _LOG_LEVELS:
            raise ConfigError(f"LOG_LEVEL must be one of {', '.join(_LOG_LEVELS)}, got {log_level!r}")
        namespace = get("TENANT_NAMESPACE", defaults.tenant_namespace)
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace):
            raise ConfigError(f"TENANT_NAMESPACE must be a namespace name, got {namespace!r}")
        stuck = _positive_int(env, "STUCK_RELEASE_SECONDS", defaults.stuck_release_seconds)
        deadline = _positive_int(env, "HELM_DEADLINE_SECONDS", defaults.helm_deadline_seconds)
        if stuck <= deadline + HELM_KILL_AFTER_SECONDS:
            raise ConfigError(
                f"STUCK_RELEASE_SECONDS ({stuck}) must exceed HELM_DEADLINE_SECONDS ({deadline}) + "
                f"{HELM_KILL_AFTER_SECONDS}: a release pending for less than that may still have its helm running"
            )
        return cls(
            kubeopera_api_base_url=base_url,
            internal_service_token=env.get("INTERNAL_SERVICE_TOKEN", "").strip(),
            environment=get("ENVIRONMENT", defaults.environment),
            chart_ref=chart_ref,
            chart_version=chart_version,
            tenant_namespace=namespace,
            log_level=log_level,
            provision_timeout_seconds=_positive_int(
                env, "PROVISION_TIMEOUT_SECONDS", defaults.provision_timeout_seconds
            ),
            callback_timeout_seconds=float(
                _positive_int(env, "CALLBACK_TIMEOUT_SECONDS", int(defaults.callback_timeout_seconds))
            ),
            ready_poll_seconds=_poll(env, "READY_POLL_SECONDS", defaults.ready_poll_seconds),
            cleanup_poll_seconds=_poll(env, "CLEANUP_POLL_SECONDS", defaults.cleanup_poll_seconds),
            cleanup_stall_seconds=_positive_int(env, "CLEANUP_STALL_SECONDS", defaults.cleanup_stall_seconds),
            stuck_release_seconds=stuck,
            helm_deadline_seconds=deadline,
            validate_manifests=_bool(env, "HELM_VALIDATE_MANIFESTS"),
            orphan_grace_seconds=_positive_int(env, "ORPHAN_GRACE_SECONDS", defaults.orphan_grace_seconds),
            chart_cache_dir=Path(get("CHART_CACHE_DIR", str(defaults.chart_cache_dir))),
            helm_executable=get("HELM_EXECUTABLE", defaults.helm_executable),
            sink_url=get("K_SINK", defaults.sink_url),
            sink_token_file=Path(get("SINK_TOKEN_FILE", str(defaults.sink_token_file))),
            isolation=Isolation.from_env(env),
            service_cidr=service_range.parse(env.get("SERVICE_CIDR", "")),
            delete_retained_volumes=_bool(env, "DELETE_RETAINED_VOLUMES"),
            distro=_distro(env),
            external_server=_external_server(env),
            plans=_plans(env),
            rollout_max_parallel=_positive_int(env, "ROLLOUT_MAX_PARALLEL", defaults.rollout_max_parallel, "Tenants"),
            resync_tick_seconds=_positive_int(env, "RESYNC_TICK_SECONDS", defaults.resync_tick_seconds),
            vcluster_look_passes=_positive_int(env, "VCLUSTER_LOOK_PASSES", defaults.vcluster_look_passes, "passes"),
            **(_senders(env) if deliveries else {}),
        )


_EXTERNAL_FIELDS = frozenset({"tenant", "release", "namespace"})


def _external_server(env: Mapping[str, str]) -> str:
    """VCLUSTER_EXTERNAL_SERVER, refused unless it is an https:// address whose host is a DNS name
    once a Tenant's names are in it (so that it can be a certificate's name)."""
    template = env.get("VCLUSTER_EXTERNAL_SERVER", "").strip()
    if not template:
        return ""
    name = "VCLUSTER_EXTERNAL_SERVER"
    fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    if unknown := fields - _EXTERNAL_FIELDS:
        raise ConfigError(f"{name} may name only {{tenant}}, {{release}} and {{namespace}}, not {sorted(unknown)}")
    sample = template.format(tenant="t", release="vc-t", namespace="vcluster-t")
    url = urlparse(sample)
    host = url.hostname or ""
    is_ip = host.replace(".", "").isdigit() or ":" in host
    if url.scheme != "https" or is_ip or not _DNS_NAME.match(host) or url.path not in ("", "/"):
        raise ConfigError(f"{name} must be https://<host>[:port] with a DNS name as host, got {template!r}")
    return template.rstrip("/")


def _plans(env: Mapping[str, str]) -> Plans:
    """The plans of PLANS_DIR: each ``<plan>.yaml`` there (hidden entries, such as a ConfigMap
    volume's ``..data``, skipped). No folder at the default path (a function without the mount) is
    the empty default plan alone; a PLANS_DIR set to no folder is an error."""
    raw = env.get("PLANS_DIR", "").strip()
    folder = Path(raw) if raw else PLANS_DIR
    if not folder.is_dir():
        if raw:
            raise ConfigError(f"PLANS_DIR must be a folder of plans (<plan>.yaml each), got {raw!r}")
        return Plans()
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        name = entry.name.removesuffix(".yaml")
        if not entry.is_file() or not entry.name.endswith(".yaml") or not PLAN_NAME.match(name):
            raise ConfigError(
                f"PLANS_DIR {folder}: {entry.name!r} is not a plan: a plan is a file <plan>.yaml, "
                "<plan> a DNS label (lower case letters, digits, '-')"
            )
        try:
            values = yaml.safe_load(entry.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            raise ConfigError(f"plan {name} ({entry}): not a readable YAML file: {err}") from None
        found.append(Plan.parse(name, values))
    return Plans.of(found)


def _distro(env: Mapping[str, str]) -> str:
    value = env.get("VCLUSTER_DISTRO", "").strip().lower() or Settings.distro
    if value not in DISTROS:
        raise ConfigError(f"VCLUSTER_DISTRO must be one of {', '.join(DISTROS)}, got {value!r}")
    return value


def _bool(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in ("", "false", "0", "no"):
        return False
    if value in ("true", "1", "yes"):
        return True
    raise ConfigError(f"{name} must be true or false, got {value!r}")


_SENDER_IDENTITY_DEFAULT = "oidc"  # on unless SENDER_IDENTITY=off says otherwise
_SUBJECT = re.compile(r"^system:serviceaccount:[a-z0-9]([-a-z0-9]*[a-z0-9])?:[a-z0-9]([-.a-z0-9]*[a-z0-9])?$")


def _senders(env: Mapping[str, str]) -> dict[str, Any]:
    """The sender_* settings of SENDER_IDENTITY=oidc (the default); none for off."""
    mode = env.get("SENDER_IDENTITY", "").strip().lower() or _SENDER_IDENTITY_DEFAULT
    if mode == "off":
        return {}
    if mode != "oidc":
        raise ConfigError(f"SENDER_IDENTITY must be oidc or off, got {mode!r}")
    audience = env.get("SENDER_AUDIENCE", "").strip()
    subjects = frozenset(s.strip() for s in env.get("SENDER_SUBJECTS", "").split(",") if s.strip())
    if not audience or not subjects:
        raise ConfigError(
            "SENDER_IDENTITY=oidc (the default) needs SENDER_AUDIENCE (the audience of this function's Trigger) "
            "and SENDER_SUBJECTS (the identities allowed to deliver, comma-separated); set SENDER_IDENTITY=off "
            "only on a cluster without Knative's authentication-oidc feature"
        )
    for subject in subjects:
        if not _SUBJECT.match(subject):
            raise ConfigError(f"SENDER_SUBJECTS: {subject!r} is not system:serviceaccount:<namespace>:<name>")
    return {"sender_audience": audience, "sender_subjects": subjects}


def _positive_int(env: Mapping[str, str], name: str, default: int, unit: str = "seconds") -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number of {unit}, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}")
    return value


def _poll(env: Mapping[str, str], name: str, default: int) -> int:
    value = _positive_int(env, name, default)
    if value > RETRY_AFTER_MAX_SECONDS:
        raise ConfigError(
            f"{name} must be at most {RETRY_AFTER_MAX_SECONDS}, the Triggers' retryAfterMax, which caps every "
            f"Retry-After; got {value}"
        )
    return value
