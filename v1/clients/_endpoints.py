"""The endpoint registry (`configs/endpoints.toml`, or a Python file): model aliases for `v1 eval -m ID`.

Each id maps to one endpoint (a ``[id]`` table) or to several variants (``[[id]]``
tables) that groups are spread over round-robin:

    [gpt-4_1-mini]
    model = "gpt-4.1-mini"
    url = "https://api.openai.com/v1"
    key = "OPENAI_API_KEY"          # the environment variable holding the API key

A Python registry (``-e configs/endpoints.py``, vf-eval's form) defines the same as a dict:
``ENDPOINTS = {"gpt-4_1-mini": {"model": ..., "url": ..., "key": ...}}`` (a list of dicts for variants).
"""

from __future__ import annotations

import runpy
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field

from v1.config import ClientConfig, Config, EndpointClientConfig, read_toml
from v1.errors import ConfigError
from v1.types import ClientType


class Endpoint(Config):
    """One endpoint variant: where to send requests, with which key variable, for which model."""

    model: str
    url: str
    key: str = "PRIME_API_KEY"
    api_client_type: ClientType = "openai_chat_completions"
    extra_headers: dict[str, str] = Field(default_factory=dict)


Endpoints = dict[str, list[Endpoint]]
"""An endpoint id mapped to its variants (one variant is a one-item list), as the seed names it."""


def read_python_registry(path: str | Path) -> dict[str, object]:
    """The ``ENDPOINTS`` dict a Python registry file defines (the file is run: name only files you trust).

    Raises:
        ConfigError: the file cannot be run, or defines no ``ENDPOINTS`` dict.
    """
    try:
        namespace = runpy.run_path(str(path), run_name="v1_endpoints")
    except (Exception, SystemExit) as exc:
        lines = str(exc).strip().splitlines()
        raise ConfigError(f"{path}: running it failed: {type(exc).__name__}: {lines[0] if lines else ''}"[:300]) from None
    endpoints = namespace.get("ENDPOINTS")
    if not isinstance(endpoints, Mapping) or not all(isinstance(key, str) for key in endpoints):
        raise ConfigError(
            f"{path}: expected a dict ENDPOINTS = {{endpoint_id: {{model, url, key}}}}, got {type(endpoints).__name__}"
        )
    return dict(endpoints)


def load_endpoints(path: str | Path) -> dict[str, list[Endpoint]]:
    """The registry in `path` (TOML, or a ``.py`` file defining ``ENDPOINTS``): id -> its variants.

    Raises:
        ConfigError: naming the file and the field path of a bad entry.
    """
    document = read_python_registry(path) if str(path).endswith(".py") else read_toml(path)
    registry: dict[str, list[Endpoint]] = {}
    for endpoint_id, entry in document.items():
        variants = entry if isinstance(entry, list) else [entry]
        if not variants or not all(isinstance(variant, Mapping) for variant in variants):
            raise ConfigError(f"{path}: field '{endpoint_id}': expected a table or an array of tables with model, url and key")
        registry[endpoint_id] = [
            Endpoint.from_section(variant, str(path), endpoint_id if len(variants) == 1 else f"{endpoint_id}.{index}")
            for index, variant in enumerate(variants)
        ]
    return registry


def client_config_for(endpoint_id: str, variants: list[Endpoint], base: ClientConfig | None = None) -> tuple[ClientConfig, str]:
    """A `ClientConfig` (several variants become `endpoint_configs`) and the model name to send.

    Raises:
        ConfigError: the variants disagree on the model or the client type.
    """
    models = {variant.model for variant in variants}
    types = {variant.api_client_type for variant in variants}
    if len(models) > 1 or len(types) > 1:
        raise ConfigError(
            f"endpoint {endpoint_id!r}: its variants must share one model and api_client_type, got {sorted(models)}"
        )
    first = variants[0]
    fields = (base or ClientConfig()).model_dump()
    fields.update(
        client_type=first.api_client_type, api_base_url=first.url, api_key_var=first.key, extra_headers=dict(first.extra_headers)
    )
    if len(variants) > 1:
        fields["endpoint_configs"] = [
            EndpointClientConfig(
                client_idx=index,
                api_base_url=variant.url,
                api_key_var=variant.key,
                extra_headers=dict(variant.extra_headers),
            )
            for index, variant in enumerate(variants)
        ]
    return ClientConfig(fields), first.model


__all__ = ["Endpoint", "Endpoints", "client_config_for", "load_endpoints"]
