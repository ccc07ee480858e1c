"""The node's preflight names what the machine lacks, and the Debian packages that bring it."""

from __future__ import annotations

import subprocess

import pytest

from testbed.node import policy, preflight


def test_missing_commands_are_named_with_the_packages_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight.shutil, "which", lambda name: None if name in ("containerd", "runc") else name)
    monkeypatch.setattr(preflight.os, "geteuid", lambda: 0)
    monkeypatch.setattr(preflight.policy, "missing", lambda: [])
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


def test_the_policy_engine_without_ipset_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy.shutil, "which", lambda name: None if name == "ipset" else name)
    assert policy.missing() == ["missing ipset (the NetworkPolicy engine's sets): install the Debian package `ipset`"]


def test_a_kernel_without_the_engines_sets_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = subprocess.CompletedProcess(
        ["unshare"], 1, "", "ipset v7.17: Kernel error received: set type not supported"
    )
    monkeypatch.setattr(policy.shutil, "which", lambda name: name)
    monkeypatch.setattr(policy, "_in_private_netns", lambda script: refused)
    [problem] = policy.missing()
    assert "kernel lacks" in problem and "set type not supported" in problem


def test_preflight_includes_the_policy_engines_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight.os, "geteuid", lambda: 0)
    monkeypatch.setattr(preflight.policy, "missing", lambda: ["missing ipset"])
    assert "missing ipset" in preflight.missing()


def test_kube_network_policies_needs_the_nftables_queue_expression(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why SIG Network's kube-network-policies is not the engine on a kernel without CONFIG_NFT_QUEUE."""
    monkeypatch.setattr(policy.shutil, "which", lambda name: name)
    refused = subprocess.CompletedProcess(
        ["unshare"], 1, "", "Error: Could not process rule: No such file or directory"
    )
    monkeypatch.setattr(policy, "_in_private_netns", lambda script: refused)
    assert "queue expression is refused" in (policy.nft_queue_problem() or "")
    monkeypatch.setattr(policy, "_in_private_netns", lambda script: subprocess.CompletedProcess([], 0, "", ""))
    assert policy.nft_queue_problem() is None
