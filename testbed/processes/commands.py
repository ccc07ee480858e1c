""":func:`run`: run a short command (kubectl, helm) to completion, not under a supervisor;
:func:`until_conditions_exist`: a ``kubectl wait`` that kubectl does not give up too early."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from testbed.processes.errors import ProcessError


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = 120.0,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a short command (kubectl, helm) to completion; raise ProcessError with its stderr."""
    args = [os.fspath(a) for a in argv]
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        result = subprocess.run(args, env=full_env, input=input, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise ProcessError(f"`{' '.join(args)}` did not finish within {timeout:.0f}s") from err
    if check and result.returncode != 0:
        raise ProcessError(f"`{' '.join(args)}` failed (exit {result.returncode}):\n{result.stderr.strip()[-4000:]}")
    return result


T = TypeVar("T")

# kubectl wait gives up at once, instead of waiting, on an object whose status.conditions is still
# null: a CRD just created, before the API server's controller has written its conditions.
NO_CONDITIONS_YET = ".status.conditions accessor error: <nil> is of the type <nil>"


def until_conditions_exist(wait: Callable[[], T], timeout: float = 60.0) -> T:
    """Run ``wait`` (a ``kubectl wait --for=condition=...``) again, five times a second for up to
    ``timeout`` seconds, while kubectl says an object has no conditions yet; what it returned or
    raised otherwise. ``wait`` raises ``ProcessError`` on failure, or returns kubectl's
    ``CompletedProcess`` when it is allowed to fail."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = wait()
        except ProcessError as err:
            if NO_CONDITIONS_YET not in str(err) or time.monotonic() > deadline:
                raise
        else:
            early = (
                isinstance(result, subprocess.CompletedProcess)
                and result.returncode != 0
                and NO_CONDITIONS_YET in str(result.stderr)
            )
            if not early or time.monotonic() > deadline:
                return result
        time.sleep(0.2)
