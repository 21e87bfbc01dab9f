"""Ready-made responders for `MockModelServer`: scripted policies and failure modes.

Each is a function of the `MockRequest` (or builds one), usable in Python
(``MockModelServer(reverser)``) and by name from the shell
(``python -m v1.testing --reply reverse``, see `BUILT_IN`).
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from v1.testing._mock_server import MockRequest, Reply, echo

ReplyFunction = Callable[[MockRequest], Any]


def reverser(request: MockRequest) -> Reply:
    """Answer with the last user message reversed, character by character."""
    return Reply.text(request.last_user_text[::-1])


def imperfect_reverser(slip_rate: float = 0.4) -> ReplyFunction:
    """A reverser that slips (drops or swaps a character) in `slip_rate` of its answers.

    Deterministic: the k-th request for a given text always gets the same answer,
    so a run's rewards do not depend on the order concurrent requests arrive in,
    while rollouts of one task differ (so group advantages are not all 0).
    """
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def reply(request: MockRequest) -> Reply:
        prompt = request.last_user_text
        with lock:
            attempt = seen[prompt]
            seen[prompt] += 1
        rng = random.Random(f"{prompt}\0{attempt}")
        text = prompt[::-1]
        if len(text) > 2 and rng.random() < slip_rate:
            i = rng.randrange(len(text) - 1)
            text = text[:i] + text[i + 1] + text[i] + text[i + 2 :] if rng.random() < 0.5 else text[:i] + text[i + 1 :]
        return Reply.text(text)

    return reply


def _example_value(schema: Mapping[str, Any]) -> Any:
    kind = schema.get("type")
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if kind == "array":
        return [_example_value(schema.get("items") or {"type": "string"})]
    if kind == "object":
        return {name: _example_value(sub) for name, sub in (schema.get("properties") or {}).items()}
    return "x"


def tool_caller(request: MockRequest) -> Reply:
    """Call the first offered tool once (arguments made from its JSON schema), then answer with its result.

    Without tools it answers with the last user message.
    """
    last = request.last_message
    if last.get("role") == "tool":
        return Reply.text(str(last.get("content") or ""))
    if not request.tools:
        return echo(request)
    function = request.tools[0].get("function") or {}
    parameters = function.get("parameters") or {}
    required = set(parameters.get("required") or (parameters.get("properties") or {}))
    arguments = {
        name: _example_value(schema) for name, schema in (parameters.get("properties") or {}).items() if name in required
    }
    return Reply.tool(str(function.get("name")), json.dumps(arguments))


def failing(status: int = 500, message: str = "mock failure") -> ReplyFunction:
    """Fail every request with HTTP `status` (an error body in the request's dialect)."""

    def reply(request: MockRequest) -> Reply:
        return Reply.fail(status, message)

    return reply


def requiring_key(key: str, responder: ReplyFunction) -> ReplyFunction:
    """`responder`, for requests bearing API key `key` (``Authorization: Bearer`` or ``x-api-key``); 401 for others."""

    def reply(request: MockRequest) -> Any:
        headers = {name.lower(): value for name, value in request.headers.items()}
        if headers.get("authorization") != f"Bearer {key}" and headers.get("x-api-key") != key:
            return Reply.fail(401, "Incorrect API key provided")
        return responder(request)

    return reply


def serving_only(model: str, responder: ReplyFunction) -> ReplyFunction:
    """`responder`, for requests naming `model`; 404 "model not found" (as vLLM and OpenAI answer) for others."""

    def reply(request: MockRequest) -> Any:
        if request.body.get("model") != model:
            return Reply.fail(404, f"The model `{request.body.get('model')}` does not exist.")
        return responder(request)

    return reply


BUILT_IN: dict[str, Callable[[], ReplyFunction]] = {
    "echo": lambda: echo,
    "reverse": lambda: reverser,
    "imperfect-reverse": imperfect_reverser,
    "tool-call": lambda: tool_caller,
}
"""Responders by name for ``python -m v1.testing --reply NAME``; ``fail-STATUS`` (e.g. ``fail-503``) fails every request."""


def built_in(name: str) -> ReplyFunction | None:
    """The built-in responder called `name` (``fail-STATUS`` included), or None."""
    if name in BUILT_IN:
        return BUILT_IN[name]()
    prefix, _, status = name.partition("-")
    if prefix == "fail" and status.isdigit() and 400 <= int(status) <= 599:
        return failing(int(status), f"mock failure {status}")
    return None


__all__ = [
    "BUILT_IN",
    "ReplyFunction",
    "built_in",
    "failing",
    "imperfect_reverser",
    "requiring_key",
    "reverser",
    "serving_only",
    "tool_caller",
]
