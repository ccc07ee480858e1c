"""``kubeopera-tenants``' subcommands: the operator's own, and those other distributions add
through the entry-point group ``kubeopera_tenants.commands`` (the test bed's ``local``)."""

from __future__ import annotations

import argparse
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from shared import cli


def _subcommands(parser: argparse.ArgumentParser) -> set[str]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def add_hello(sub: argparse._SubParsersAction[Any]) -> None:
    hello = sub.add_parser("hello")
    hello.add_argument("--to", default="world")
    hello.set_defaults(run=lambda args: 7 if args.to == "operator" else 0)


def test_the_runtime_alone_has_status_retry_rotate_and_rollout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "entry_points", lambda group: [])
    assert _subcommands(cli.parser()) == {"status", "retry", "rotate", "rollout"}


def test_a_command_of_another_distribution_is_added_and_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = EntryPoint(name="hello", value=f"{__name__}:add_hello", group=cli.COMMANDS_GROUP)
    monkeypatch.setattr(cli, "entry_points", lambda group: [entry] if group == cli.COMMANDS_GROUP else [])
    assert _subcommands(cli.parser()) == {"status", "retry", "rotate", "rollout", "hello"}
    assert cli.main(["hello", "--to", "operator"]) == 7


def test_the_development_install_adds_local() -> None:
    """make installs testbed/ beside the runtime; its entry point brings ``local``."""
    assert "local" in _subcommands(cli.parser())
    args = cli.parser().parse_args(["local", "--no-example", "--vcluster-boot-seconds", "3"])
    assert (args.no_example, args.vcluster_boot_seconds, args.kubeconfig_out) == (True, 3.0, None)
