"""Upstream model clients: one `Client` per provider API."""

from v1.clients.anthropic_messages import AnthropicMessagesClient
from v1.clients.base import Client
from v1.clients.openai_chat_completions import OpenAIChatCompletionsClient
from v1.clients.openai_chat_completions_token import OpenAIChatCompletionsTokenClient
from v1.clients.openai_completions import OpenAICompletionsClient
from v1.clients.openai_responses import OpenAIResponsesClient
from v1.clients.registry import CLIENT_TYPES, resolve_client, shared_client

__all__ = [
    "CLIENT_TYPES",
    "AnthropicMessagesClient",
    "Client",
    "OpenAIChatCompletionsClient",
    "OpenAIChatCompletionsTokenClient",
    "OpenAICompletionsClient",
    "OpenAIResponsesClient",
    "resolve_client",
    "shared_client",
]
