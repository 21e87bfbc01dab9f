"""Failing fast on a model server that cannot serve the run: before it starts, and on its first answers.

`check_server` asks each upstream URL which models it serves (``GET /models``)
before any rollout runs: a server that refuses connections, rejects the API key
or sits one ``/v1`` away from the URL given is reported in one line instead of
stalling every rollout behind its client's retries. `fatal_upstream_error`
recognises, in a finished rollout's recorded error, the failures that every
other rollout would repeat (the key refused, the model or route not found), so
`v1 eval` can stop at the first one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from v1.clients import resolve_api_key, tls_context
from v1.config import ClientConfig
from v1.errors import Error

PROBE_READ_TIMEOUT = 10.0
AUTH_ERROR_TYPES = frozenset({"AuthenticationError", "PermissionDeniedError"})


class ServerUnusable(Error):
    """The model server cannot serve this run (unreachable, key refused, wrong URL, no such model)."""


def _models_request(config: ClientConfig, base_url: str) -> tuple[str, dict[str, str]]:
    key = resolve_api_key(config.api_key_var)
    if config.client_type == "anthropic_messages":
        root = base_url.rstrip("/").removesuffix("/v1")
        return f"{root}/v1/models", {"x-api-key": key, "anthropic-version": "2023-06-01", **config.extra_headers}
    return f"{base_url.rstrip('/')}/models", {"Authorization": f"Bearer {key}", **config.extra_headers}


def _get(config: ClientConfig, base_url: str) -> httpx.Response:
    url, headers = _models_request(config, base_url)
    timeout = httpx.Timeout(PROBE_READ_TIMEOUT, connect=config.connect_wait)
    return httpx.get(url, headers=headers, timeout=timeout, follow_redirects=False, verify=tls_context(httpx))


def _reason(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return re.sub(r"^\[Errno -?\d+\]\s*", "", text).lower()


def _listed_models(response: httpx.Response) -> list[str] | None:
    try:
        return [str(entry["id"]) for entry in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return None


def probe_server(config: ClientConfig) -> list[str] | None:
    """The models the server at `config.api_base_url` lists, or None when it does not say.

    A 403 is not fatal: a key may be allowed to call models but not to list them.

    Raises:
        ServerUnusable: the server refuses connections (or does not answer them), rejects
            the API key (401), or answers only one ``/v1`` further than the URL given.
    """
    base = config.api_base_url
    try:
        response = _get(config, base)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise ServerUnusable(
            f"cannot connect to the model server at {base} ({_reason(exc)}); is it running, and is the URL right?"
        ) from None
    except httpx.HTTPError:
        return None  # it accepted the connection; the run's own calls will say more
    if response.status_code == 401:
        variable = f"${config.api_key_var}" if config.api_key_var else "the API key"
        raise ServerUnusable(
            f"the model server at {base} rejected the API key (HTTP {response.status_code}); "
            f"check {variable}, or name another variable with -k VAR"
        )
    if response.status_code == 404 and config.client_type != "anthropic_messages":
        path = urlsplit(base).path.rstrip("/")
        if not path.endswith("/v1"):
            suggestion = base.rstrip("/") + "/v1"
            try:
                found = _get(config, suggestion).status_code < 400
            except httpx.HTTPError:
                found = False
            if found:
                raise ServerUnusable(f"{base} has no OpenAI API, but {suggestion} has: the URL is missing /v1")
        return None
    if response.status_code >= 400:
        return None
    return _listed_models(response)


def check_server(client: ClientConfig, model: str | None) -> tuple[str | None, list[str]]:
    """Probe every endpoint of `client`; the model to use (`model`, else the one served) and warnings.

    Raises:
        ServerUnusable: see `probe_server`; or no model was named and the server does not
            list exactly one.
    """
    warnings = []
    for config in client.endpoint_variants():
        listed = probe_server(config)
        if model is None:
            if not listed or len(listed) != 1:
                served = f"it serves {len(listed)}: {', '.join(listed[:10])}" if listed else "it does not list its models"
                raise ServerUnusable(f"no model: pass -m MODEL ({config.api_base_url}/models: {served})")
            model = listed[0]
        elif listed and model not in listed:
            warnings.append(
                f"{config.api_base_url} does not list model {model!r} (it lists {', '.join(listed[:10])}); "
                "the run stops at the first 'model not found'"
            )
    return model, warnings


def fatal_upstream_error(error: Mapping[str, Any] | None) -> str | None:
    """Why every rollout would fail like this one, for an error recorded from the model call; else None.

    The API key refused (401/403, or the SDK's `AuthenticationError`/`PermissionDeniedError`) and
    a model or route the server does not have (404, or `NotFoundError`) are fatal; anything else
    (rate limits, 5xx, a bad answer, a refused request) is the rollout's own. Decided by the
    recorded status and error type only: the message holds text a program or upstream chose.
    """
    if not isinstance(error, Mapping) or not str(error.get("where", "")).startswith("model"):
        return None
    kind = str(error.get("type"))
    status = error.get("status")
    message = " ".join(str(error.get("message")).split()).split(" (caused by ")[0][:300]
    if kind in AUTH_ERROR_TYPES or status in (401, 403):
        return f"the model server rejected the API key: {kind}: {message}"
    if kind == "NotFoundError" or status == 404:
        return f"the model server has no such model or route (404): {message}"
    return None


__all__ = ["ServerUnusable", "check_server", "fatal_upstream_error", "probe_server"]
