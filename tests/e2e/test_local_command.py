"""``kubeopera-tenants local``, started the way the README starts it (the installed console script
that ``make run`` calls), as a subprocess: the example Tenant reaches Ready, the admin kubeconfig
is written to ``--kubeconfig-out``, more Tenants created with kubectl reach Ready, callbacks go
to ``--kubeopera-api-url`` with the bearer token, and SIGINT stops everything it started.

This is the one test whose stack runs the resync PingSource's real schedule (``mtping`` ticks on
the wall clock's 5-minute marks, as on a cluster; every other stack holds it): a tick may come at
any moment of it, and nothing here depends on whether one does (a tick re-drives nothing of two
Ready Tenants whose callbacks were delivered)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from testbed.standins.kubeopera_api import ApiStandIn
from testbed.toolchain import ensure_all

pytestmark = pytest.mark.integration

COMMAND = Path(sys.executable).with_name("kubeopera-tenants")


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class Output:
    """Collects the runner's stdout in a thread so the test can wait for lines."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._proc = proc
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self._proc.poll() is not None:
                raise AssertionError(f"runner exited {self._proc.returncode}:\n{''.join(self.lines)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} after {timeout:.0f}s:\n{''.join(self.lines)}")
            time.sleep(0.2)


def test_local_runs_the_pipeline_and_stops_clean_on_sigint(tmp_path: Path) -> None:
    assert COMMAND.exists(), "the console script comes with the runtime (pip install -e .), `local` with ./testbed"
    kubectl = ensure_all().kubectl
    kubeconfig = tmp_path / "admin.kubeconfig"
    receiver = ApiStandIn()
    receiver.start()
    env = dict(os.environ, INTERNAL_SERVICE_TOKEN="runner-token", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [
            str(COMMAND),
            "local",
            "--kubeconfig-out",
            str(kubeconfig),
            "--vcluster-boot-seconds",
            "2",
            "--kubeopera-api-url",
            receiver.url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    output = Output(proc)
    try:
        output.wait_for("alice-default is Ready", timeout=600)
        assert kubeconfig.is_file()
        # The live view shows Knative's broker at work: each function's delivery and its answer
        # (a delivery shows once its answer went back, so notify-api's may follow Ready).
        output.wait_for("alice-default: notify-api <- io.kubeopera.tenant.kubeconfig.stored: 204", timeout=30)
        assert any("alice-default: check-ready <- io.kubeopera.tenant.provisioning: " in line for line in output.lines)
        run_dir = next(line for line in output.lines if "logs are in" in line).split("logs are in ")[1].strip()
        run_dir = str(Path(run_dir).parent)
        assert Path(run_dir).is_dir()

        tenant = {
            "apiVersion": "kubeopera.io/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": "erin-extra", "namespace": "kubeopera-system"},
            "spec": {
                "userID": "6b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e6f",
                "tenantName": "erin-extra",
                "cloudSpaceID": "7b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e6f",
                "quota": {"cpu": "1", "memory": "1Gi"},
            },
        }
        subprocess.run(
            [str(kubectl), f"--kubeconfig={kubeconfig}", "apply", "-f", "-"],
            input=yaml.safe_dump(tenant),
            text=True,
            check=True,
            capture_output=True,
        )
        output.wait_for("erin-extra is Ready", timeout=120)
        printed = subprocess.run(
            [str(kubectl), f"--kubeconfig={kubeconfig}", "get", "kt", "-n", "kubeopera-system"],
            text=True,
            check=True,
            capture_output=True,
        ).stdout
        assert "alice-default" in printed and "erin-extra" in printed

        patches = receiver.wait_for_requests(2, timeout=10)
        assert {p.path for p in patches} == {
            "/api/v1/cloudspaces/7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b",
            "/api/v1/cloudspaces/7b0e7a52-8a41-4d3e-9a7e-1f2b3c4d5e6f",
        }
        assert all(p.method == "PATCH" and p.header("authorization") == "Bearer runner-token" for p in patches)
        assert json.loads(patches[0].body)["status"] == "active"

        started = descendants(proc.pid)
        commands = [cmdline(pid) for pid in started]
        assert any(b"mtping" in command for command in commands), "the PingSource's schedule runs, as on a cluster"
        # etcd, kube-apiserver, kube-controller-manager, registry, 6 Knative processes, 7 functions,
        # the vCluster stand-in, the ApiServerSource and PingSource adapters
        assert len(started) >= 19, started
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        output.wait_for("stopped; everything it started is gone.", timeout=5)
        assert [pid for pid in started if alive(pid)] == []
        assert not Path(run_dir).exists()
    finally:
        if proc.poll() is None:  # the test failed midway: stop it the way Ctrl-C would, so nothing stays
            left = descendants(proc.pid)
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for pid in left:
                if alive(pid):
                    with contextlib.suppress(OSError):
                        os.killpg(pid, signal.SIGKILL)  # each process leads its own group
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
        receiver.stop()


def help_options(text: str) -> set[str]:
    """The options a help text names, each as a whole token (``--kubeconfig-out`` is not ``--kubeconfig``)."""
    return set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", text))


def test_help_documents_the_options() -> None:
    """``local`` is added to the operator's command by the test bed's entry point, beside the
    runtime's ``status`` and ``retry``; its help names each of its options, and no ``--kubeconfig``
    (it starts its own cluster, see docs/design-notes.md)."""
    top = subprocess.run([str(COMMAND), "--help"], text=True, capture_output=True, check=True)
    commands = re.search(r"\{([\w,-]+)\}", top.stdout)
    assert commands is not None, top.stdout
    assert {"status", "retry", "local"} <= set(commands[1].split(",")), top.stdout

    result = subprocess.run([str(COMMAND), "local", "--help"], text=True, capture_output=True, check=True)
    options = help_options(result.stdout)
    for option in (
        "--kubeconfig-out",
        "--kubeopera-api-url",
        "--no-example",
        "--vcluster-boot-seconds",
    ):
        assert option in options, result.stdout
    assert "--kubeconfig" not in options, result.stdout
