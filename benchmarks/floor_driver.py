"""The floor: the least work a single-turn rollout with v1's guarantees takes, written inline with no framework.

    python benchmarks/floor_driver.py --url URL [--n 4000] [--concurrency 256] [--gate]

Not v1 and not a design for it: a measuring stick. Each rollout does, in plain Python on the same
aiohttp client `raw_driver.py` uses, only what a rollout of v1 must do to keep the guarantees the
endpoint and the state give (DESIGN.md, "A program is untrusted input"; every saved state is JSON):

- a state of v1's fields and a rollout id; a key of its own, registered for the call and removed after;
- the program's request written as JSON text and read back by the endpoint (the copy the step keeps),
  its shape checked, its key compared in constant time;
- the upstream request built from the fields the endpoint allows, with the harness's model (narrowing);
- the answer read, parsed and its shape checked; one trajectory step recorded (prompt, completion,
  response, timing) and the token totals summed;
- the completion and stop condition set, scoring with no reward functions, the timing written out;
- finalize's check that the state is JSON (its text read back and compared, as `json_check.is_json`).

What it leaves out is everything that makes v1 a framework: programs of every form, dialects,
handlers, toolsets, sandboxes, budgets, limits, timeouts, errors recorded per part. So its share of
the raw rate is an upper bound on what any rollout with these guarantees reaches on this mock,
and its distance from v1's is the framework's own cost. Prints one JSON line with
`commit_driver.py`'s keys; `--gate` works as theirs.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import sys
import time
from typing import Any

import aiohttp
import orjson
from commit_driver import MODEL, plain_main, warmed_and_timed

ALLOWED_FIELDS = ("messages", "tools", "temperature", "max_tokens", "top_p", "stop", "seed")
"""The request fields the floor's endpoint passes upstream; anything else a program sends stays behind."""
HARNESS_SAMPLING: dict[str, Any] = {}
"""The harness's sampling args: they win over the program's at every depth (none here, as in the other phases)."""


def _checked_messages(request: Any) -> list[dict[str, Any]]:
    messages = request.get("messages") if isinstance(request, dict) else None
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' is required")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError("a message needs a role")
    return messages


def _checked_answer(answer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    message = answer["choices"][0]["message"]
    usage = answer.get("usage") or {}
    if not isinstance(message, dict) or not isinstance(usage, dict):
        raise ValueError("a malformed answer")
    return message, usage


class FloorEndpoint:
    """The least an interception endpoint keeps: rollout keys, the upstream session, the recording."""

    def __init__(self, upstream_url: str, session: aiohttp.ClientSession) -> None:
        self.url = upstream_url + "/chat/completions"
        self.session = session
        self.keys: dict[str, bytes] = {}

    async def call(self, state: dict[str, Any], presented: str, body: bytes) -> dict[str, Any]:
        rollout = state["trajectory_id"]
        if not hmac.compare_digest(presented.encode(), self.keys.get(rollout, b"\0")):
            raise PermissionError("401")
        request = orjson.loads(body)  # the endpoint's own copy, which the step keeps
        messages = _checked_messages(request)
        upstream = {key: request[key] for key in ALLOWED_FIELDS if key in request} | HARNESS_SAMPLING
        upstream["model"] = state["model"]
        start = time.time()
        async with self.session.post(self.url, data=orjson.dumps(upstream), headers=_UPSTREAM_HEADERS) as answer:
            answer.raise_for_status()
            parsed = orjson.loads(await answer.read())
        message, usage = _checked_answer(parsed)
        end = time.time()
        state["trajectory"].append(
            {
                "prompt": messages,
                "completion": [message],
                "response": {"id": parsed.get("id"), "model": parsed.get("model"), "usage": usage},
                "tokens": None,
                "reward": None,
                "advantage": None,
                "is_truncated": False,
                "trajectory_id": rollout,
                "extras": {"start": start, "end": end},
            }
        )
        totals = state["token_usage"]
        totals["input_tokens"] += usage.get("prompt_tokens", 0)
        totals["output_tokens"] += usage.get("completion_tokens", 0)
        state["timing"]["model"].append([start, end])
        return dict(message)


_UPSTREAM_HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer upstream"}


def _new_state(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "example_id": 0,
        "trajectory_id": secrets.token_hex(16),
        "task": row,
        "prompt": [{"role": "user", "content": row["prompt"]}],
        "completion": None,
        "trajectory": [],
        "model": MODEL,
        "reward": None,
        "metrics": {},
        "timing": {"start": time.time(), "model": []},
        "token_usage": {"input_tokens": 0, "output_tokens": 0},
        "error": None,
        "stop_condition": None,
        "is_completed": False,
        "is_truncated": False,
    }


def _is_json(state: dict[str, Any]) -> bool:
    return bool(orjson.loads(orjson.dumps(state)) == state)


async def floor_rollout(endpoint: FloorEndpoint, row: dict[str, Any]) -> dict[str, Any]:
    state = _new_state(row)
    key = "v1-" + secrets.token_urlsafe(24)
    endpoint.keys[state["trajectory_id"]] = key.encode()
    try:
        # the program: the base loop's one call, its request as JSON text
        messages = [dict(message) for message in state["prompt"]]
        body = orjson.dumps({"messages": messages, "model": MODEL})
        try:
            reply = await endpoint.call(state, key, body)
        except Exception as exc:
            state["error"] = repr(exc)
            reply = None
        state["completion"] = [reply] if reply is not None else []
        state["stop_condition"] = "final_response"
        state["is_completed"] = True
        state["reward"] = 0.0  # no reward functions
        state["timing"]["end"] = time.time()
    finally:
        del endpoint.keys[state["trajectory_id"]]
    if not _is_json(state):
        state["error"] = "not JSON"
    return state


async def rollouts(url: str, n: int, concurrency: int, gated: bool = False) -> dict[str, Any]:
    limit = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        endpoint = FloorEndpoint(url, session)

        async def one() -> bool:
            async with limit:
                state = await floor_rollout(endpoint, {"prompt": "hello"})
            return state["error"] is None and bool(state["completion"])

        return await warmed_and_timed(one, n, gated)


def main(argv: list[str] | None = None) -> int:
    return plain_main(__doc__ or "", rollouts, "rollouts", argv)


if __name__ == "__main__":
    sys.exit(main())
