"""The node's preflight names what the machine lacks, and the Debian packages that bring it."""

from __future__ import annotations

import pytest

from testbed.node import preflight


def test_missing_commands_are_named_with_the_packages_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight.shutil, "which", lambda name: None if name in ("containerd", "runc") else name)
    monkeypatch.setattr(preflight.os, "geteuid", lambda: 0)
    problems = preflight.missing()
    lacking = next(p for p in problems if p.startswith("missing"))
    assert "containerd" in lacking and "runc" in lacking
    assert "containerd runc containernetworking-plugins iptables" in lacking


def test_without_root_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight.os, "geteuid", lambda: 1000)
    assert any("needs root" in p for p in preflight.missing())


def test_check_refuses_with_every_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "missing", lambda: ["the node needs root", "missing runc"])
    monkeypatch.setattr(preflight, "port_is_free", lambda port, host: True)
    with pytest.raises(preflight.NodeError) as refused:
        preflight.check()
    assert "needs root" in str(refused.value) and "missing runc" in str(refused.value)
