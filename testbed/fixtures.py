"""The test bed as a pytest plugin, loaded by the clone's ``conftest.py`` for ``tests/`` and
``testbed/tests/``: fixtures for its parts (real kube-apiserver + etcd, OCI registry with the
stand-in vcluster chart, the kubeopera-api stand-in) and the checks that keep it honest.

- ``toolchain`` (session): the built binaries (built on first use; a warm run builds nothing).
- ``testbed_supervisor`` (session): owns every long-running test bed process; its run folder
  holds their logs.
- ``control_plane`` / ``kube_admin_kubeconfig`` (session): one API server per test session.
- ``test_namespace`` (function): a fresh namespace per test, deleted afterwards (the namespace
  controller removes it and its content in the background; the fixture does not wait).
- ``registry`` / ``chart_ref`` (session): the local OCI registry and the pushed stand-in chart.
- ``helm_env`` (function): HELM_* variables pointing into the test's tmp folder, also set in
  ``os.environ`` (pyhelm3 passes the process environment on to helm).
- ``api_standin`` (function): a started kubeopera-api stand-in.

When a test fails, the tail of every test bed process log is added to its report. After the
session, any test bed process still alive fails the run.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import processes
from testbed.controlplane import ControlPlane, create_namespace, delete_namespace, start_control_plane
from testbed.processes import Supervisor
from testbed.project import CHART_DIR
from testbed.registry import Registry, push_chart, start_registry
from testbed.registry import helm_env as make_helm_env
from testbed.standins.kubeopera_api import ApiStandIn
from testbed.toolchain import Toolchain, ensure_all

LOG_TAIL_ON_FAILURE = 40


@pytest.fixture(scope="session")
def toolchain() -> Toolchain:
    return ensure_all()


@pytest.fixture(scope="session")
def testbed_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("testbed")


@pytest.fixture(scope="session")
def testbed_supervisor(testbed_run_dir: Path) -> Iterator[Supervisor]:
    with Supervisor(testbed_run_dir) as supervisor:
        yield supervisor


@pytest.fixture(scope="session")
def control_plane(
    toolchain: Toolchain, testbed_supervisor: Supervisor, testbed_run_dir: Path
) -> Iterator[ControlPlane]:
    with start_control_plane(toolchain, testbed_run_dir / "controlplane", supervisor=testbed_supervisor) as cp:
        yield cp


@pytest.fixture(scope="session")
def kube_admin_kubeconfig(control_plane: ControlPlane) -> Path:
    return control_plane.admin_kubeconfig


@pytest.fixture
def test_namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{secrets.token_hex(3)}"
    create_namespace(control_plane, name)
    yield name
    delete_namespace(control_plane, name)


@pytest.fixture(scope="session")
def registry(toolchain: Toolchain, testbed_supervisor: Supervisor, testbed_run_dir: Path) -> Iterator[Registry]:
    with start_registry(toolchain, testbed_run_dir / "registry", supervisor=testbed_supervisor) as reg:
        yield reg


@pytest.fixture(scope="session")
def chart_ref(toolchain: Toolchain, registry: Registry, testbed_run_dir: Path) -> str:
    return push_chart(toolchain, registry.url, CHART_DIR, testbed_run_dir / "chart-push")


@pytest.fixture
def helm_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = make_helm_env(tmp_path / "helm")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def api_standin() -> Iterator[ApiStandIn]:
    standin = ApiStandIn()
    standin.start()
    yield standin
    standin.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.failed:
        return
    for process in processes.all_processes():
        state = "running" if process.running() else f"exited {process.popen.returncode}"
        report.sections.append(
            (
                f"test bed log: {process.name} ({state}) {process.log_path}",
                process.log_tail(LOG_TAIL_ON_FAILURE),
            )
        )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    survivors = processes.surviving_processes()
    if not survivors:
        return
    names = ", ".join(f"{p.name} (pid {p.pid})" for p in survivors)
    processes.stop_everything()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"ERROR: test bed processes outlived the session: {names}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
