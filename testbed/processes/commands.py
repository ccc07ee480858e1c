""":func:`run`: run a short command (kubectl, helm) to completion, not under a supervisor."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

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
