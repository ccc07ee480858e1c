"""``python -m testbed.toolchain [--with-checker] [--cluster]``: build everything, print versions and paths as JSON.

With ``--with-checker`` it also builds (or finds) ``knative-check``; with ``--cluster``, the cluster
tier's tools too (``ensure_cluster``). The JSON goes to stdout, the
progress lines and how long it took to stderr; exit 1 with the reason when a tool cannot be built.
"""

from __future__ import annotations

import json
import sys
import time

from testbed.toolchain.cache import cache_root
from testbed.toolchain.errors import ToolchainError
from testbed.toolchain.provision import ensure_all, ensure_cluster, knative_check
from testbed.toolchain.versions import VERSIONS


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    started = time.monotonic()
    try:
        tools = ensure_all()
        extra = {"knative-check": str(knative_check())} if "--with-checker" in args else {}
        if "--cluster" in args:
            cluster = ensure_cluster()
            extra |= {k: str(v) for k, v in vars(cluster).items() if k != "base"}
    except ToolchainError as err:
        print(f"toolchain: {err}", file=sys.stderr)
        return 1
    paths = {k: str(v) for k, v in vars(tools).items()} | extra
    print(json.dumps({"versions": dict(VERSIONS), "paths": paths, "cache": str(cache_root())}, indent=2))
    print(f"toolchain: ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 0
