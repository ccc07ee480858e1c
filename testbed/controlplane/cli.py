"""Start a control plane by hand, print where it is as JSON and run until Ctrl-C or SIGTERM.

:func:`main` is what ``python -m testbed.controlplane`` runs (see ``__main__.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from testbed.controlplane.startup import start_control_plane
from testbed.processes import Supervisor, Terminated
from testbed.toolchain import ensure_all


def main(argv: list[str] | None = None) -> int:
    """Start a control plane, print where it is as JSON, run until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workdir", type=Path, default=None, help="run folder (default: a new temp folder)")
    args = parser.parse_args(argv)
    # Ctrl-C must work even when started with SIGINT ignored (e.g. as a background job).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kubeopera-controlplane-"))
    tools = ensure_all()
    started = time.monotonic()
    try:
        with Supervisor(workdir) as sup, start_control_plane(tools, workdir, supervisor=sup) as cp:
            info = {
                "url": cp.url,
                "kubeconfig": str(cp.admin_kubeconfig),
                "run_dir": str(cp.run_dir),
                "logs": str(sup.log_dir),
                "pids": {p.name: p.pid for p in sup.processes},
                "seconds": round(time.monotonic() - started, 1),
            }
            print(json.dumps(info), flush=True)
            while all(p.running() for p in sup.processes):
                time.sleep(0.5)
            print("a control plane process exited; stopping", file=sys.stderr)
            return 1
    except KeyboardInterrupt as interrupt:
        return 128 + (interrupt.signum if isinstance(interrupt, Terminated) else signal.SIGINT)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
