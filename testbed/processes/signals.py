"""SIGTERM and SIGHUP as :class:`Terminated`, a KeyboardInterrupt, so the same clean-up as for
Ctrl-C runs (``with`` blocks unwind, supervisors stop their children)."""

from __future__ import annotations

import signal
import threading
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived. A KeyboardInterrupt, so that everything (pytest included)
    treats it like Ctrl-C: stop now, unwind, clean up. ``signum`` says which signal it was."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def install_signal_handlers() -> None:
    """Turn SIGTERM and SIGHUP into :class:`Terminated` (so ``with`` blocks clean up).

    Only from the main thread, and only where the default action (die at once, skipping all
    clean-up) is in place. Ctrl-C already raises KeyboardInterrupt.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _raise_terminated)
