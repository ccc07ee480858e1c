"""A tarball of testbed.images imports into a real containerd with ``ctr`` and is listed under its
reference; ``ctr`` against a socket nobody serves fails in seconds instead of hanging.

The containerd is the test's own: Debian's /usr/bin/containerd with its root, state, sockets and
``opt`` folder in temporary folders, and its CRI plugin disabled (so it needs no CNI and touches
nothing of a node that may be running on this machine). It is stopped by its pid afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import toolchain
from testbed.images import (
    PAUSE,
    CommandError,
    build_binary_image,
    image_digests,
    image_refs,
    import_images,
    read_index,
    wait_for_containerd,
)

pytestmark = pytest.mark.integration

CONTAINERD = shutil.which("containerd")
CTR = shutil.which("ctr")


def _config(state: Path, data: Path) -> str:
    return f"""\
version = 2
root = "{data / "root"}"
state = "{state / "state"}"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "{state / "containerd.sock"}"

[ttrpc]
  address = "{state / "containerd.sock.ttrpc"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{data / "opt"}"
"""


@pytest.fixture
def containerd_socket(tmp_path: Path) -> Iterator[Path]:
    """A containerd of the test's own; its socket."""
    if CONTAINERD is None or CTR is None:
        pytest.skip("containerd or ctr is not installed (Debian: apt-get install containerd)")
    if os.geteuid() != 0:
        pytest.skip("containerd needs root")
    # A unix socket's path has at most 107 bytes: the sockets go into a short folder of their own.
    state = Path(tempfile.mkdtemp(prefix="ctd-", dir="/tmp"))
    config = tmp_path / "config.toml"
    config.write_text(_config(state, tmp_path))
    socket = state / "containerd.sock"
    log_path = tmp_path / "containerd.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([CONTAINERD, "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            wait_for_containerd(CTR, socket, timeout=30)
        except CommandError:
            pytest.fail(f"containerd did not answer:\n{log_path.read_text(errors='replace')[-4000:]}")
        yield socket
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(state, ignore_errors=True)


def test_pause_image_imports_and_is_listed(containerd_socket: Path, tmp_path: Path) -> None:
    assert CTR is not None
    tarball = build_binary_image(PAUSE, toolchain.ensure("pause") / "pause", tmp_path / "images")
    assert PAUSE.ref not in image_refs(CTR, containerd_socket)
    assert import_images(CTR, containerd_socket, [tarball]) == [PAUSE.ref]
    assert PAUSE.ref in image_refs(CTR, containerd_socket)
    assert image_digests(CTR, containerd_socket)[PAUSE.ref] == read_index(tarball).manifest_digest
    assert image_refs(CTR, containerd_socket, namespace="default") == [], "only the CRI's namespace has it"
    assert import_images(CTR, containerd_socket, [tarball]) == [], "already there: not imported again"
    assert import_images(CTR, containerd_socket, [tarball], skip_present=False) == [PAUSE.ref]
    assert image_refs(CTR, containerd_socket).count(PAUSE.ref) == 1


def test_ctr_against_a_missing_socket_fails_fast(tmp_path: Path) -> None:
    if CTR is None:
        pytest.skip("ctr is not installed (Debian: apt-get install containerd)")
    started = time.monotonic()
    with pytest.raises(CommandError, match="nobody.sock"):
        image_refs(CTR, tmp_path / "nobody.sock")
    assert time.monotonic() - started < 20
