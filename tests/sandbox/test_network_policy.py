"""`SandboxConfig.network`: its values, the older `network_access` spelling, and how rows narrow it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from v1.config import NetworkPolicy, SandboxConfig
from v1.config._network import parse_rule
from v1.errors import ConfigError, TaskError
from v1.programs import narrow_sandbox

NARROWS = "outside data narrows what the harness configured, never widens it"


def test_the_default_is_none_and_the_old_spelling_still_reads_and_writes() -> None:
    assert SandboxConfig().network == "none" and SandboxConfig().network_access is False
    assert SandboxConfig(network_access=True).network == "all" and SandboxConfig(network_access=True).network_access
    assert SandboxConfig(network_access=False).network == "none"
    assert SandboxConfig(network="all", network_access=True).network == "all"
    policy = SandboxConfig(network={"allow": ["*.PyPI.org:443", "10.0.0.7", "[::1]:8080", "*"], "block": ["Evil.pypi.org"]})
    assert isinstance(policy.network, NetworkPolicy) and policy.network_access is False
    assert policy.network.allow == ["*.pypi.org:443", "10.0.0.7", "[::1]:8080", "*"] and policy.network.block == ["evil.pypi.org"]


def test_toml_builds_the_same_policy(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text('network = { allow = ["pypi.org"], block = ["1.2.3.4"] }\n')
    assert SandboxConfig.from_toml(tmp_path / "s.toml").network == NetworkPolicy(allow=["pypi.org"], block=["1.2.3.4"])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"network_access": True, "network": "none"}, "network_access=true and network='none' disagree"),
        ({"network_access": False, "network": {"allow": ["a.org"]}}, "network_access=false and network="),
        ({"network_access": "yes"}, "network_access must be true or false"),
        ({"network": "some"}, "field 'network.mode': Input should be 'none' or 'all'"),
        ({"network": 3}, "field 'network.policy'"),
        ({"network": None}, "field 'network.policy'"),
        ({"network": {"alow": []}}, "field 'network.policy.alow': unknown field"),
        ({"network": {"allow": "pypi.org"}}, "field 'network.policy.allow': Input should be a valid list"),
        ({"network": {"allow": [""]}}, "'' is not a host entry"),
        ({"network": {"allow": ["a\x00b"]}}, "no spaces or control characters"),
        ({"network": {"allow": ["a.org\n"]}}, "no spaces or control characters"),
        ({"network": {"block": ["https://a.org"]}}, "no scheme, credentials or path"),
        ({"network": {"allow": ["a.org/simple"]}}, "no scheme, credentials or path"),
        ({"network": {"allow": ["user@a.org"]}}, "no scheme, credentials or path"),
        ({"network": {"allow": ["a.org:0"]}}, "the port must be a number from 1 to 65535"),
        ({"network": {"allow": ["a.org:65536"]}}, "the port must be a number from 1 to 65535"),
        ({"network": {"allow": ["a.org:-1"]}}, "the port must be a number from 1 to 65535"),
        ({"network": {"allow": ["a.org:"]}}, "the port must be a number from 1 to 65535"),
        ({"network": {"allow": ["a.org:99999999999999999999"]}}, "the port must be a number from 1 to 65535"),
        ({"network": {"allow": ["1.2.3"]}}, "is not an IP address"),
        ({"network": {"allow": ["*.*.org"]}}, "is not a host name"),
        ({"network": {"allow": ["a*.org"]}}, "is not a host name"),
        ({"network": {"allow": ["-a.org"]}}, "is not a host name"),
        ({"network": {"allow": ["a" * 64 + ".org"]}}, "is not a host name"),
        ({"network": {"allow": ["[zz]:1"]}}, "is not an IPv6 address"),
        ({"network": {"allow": ["[::1]x"]}}, "written `[address]:port`"),
        ({"network": {"allow": ["a.org"] * 1025}}, "at most 1024 entries"),
    ],
)
def test_a_bad_network_value_is_refused_in_one_line(value: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SandboxConfig(**value)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("entry", "host", "port", "is_address", "matches"),
    [
        ("*.pypi.org", "files.pypi.org", 443, False, True),
        ("*.pypi.org", "a.b.pypi.org", 80, False, True),
        ("*.pypi.org", "pypi.org", 443, False, False),
        ("*.pypi.org", "evilpypi.org", 443, False, False),
        ("pypi.org:443", "pypi.org", 80, False, False),
        ("*", "anything.example", 1, False, True),
        ("*", "10.0.0.7", 443, True, False),
        ("10.0.0.7", "10.0.0.7", 22, True, True),
        ("10.0.0.7", "10.0.0.7", 22, False, False),
        ("[::1]:80", "::1", 80, True, True),
    ],
)
def test_names_match_names_and_addresses_match_addresses(
    entry: str, host: str, port: int, is_address: bool, matches: bool
) -> None:
    assert parse_rule(entry).matches(host, port, is_address) is matches


HARNESS = SandboxConfig(network={"allow": ["*.pypi.org", "localhost:8080", "10.0.0.7"], "block": ["evil.pypi.org"]})


@pytest.mark.parametrize(
    ("row", "allow", "block"),
    [
        ({"network": {"allow": ["files.pypi.org:443", "localhost:8080"], "block": ["b.pypi.org"]}},
         ["files.pypi.org:443", "localhost:8080"], ["evil.pypi.org", "b.pypi.org"]),
        ({"network": {"allow": ["*.a.pypi.org", "10.0.0.7:443"]}}, ["*.a.pypi.org", "10.0.0.7:443"], ["evil.pypi.org"]),
        ({"network": {"allow": []}}, [], []),
    ],
)  # fmt: skip
def test_a_row_narrows_the_allow_list_and_keeps_the_harness_blocks(
    row: dict[str, Any], allow: list[str], block: list[str]
) -> None:
    narrowed = narrow_sandbox(HARNESS, row)
    assert narrowed is not None and narrowed.network == NetworkPolicy(allow=allow, block=block)


@pytest.mark.parametrize("row", [{"network": "none"}, {"network_access": False}])
def test_a_row_may_turn_the_network_off(row: dict[str, Any]) -> None:
    narrowed = narrow_sandbox(HARNESS, row)
    assert narrowed is not None and narrowed.network == "none"


@pytest.mark.parametrize(
    ("base", "row", "field", "why"),
    [
        (HARNESS, {"network": "all"}, "sandbox.network", "'all' is wider"),
        (HARNESS, {"network_access": True}, "sandbox.network_access", "'all' is wider"),
        (HARNESS, {"network": {"allow": ["x.org"]}}, "sandbox.network", "'x.org' is not within"),
        (HARNESS, {"network": {"allow": ["pypi.org"]}}, "sandbox.network", "'pypi.org' is not within"),
        (HARNESS, {"network": {"allow": ["*"]}}, "sandbox.network", "'*' is not within"),
        (HARNESS, {"network": {"allow": ["localhost"]}}, "sandbox.network", "'localhost' is not within"),
        (HARNESS, {"network": {"allow": ["localhost:9090"]}}, "sandbox.network", "'localhost:9090' is not within"),
        (HARNESS, {"network": {"allow": ["10.0.0.8"]}}, "sandbox.network", "'10.0.0.8' is not within"),
        (SandboxConfig(), {"network": {"allow": ["x.org"]}}, "sandbox.network", "is wider than the harness's 'none'"),
        (SandboxConfig(), {"network": "all"}, "sandbox.network", "is wider than the harness's 'none'"),
        (SandboxConfig(network={"allow": ["*"]}), {"network": {"allow": ["10.0.0.7"]}}, "sandbox.network", "not within"),
    ],
)
def test_a_row_cannot_widen_the_network(base: SandboxConfig, row: dict[str, Any], field: str, why: str) -> None:
    with pytest.raises(TaskError) as caught:
        narrow_sandbox(base, row)
    message = str(caught.value)
    assert message.startswith(f"task field '{field}': ") and why in message and NARROWS in message and "\n" not in message


def test_a_row_giving_both_spellings_that_disagree_is_refused() -> None:
    with pytest.raises(TaskError, match="disagree"):
        narrow_sandbox(HARNESS, {"network": "none", "network_access": True})
