"""Running the short commands the image builds need (pip, ldd, ctr): always with a timeout.

A command that hangs (``ctr`` against a socket nobody listens on waits forever) is killed when
its time is up and reported as a :class:`~testbed.images.errors.CommandError`, as is one that
fails; the error carries the end of its stderr.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from testbed.images.errors import CommandError

STDERR_TAIL = 4000


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    check: bool = True,
) -> str:
    """Run ``argv`` to completion within ``timeout`` seconds; return its stdout. A non-zero exit
    is an error unless ``check`` is false."""
    args = [os.fspath(a) for a in argv]
    try:
        result = subprocess.run(
            args,
            env=None if env is None else dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as err:
        raise CommandError(f"`{' '.join(args)}` did not finish within {timeout:.0f}s (killed)") from err
    except OSError as err:
        raise CommandError(f"`{' '.join(args)}` could not start: {err}") from err
    if check and result.returncode != 0:
        stderr = result.stderr.strip()[-STDERR_TAIL:]
        raise CommandError(f"`{' '.join(args)}` failed (exit {result.returncode}):\n{stderr}")
    return result.stdout
