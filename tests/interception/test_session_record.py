"""The step's `response` is what pydantic's serializer writes for the `Response`, field for field."""

from __future__ import annotations

import math
from typing import Any

import pytest

from v1.interception._session import _response_json
from v1.types import Response

TOKENS = {
    "prompt_ids": [1, 2],
    "prompt_mask": [0, 0],
    "completion_ids": [3],
    "completion_mask": [1],
    "completion_logprobs": [-math.inf],
}


@pytest.mark.parametrize(
    "fields",
    [
        {"message": {"content": "hi"}},
        {
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "reasoning_tokens": 1},
            "message": {
                "content": None,
                "reasoning_content": "because",
                "reasoning_signature": "sig",
                "finish_reason": "tool_calls",
                "is_truncated": False,
                "tokens": {**TOKENS, "routed_experts": [[[0, 1]], [[2, 3]]]},
                "tool_calls": [{"id": "c1", "name": "add", "arguments": '{"a": 1}'}],
            },
        },
        {
            "usage": {"prompt_tokens": 1},
            "message": {"finish_reason": "length", "is_truncated": True, "tokens": TOKENS, "tool_calls": []},
        },
    ],
)
def test_the_recorded_response_is_the_serializers(fields: dict[str, Any]) -> None:
    response = Response.model_validate({"id": "r", "created": 1, "model": "m", **fields})
    expected = Response.__pydantic_serializer__.to_python(response, mode="json")
    recorded = _response_json(response)
    assert repr(recorded) == repr(expected)  # repr: -inf and key order compared too
    if response.message.tokens is not None:
        assert recorded["message"]["tokens"]["prompt_ids"] is not response.message.tokens.prompt_ids  # a copy, as dumped
