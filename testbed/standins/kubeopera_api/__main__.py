"""``python -m testbed.standins.kubeopera_api``: the stand-in as a process of its own."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from testbed.standins.kubeopera_api import MODES, ApiStandIn


def main(argv: list[str] | None = None) -> int:
    """Serve until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(description="kubeopera-api stand-in (records requests)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", choices=MODES, default="ok")
    parser.add_argument("--hang-seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    standin = ApiStandIn(args.host, args.port, hang_seconds=args.hang_seconds)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    url = standin.start()
    standin.set_mode(args.mode)
    print(f"kubeopera-api stand-in listening on {url}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        standin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
