"""Every connection pool v1 builds shares one TLS context per HTTP library and trust setting: loading the
certificate bundle (tens of ms) happens once a process, not once a pool, while `SSL_CERT_FILE` is still honoured."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from v1 import ClientConfig
from v1.clients import http_library, sync_http_client, tls_context
from v1.clients._answer_limits import bounded_http_client
from v1.clients._http import async_client_class, async_http_client
from v1.interception._sdk import anthropic_async_http, in_process_http


@pytest.fixture
def bundle_loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Each certificate bundle a TLS context loads from now on."""
    loads: list[Any] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        load(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    yield loads


def build_every_pool() -> list[Any]:
    config = ClientConfig(api_base_url="https://models.example/v1")
    return [
        bounded_http_client(async_client_class(), config),
        bounded_http_client(async_client_class(), config.model_copy(update={"timeout": 7.0})),
        async_http_client(timeout=5, connect_timeout=1, max_connections=4, max_keepalive_connections=4),
        async_http_client(timeout=5, connect_timeout=1, max_connections=4, max_keepalive_connections=4, trust_env=False),
        sync_http_client(timeout=5, connect_timeout=1, max_connections=4, max_keepalive_connections=4),
        in_process_http(
            "http://127.0.0.1:9", http_library().AsyncHTTPTransport(trust_env=False, verify=tls_context(trust_env=False))
        ),
        anthropic_async_http(),
    ]


def test_pools_after_the_first_load_no_certificate_bundle(bundle_loads: list[Any]) -> None:
    build_every_pool()  # the first of each library and trust setting may load one
    bundle_loads.clear()
    pools = build_every_pool()
    assert len(pools) == 7
    assert bundle_loads == []


def test_a_pool_trusting_the_environment_reads_ssl_cert_file_when_built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-bundle.pem"
    monkeypatch.setenv("SSL_CERT_FILE", str(missing))
    with pytest.raises(FileNotFoundError):
        async_http_client(timeout=5, connect_timeout=1, max_connections=4, max_keepalive_connections=4)
    async_http_client(timeout=5, connect_timeout=1, max_connections=4, max_keepalive_connections=4, trust_env=False)


def test_without_certificate_variables_trusting_the_environment_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    assert tls_context(trust_env=True) is tls_context(trust_env=False)
    monkeypatch.setenv("SSL_CERT_DIR", "/etc/ssl/certs")
    assert tls_context(trust_env=True) is not tls_context(trust_env=False)
