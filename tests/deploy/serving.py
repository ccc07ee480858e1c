"""Stopping a started function process the way Kubernetes stops a pod: SIGTERM, then a wait."""

from __future__ import annotations

import signal
import subprocess


def stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM, up to 30 s for a clean exit (then kill it and raise); its exit code."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
