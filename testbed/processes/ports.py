"""Loopback TCP ports for test bed processes: :func:`free_port` hands out each port once per
interpreter (never one of :data:`RESERVED_PORTS`), :func:`port_is_free` checks one."""

from __future__ import annotations

import errno
import socket
import threading

from testbed.processes.errors import ProcessError

# Ports the test bed never hands out: the Knative adapter's fixed health port, its profiling
# port and the usual metrics port.
RESERVED_PORTS = frozenset({8080, 8008, 9090})

_handed_out: set[int] = set()
_port_lock = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and was not handed out before in this process."""
    with _port_lock:
        for _ in range(200):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in RESERVED_PORTS and port not in _handed_out:
                _handed_out.add(port)
                return port
    raise ProcessError("could not find a free port on 127.0.0.1")


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` (we can bind it ourselves)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return False
            raise
    return True
