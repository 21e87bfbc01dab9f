"""Upstream model clients: one `Client` per provider API, how a harness's client is resolved, endpoints by
name, and the HTTP and in-process carriers they share.

The renderer and NeMo-RL clients load on first use, as `v1`'s own names for them do.
"""

from typing import TYPE_CHECKING

from v1._util.lazy import lazy_attributes
from v1.clients._anthropic_messages import AnthropicMessagesClient
from v1.clients._base import Client, ClientLike, redact_locations
from v1.clients._credentials import resolve_api_key
from v1.clients._endpoints import Endpoint, Endpoints, client_config_for, load_endpoints
from v1.clients._http import (
    anthropic_async_client_class,
    async_client_class,
    http_library,
    sync_http_client,
    tls_context,
)
from v1.clients._in_process import (
    InProcessTransport,
    post_request,
    read_body,
    serve_in_process,
    stop_serving,
    whole_response,
)
from v1.clients._openai_chat_completions import OpenAIChatCompletionsClient
from v1.clients._openai_chat_completions_token import OpenAIChatCompletionsTokenClient
from v1.clients._openai_completions import OpenAICompletionsClient
from v1.clients._openai_responses import OpenAIResponsesClient
from v1.clients._openai_wire import encode_json, status_error, transport_error
from v1.clients._resolve import resolve_client, shared_client
from v1.clients._tool_call_text import parse_tool_calls
from v1.registry import CLIENT_TYPES

if TYPE_CHECKING:
    from v1.clients._nemorl_chat_completions import TOKEN_FIELDS, NeMoRLChatCompletionsClient
    from v1.clients._renderer import RendererClient, bridge_prompt_ids, ids_digest, render_text, text_digest

__all__ = [
    "CLIENT_TYPES",
    "TOKEN_FIELDS",
    "AnthropicMessagesClient",
    "Client",
    "ClientLike",
    "Endpoint",
    "Endpoints",
    "InProcessTransport",
    "NeMoRLChatCompletionsClient",
    "OpenAIChatCompletionsClient",
    "OpenAIChatCompletionsTokenClient",
    "OpenAICompletionsClient",
    "OpenAIResponsesClient",
    "RendererClient",
    "anthropic_async_client_class",
    "async_client_class",
    "bridge_prompt_ids",
    "client_config_for",
    "encode_json",
    "http_library",
    "ids_digest",
    "load_endpoints",
    "parse_tool_calls",
    "post_request",
    "read_body",
    "redact_locations",
    "render_text",
    "resolve_api_key",
    "resolve_client",
    "serve_in_process",
    "shared_client",
    "status_error",
    "stop_serving",
    "sync_http_client",
    "text_digest",
    "tls_context",
    "transport_error",
    "whole_response",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        **dict.fromkeys(
            ["RendererClient", "bridge_prompt_ids", "ids_digest", "render_text", "text_digest"], "v1.clients._renderer"
        ),
        **dict.fromkeys(["NeMoRLChatCompletionsClient", "TOKEN_FIELDS"], "v1.clients._nemorl_chat_completions"),
    },
)
