"""Shared fixtures: a real mock model server over HTTP, and a harness factory pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import v1 as vf
from v1.testing import MockModelServer


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    """A fresh mock model server (echo replies unless scripted)."""
    with MockModelServer() as server:
        yield server


@pytest.fixture
def client_config(mock: MockModelServer) -> vf.ClientConfig:
    return vf.ClientConfig(api_base_url=mock.url, max_retries=0)


@pytest.fixture
def make_harness(client_config: vf.ClientConfig) -> Any:
    def make(**kwargs: Any) -> vf.Harness:
        kwargs.setdefault("client", client_config)
        kwargs.setdefault("model", "test-model")
        return vf.Harness(**kwargs)

    return make
