"""The host's Service range for ``serviceCIDR`` (shared.model.service_range): the setting wins, then the
cluster's ServiceCIDR objects; neither stops install at start with a message that says what to set."""

from __future__ import annotations

import pytest

from shared.errors import ConfigError
from shared.model import service_range
from shared.settings import Settings


@pytest.mark.parametrize(
    ("given", "written"),
    [
        ("10.96.0.0/12", "10.96.0.0/12"),
        (" 10.96.0.0/12 , fd00:10:96::/108 ", "10.96.0.0/12,fd00:10:96::/108"),
        ("", ""),
    ],
)
def test_a_setting_is_written_canonically(given: str, written: str) -> None:
    assert service_range.parse(given) == written
    assert Settings.from_env({"SERVICE_CIDR": given, "SENDER_IDENTITY": "off"}).service_cidr == written


@pytest.mark.parametrize(
    "bad",
    ["10.96.0.1/12", "not-a-cidr", "10.0.0.0/8,10.96.0.0/12", "10.0.0.0/8,fd00::/108,fd01::/108"],
)
def test_a_bad_setting_stops_the_start_naming_the_variable(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"^SERVICE_CIDR "):
        Settings.from_env({"SERVICE_CIDR": bad, "SENDER_IDENTITY": "off"})


def test_the_setting_wins_and_the_cluster_is_not_read() -> None:
    def read() -> None:
        raise AssertionError("the cluster was read although the setting gives the range")

    assert service_range.resolve("10.96.0.0/12", read) == "10.96.0.0/12"


def test_the_api_servers_own_service_cidr_is_chosen() -> None:
    objects = [("extra", ["10.200.0.0/16"]), ("kubernetes", ["10.0.0.0/24", "fd00::/108"])]
    assert service_range.resolve("", lambda: objects) == "10.0.0.0/24,fd00::/108"


def test_without_the_default_object_every_range_is_taken() -> None:
    assert service_range.choose("", [("mine", ["10.1.0.0/16"])]) == "10.1.0.0/16"


def test_a_host_older_than_1_33_needs_the_setting() -> None:
    with pytest.raises(ConfigError, match="Kubernetes 1.33 and later.*set SERVICE_CIDR"):
        service_range.resolve("", lambda: None)


def test_a_cluster_without_a_range_needs_the_setting() -> None:
    with pytest.raises(ConfigError, match="no ServiceCIDR with a range"):
        service_range.resolve("", lambda: [])
