"""Readiness probes and the wait for them: :class:`Probe` (the protocol), :class:`HttpProbe`
(an HTTP(S) GET, with TLS options), :class:`LogProbe` (a line in the process's log) and
:func:`wait_ready`, which polls a probe until it passes or raises :class:`NotReadyError`."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import requests
import urllib3

from testbed.processes.errors import NotReadyError
from testbed.processes.managed import ManagedProcess

log = logging.getLogger(__name__)


class Probe(Protocol):
    """Readiness check, called repeatedly until it returns True."""

    def ready(self, process: ManagedProcess) -> bool: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class HttpProbe:
    """Ready when ``GET url`` answers with a status in ``ok_statuses``.

    ``ca_file`` verifies the server; ``client_cert``/``client_key`` authenticate; ``insecure``
    skips verification (only for a server whose CA we do not have).
    """

    url: str
    ca_file: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    insecure: bool = False
    ok_statuses: frozenset[int] = frozenset({200})
    request_timeout: float = 2.0
    headers: Mapping[str, str] = field(default_factory=dict)

    def ready(self, process: ManagedProcess) -> bool:
        verify: bool | str = False if self.insecure else (str(self.ca_file) if self.ca_file else True)
        cert = (str(self.client_cert), str(self.client_key)) if self.client_cert and self.client_key else None
        try:
            with warnings_silenced(), requests.Session() as session:
                session.trust_env = False  # never through an HTTP(S)_PROXY: we probe loopback
                response = session.get(
                    self.url, headers=dict(self.headers), verify=verify, cert=cert, timeout=self.request_timeout
                )
        except requests.RequestException:
            return False
        return response.status_code in self.ok_statuses

    def describe(self) -> str:
        return f"GET {self.url} answering {sorted(self.ok_statuses)}"


@dataclass(frozen=True)
class LogProbe:
    """Ready when ``predicate(log text)`` is true (e.g. a line the program prints once ready)."""

    predicate: Callable[[str], bool]
    description: str

    @classmethod
    def matching(cls, pattern: str) -> LogProbe:
        """Ready once the log contains a match for the regular expression ``pattern``."""
        compiled = re.compile(pattern, re.MULTILINE)
        return cls(predicate=lambda text: compiled.search(text) is not None, description=f"log /{pattern}/")

    def ready(self, process: ManagedProcess) -> bool:
        return self.predicate(process.log_text())

    def describe(self) -> str:
        return self.description


@contextlib.contextmanager
def warnings_silenced() -> Iterator[None]:
    """Silence urllib3's InsecureRequestWarning for probes that skip verification."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
        yield


def wait_ready(process: ManagedProcess, probe: Probe, timeout: float) -> None:
    """Poll ``probe`` until it passes; raise NotReadyError if the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        code = process.poll()
        if code is not None:
            raise NotReadyError(
                f"{process.name} exited with code {code} before it was ready ({probe.describe()}); "
                f"last lines of {process.log_path}:\n{process.log_tail()}"
            )
        if probe.ready(process):
            log.info("%s ready after %.1fs", process.name, time.monotonic() - process.started_at)
            return
        if time.monotonic() > deadline:
            raise NotReadyError(
                f"{process.name} was not ready after {timeout:.0f}s ({probe.describe()}); "
                f"last lines of {process.log_path}:\n{process.log_tail()}"
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
