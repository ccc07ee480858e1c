"""The one adapter to helm (the only module that imports ``pyhelm3``).

pyhelm3 drives the helm CLI (design.md section 5). What this module adds:

- **A chart cache.** Helm 3 re-downloads an OCI chart on every install; we pull the pinned
  chart version once per process into ``CHART_CACHE_DIR`` and install from that folder. pyhelm3
  pulls into a new folder and removes it only after a pull that worked; its pulls go to
  ``CHART_CACHE_DIR/.pulls/<pid>``, emptied before each try, so a registry that refuses for a day
  (every delivery tries again) leaves one folder, not one in ``$TMPDIR`` per try.
- **No needless revisions, and no helm process to find that out.** ``install_or_upgrade`` reads
  the release as helm's record holds it (``shared.adapters.release.CurrentReleases``: one LIST of
  its Secrets with their data, decoded here in Python) instead of ``helm status``, ``helm get
  values`` and ``helm get metadata``, and returns the current revision when the values and chart
  are those asked for, so a re-delivered event runs no helm process and makes no new revision; a
  new release costs one helm process (``upgrade --install``). ``uninstall`` reads the record so too,
  and ``release`` is the record's state.
- **One helm operation per release at a time** is the caller's: install and cleanup hold
  ``shared.steps.locks.work_lock`` of the release's namespace (one thread lock in a process, then a
  Lease beside the Tenants across processes); helm's own pending states refuse a second
  operation anyway.
- **Stuck releases recovered.** A helm process killed mid-operation leaves the release
  ``pending-install``, ``pending-upgrade`` or ``pending-rollback`` for ever, and helm refuses every
  later operation on it (design.md section 5). One whose last update is older than
  ``stuck_after`` seconds is recovered before the new operation: a pending install is uninstalled
  (and installed again), a pending upgrade or rollback is rolled back to the revision before it
  (and upgraded again), and the record is read again. A younger one is "another operation in
  progress": temporary.
- **A deadline.** Every helm process runs under coreutils' ``timeout``: TERM after ``deadline``
  seconds, KILL ``HELM_KILL_AFTER_SECONDS`` later (a wrapper script, since pyhelm3 takes one
  executable path; cancelling pyhelm3's call would stop only its shell, design.md section 5). A
  helm stopped so is a temporary error; the release it may leave pending is recovered as a stuck
  one, and ``stuck_after`` is above the longest a helm can live.
- **Manifests checked once, not per Tenant.** helm's client-side check of every rendered object
  against the cluster's OpenAPI schema (helm's default) downloads and parses the schema in every
  helm process: 60% of a ``helm upgrade``'s CPU here (240 of 390 ms), for the same chart rendered
  with values the chart's ``values.schema.json`` checks either way (a plan's at install's start,
  every release's by helm), into objects the API server validates when they are made (a wrong
  type or a missing field is refused there; an unknown field is dropped with a warning). So
  ``upgrade`` runs with ``--disable-openapi-validation`` unless ``validate_manifests``
  (``HELM_VALIDATE_MANIFESTS=true``). pyhelm3's own flag for it cannot be used: 0.5.8 extends the
  command with the flag's letters one by one; ``_Command`` adds it.
- **Errors by kind.** A schema or render failure, a missing chart and an object in the way that
  helm will not adopt (it exists without this release's ownership labels: only a person can
  decide what it is) are permanent; a connection failure, a release busy in another operation, a
  helm stopped at its deadline and anything unknown are temporary.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import shutil
import tarfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pyhelm3
from pyhelm3 import errors as helm_errors

from shared.adapters.release import CurrentRelease, CurrentReleases
from shared.errors import Forbidden, PermanentError, TemporaryError, WorkInHand
from shared.model.release import Action, ReleaseState, plan
from shared.observability import metrics, timing, tracing
from shared.settings import HELM_KILL_AFTER_SECONDS

log = logging.getLogger(__name__)
T = TypeVar("T")
# Sees a release's current values (None: no release) and raises to refuse touching it.
Guard = Callable[[Mapping[str, Any] | None], None] | None
# The values to apply, given those asked for and the release's current ones (None: no release).
Keep = Callable[[Mapping[str, Any], Mapping[str, Any] | None], Mapping[str, Any]] | None


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


# What coreutils' ``timeout --verbose`` writes to stderr when it stops its command at the deadline
# (its exit status alone, 124 or 137, cannot tell that from a helm killed by something else).
STOPPED_AT_DEADLINE = b"timeout: sending signal "


class _Command(pyhelm3.Command):  # type: ignore[misc]  # pyhelm3 has no types
    """pyhelm3's command runner, with ``--disable-openapi-validation`` on ``helm upgrade`` unless
    ``validate_manifests`` (see the module's docstring)."""

    def __init__(self, validate_manifests: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._validate_manifests = validate_manifests

    async def run(self, command: list[str], input: bytes | None = None) -> bytes:
        if command[:1] == ["upgrade"] and not self._validate_manifests:
            command = [*command, "--disable-openapi-validation"]
        result: bytes = await super().run(command, input)
        return result


def deadline_wrapper(executable: str, deadline: float, folder: Path) -> Path:
    """An executable in ``folder`` that runs ``executable`` with its arguments under ``timeout``
    (written whole, then renamed into place: processes that share the folder never run half a file)."""
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "helm-with-deadline"
    staging = folder / f".helm-with-deadline.{os.getpid()}"
    staging.write_text(
        "#!/bin/sh\n"
        "# helm, stopped at its deadline: TERM, then KILL (shared/adapters/helm.py)\n"
        f"exec timeout --verbose --kill-after={HELM_KILL_AFTER_SECONDS} {deadline:g} "
        f'{shlex.quote(executable)} "$@"\n'
    )
    staging.chmod(0o755)
    staging.replace(wrapper)
    return wrapper


# helm's words for an object of the chart's that exists without this release's ownership metadata
# (pkg/action/validate.go, existingResourceConflict): retrying cannot change that.
NOT_ADOPTABLE = "cannot be imported into the current release"


def _classify(what: str, err: helm_errors.Error) -> Exception:
    text = (err.stderr or b"").decode(errors="replace").strip()
    detail = text.splitlines()[-1] if text else type(err).__name__
    if STOPPED_AT_DEADLINE in (err.stderr or b""):
        return TemporaryError(
            f"{what}: helm did not finish within HELM_DEADLINE_SECONDS and was stopped ({detail}); "
            "a release it left pending is recovered after STUCK_RELEASE_SECONDS",
            retry_after=5,
        )
    if "values don't meet the specifications of the schema" in text or isinstance(
        err, helm_errors.FailedToRenderChartError
    ):
        return PermanentError(f"{what}: the chart rejected the values: {detail}")
    if isinstance(err, helm_errors.ChartNotFoundError):
        return PermanentError(f"{what}: chart not found: {detail}")
    if NOT_ADOPTABLE in text:
        return PermanentError(
            f"{what}: an object of the chart's is already there and is not this release's ({detail}); "
            "remove it, then retry the Tenant"
        )
    if "another operation (install/upgrade/rollback) is in progress" in text:
        return TemporaryError(f"{what}: another helm operation is in progress on the release", retry_after=5)
    return TemporaryError(f"{what}: helm failed: {detail}", retry_after=5)


class Helm:
    """Install, inspect and remove vCluster releases with one pinned chart."""

    def __init__(
        self,
        chart_ref: str,
        chart_version: str,
        chart_cache_dir: Path,
        *,
        records: CurrentReleases,
        executable: str = "helm",
        kubeconfig: Path | None = None,
        stuck_after: float = 180.0,
        deadline: float | None = None,
        validate_manifests: bool = False,
    ) -> None:
        self._chart_ref = chart_ref
        self._stuck_after = stuck_after
        self._chart_version = chart_version
        self._cache_dir = chart_cache_dir
        if deadline is not None:
            executable = str(deadline_wrapper(executable, deadline, chart_cache_dir.parent / "bin"))
        self._records = records
        self._pulls = chart_cache_dir / ".pulls" / str(os.getpid())
        self._command = _Command(
            validate_manifests,
            executable=executable,
            kubeconfig=kubeconfig,
            default_timeout="5m",
            unpack_directory=str(self._pulls),
        )
        self._client = pyhelm3.Client(self._command, executable=executable)
        self._chart: Any = None
        self._chart_lock = threading.Lock()

    def chart(self) -> Any:
        """The pinned chart, pulled once into the cache folder (thread-safe)."""
        with self._chart_lock:
            if self._chart is None:
                pinned = {"helm.chart": self._chart_ref, "helm.chart_version": self._chart_version}
                with _operation("pull", pinned) as outcome:
                    self._chart = _run(self._load_chart())
                    outcome.append("loaded")
            return self._chart

    def values_schema(self) -> Mapping[str, Any] | None:
        """The pinned chart's ``values.schema.json`` (None: the chart has none), read from the chart
        as pulled (``chart()``): a chart folder, or a packaged chart given by path."""
        where = Path(str(self.chart().ref))
        try:
            if where.is_dir():
                found = where / "values.schema.json"
                return _json_map(found.read_bytes()) if found.is_file() else None
            with tarfile.open(where) as archive:  # a packaged chart: <name>/values.schema.json
                names = (m for m in archive.getmembers() if m.name.count("/") == 1)
                member = next((m for m in names if m.name.endswith("/values.schema.json")), None)
                data = archive.extractfile(member) if member is not None else None
                return _json_map(data.read()) if data is not None else None
        except (OSError, tarfile.TarError, ValueError) as err:
            raise PermanentError(f"the chart's values.schema.json ({where}) cannot be read: {err}") from None

    async def _load_chart(self) -> Any:
        if self._chart_ref.startswith("/"):
            return await self._client.get_chart(Path(self._chart_ref))
        name = self._chart_ref.rstrip("/").rsplit("/", 1)[-1]
        local = self._cache_dir / f"{name}-{self._chart_version}"
        cached = (local / "Chart.yaml").is_file()
        metrics.CHART_LOADS.labels("cache" if cached else "registry").inc()
        if not cached:
            self._cache_dir.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(self._pulls, ignore_errors=True)  # what a failed try left (see the module)
            self._pulls.mkdir(parents=True)
            try:
                async with self._client.pull_chart(self._chart_ref, version=self._chart_version) as pulled:
                    staging = self._cache_dir / f".{local.name}.partial"
                    shutil.rmtree(staging, ignore_errors=True)
                    shutil.copytree(Path(pulled.ref), staging)
                    shutil.rmtree(local, ignore_errors=True)
                    staging.rename(local)
            except helm_errors.Error as err:
                what = f"pull {self._chart_ref}:{self._chart_version}"
                if (err.stderr or b"").rstrip().endswith(b"not found"):
                    raise PermanentError(f"{what}: chart version not found in the registry") from None
                raise _classify(what, err) from None
            log.info("chart pulled", extra={"chart": self._chart_ref, "version": self._chart_version})
        return await self._client.get_chart(local)

    def release(self, name: str, namespace: str) -> ReleaseState | None:
        """The release's current revision and status, as ``helm status`` gives them, from helm's
        record (no helm process); None if there is none."""
        found = self._current(name, namespace)
        return None if found is None else found.state

    def _current(self, name: str, namespace: str) -> CurrentRelease | None:
        """The current revision and its user-supplied values from helm's record, or None if there
        is no release. A refusal to read the record is temporary, as a helm that failed to read it
        was (cleanup reads through install's grant, which may not be in force yet)."""
        try:
            return self._records.current(name, namespace)
        except Forbidden as err:
            raise TemporaryError(f"read helm's record of release {namespace}/{name}: {err}", retry_after=5) from None

    def _recover(self, state: ReleaseState, how: Action) -> CurrentRelease | None:
        """Make a stuck release workable again (``how``: the plan's recovery), the one helm process
        it takes; returns the release as read again from its record."""
        log.warning(
            "recovering a stuck release",
            extra={
                "release": state.name,
                "namespace": state.namespace,
                "status": state.status,
                "revision": state.revision,
                "how": how.value,
            },
        )
        if how is Action.UNINSTALL_STUCK:
            _run(self._client.uninstall_release(state.name, namespace=state.namespace, wait=False))
        else:  # to the revision before it (helm rollback with no revision)
            _run(self._command.rollback(state.name, None, namespace=state.namespace, wait=False))
        return self._current(state.name, state.namespace)

    def _plan(
        self, found: CurrentRelease | None, values: Mapping[str, Any], reapply: Callable[[], bool] | None
    ) -> Action:
        """Plan from the release ``found`` (asking whether to re-apply only when it is not pending)."""
        now = datetime.now(UTC)
        if found is None:
            return plan(None, None, None, values, self._chart_version, now, self._stuck_after)
        state = found.state
        again = reapply is not None and not state.pending and reapply()
        chart = state.chart_version
        return plan(state, found.values, chart, values, self._chart_version, now, self._stuck_after, again)

    def install_or_upgrade(
        self,
        name: str,
        namespace: str,
        values: Mapping[str, Any],
        guard: Guard = None,
        *,
        reapply: Callable[[], bool] | None = None,
        keep: Keep = None,
    ) -> ReleaseState:
        """Make the release run the pinned chart with ``values``; no new revision if it already does,
        unless ``reapply()`` says so (asked under the caller's release lock, after any other operation
        on the release has finished): then it is upgraded anyway, and helm makes again what was deleted.

        ``guard`` sees the values of the release as it is (None: there is none) before anything
        is changed, and raises to refuse (the ownership check); it runs under the caller's release lock.
        ``keep(values, current)`` then returns the values to apply, keeping what a running release
        must keep (its distro, ``shared.model.values.keep_distro``).
        """
        with _operation("upgrade_install", _release_attributes(name, namespace)) as outcome:
            what = f"helm upgrade --install {namespace}/{name}"
            try:
                found = self._current(name, namespace)
                if guard is not None:
                    guard(None if found is None else found.values)
                if keep is not None:
                    values = keep(values, None if found is None else found.values)
                action = self._plan(found, values, reapply)
                if action in (Action.UNINSTALL_STUCK, Action.ROLL_BACK_STUCK) and found is not None:
                    found = self._recover(found.state, action)
                    action = self._plan(found, values, reapply)
                state = None if found is None else found.state
                if action is Action.WAIT and state is not None:
                    # In hand, not failed: a helm operation on the release is under way (or died
                    # young, and is recovered once stuck). If the broker gives up on this delivery
                    # first, dead-letter does not fail the Tenant for it; the provision timeout
                    # and resync's re-drive still bound it.
                    raise WorkInHand(
                        f"release {namespace}/{name} is {state.status}: another helm operation is in progress",
                        retry_after=5,
                    )
                if action is Action.NOTHING and state is not None:
                    outcome.append("unchanged")
                    return state
                chart = self.chart()
                revision = _run(
                    self._client.install_or_upgrade_release(
                        name, chart, dict(values), namespace=namespace, create_namespace=False, wait=False
                    )
                )
            except helm_errors.Error as err:
                raise _classify(what, err) from None
            state = replace(_state(name, namespace, revision), chart_version=self._chart_version)
            outcome.append("installed" if found is None else "upgraded")
            tracing.annotate(revision=str(state.revision))
            log.info(
                "release installed",
                extra={"release": name, "namespace": namespace, "revision": state.revision, "status": state.status},
            )
            return state

    def uninstall(self, name: str, namespace: str, guard: Guard = None) -> bool:
        """``helm uninstall`` (without waiting); False if there was no release. ``guard`` as for
        ``install_or_upgrade``: it sees the current values and may refuse."""
        with _operation("uninstall", _release_attributes(name, namespace)) as outcome:
            try:
                found = self._current(name, namespace)
                if found is None:
                    outcome.append("absent")
                    return False
                if guard is not None:
                    guard(found.values)
                _run(self._client.uninstall_release(name, namespace=namespace, wait=False))
            except helm_errors.ReleaseNotFoundError:
                outcome.append("absent")
                return False
            except helm_errors.Error as err:
                raise _classify(f"helm uninstall {namespace}/{name}", err) from None
            outcome.append("uninstalled")
            log.info("release uninstalled", extra={"release": name, "namespace": namespace})
            return True


def _json_map(data: bytes) -> Mapping[str, Any]:
    schema = json.loads(data)
    if not isinstance(schema, Mapping):
        raise ValueError("not a JSON object")
    return schema


@contextmanager
def _operation(operation: str, attributes: Mapping[str, str]) -> Iterator[list[str]]:
    """One helm operation: a span ``helm <operation>``, and its count and duration by outcome.
    The block appends its outcome to the list it gets; leaving by an exception is ``error``."""
    started = time.monotonic()
    outcome: list[str] = []
    with timing.helm(), tracing.span(f"helm {operation.replace('_', ' --')}", attributes) as span:
        try:
            yield outcome
        except BaseException:
            outcome[:] = ["error"]
            raise
        finally:
            result = outcome[-1] if outcome else "error"
            span.set_attribute("helm.outcome", result)
            metrics.HELM_OPERATIONS.labels(operation, result).inc()
            metrics.HELM_SECONDS.labels(operation).observe(time.monotonic() - started)


def _release_attributes(name: str, namespace: str) -> dict[str, str]:
    return {"helm.release": name, "helm.namespace": namespace}


def _state(name: str, namespace: str, revision: Any) -> ReleaseState:
    """The state a pyhelm3 revision gives (what ``upgrade --install -o json`` printed)."""
    meta = revision.chart_metadata_  # present after install/upgrade
    updated = revision.updated if isinstance(revision.updated, datetime) else None
    return ReleaseState(
        name=name,
        namespace=namespace,
        revision=int(revision.revision),
        status=str(revision.status.value),
        chart_version=str(meta.version) if meta is not None else "",
        updated=updated if updated is None or updated.tzinfo else updated.replace(tzinfo=UTC),
    )
