"""Upstream model clients: one `Client` per provider API."""

from v1.clients.base import Client
from v1.clients.openai_chat_completions import OpenAIChatCompletionsClient
from v1.clients.registry import CLIENT_TYPES, resolve_client, shared_client

__all__ = ["CLIENT_TYPES", "Client", "OpenAIChatCompletionsClient", "resolve_client", "shared_client"]
