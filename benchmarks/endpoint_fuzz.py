"""Endpoint fuzz and concurrency: hostile requests get a 4xx in their dialect's shape, never a 5xx or a stall.

    python benchmarks/endpoint_fuzz.py [--requests 3000] [--rollouts 200] [--concurrency 64] [--seed 0] [--json out.json]

One interception endpoint (real aiohttp, loopback) in front of `v1.testing`'s mock model
(the reverser). Three phases, each over real HTTP:

- fuzz: `--requests` requests drawn with a fixed seed: every dialect's route and unknown
  ones, any method, right/wrong/missing keys, `Idempotency-Key`s, bodies that are valid,
  mutated (keys dropped, values of the wrong type), deeply nested, cut short, not JSON, lone
  surrogates, or compressed garbage; half ask to stream;
- concurrency: `--rollouts` rollouts each make 5 calls at once (valid, half streamed);
- flood: one rollout holds 2x the in-flight cap of calls at once against a slow upstream.

Printed (and written with `--json`): statuses per phase, 5xx of the endpoint's own (must be 0;
a 502 `upstream_error`, the mock failing a call after retries, is counted apart), stalls (a request
unanswered after 30 s: must be 0), connections closed without an answer (aiohttp's parser
refusing a body it can't decode before any handler runs), error answers whose body is not
JSON, p50/p99 latency. Exits non-zero on any 5xx or stall.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections import Counter
from typing import Any

import aiohttp

import v1 as vf
from v1.clients import resolve_client
from v1.interception import get_endpoint, upstream
from v1.interception._server import MAX_CALLS_IN_FLIGHT
from v1.testing import MockModelServer, Reply

STALL_S = 30.0
ROUTES = ["/chat/completions", "/completions", "/responses", "/messages", "/messages/count_tokens", "/models", "/nope"]
GEMINI = "/v1beta/models/m:generateContent"
VALID = {
    "/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hello"}]},
    "/completions": {"model": "m", "prompt": "hello"},
    "/responses": {"model": "m", "input": "hello"},
    "/messages": {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]},
    "/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "hello"}]},
    GEMINI: {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]},
}
ODD_VALUES: list[Any] = [None, 0, -1, 10**30, 1.5e308, "", "x" * 10_000, [], {}, [[[]]], True, "\u0000", {"a": [1, {"b": None}]}]


def mutate(body: Any, rng: random.Random) -> Any:
    """One random mutation of a JSON value: a key dropped or replaced, a value of the wrong type."""
    if isinstance(body, dict) and body:
        body = dict(body)
        key = rng.choice(list(body))
        if rng.random() < 0.3:
            del body[key]
        else:
            body[key] = mutate(body[key], rng) if rng.random() < 0.5 else rng.choice(ODD_VALUES)
        return body
    if isinstance(body, list) and body:
        return [mutate(item, rng) for item in body]
    return rng.choice(ODD_VALUES)


def hostile_body(route: str, rng: random.Random) -> tuple[bytes, dict[str, str]]:
    """A request body (and extra headers) for `route`: valid, mutated or broken."""
    valid = VALID.get(route, VALID["/chat/completions"])
    kind = rng.randrange(9)
    headers: dict[str, str] = {}
    if kind == 0:
        body: Any = valid
    elif kind in (1, 2, 3):
        body = mutate(valid, rng)
    elif kind == 4:
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "x": json.loads("[" * 500 + "]" * 500)}
    elif kind == 5:
        return json.dumps(valid).encode()[: rng.randrange(1, 20)], headers
    elif kind == 6:
        return rng.randbytes(rng.randrange(1, 2000)), headers
    elif kind == 7:
        return b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}', headers
    else:
        headers["Content-Encoding"] = rng.choice(["gzip", "deflate", "br"])
        return rng.randbytes(200), headers
    if isinstance(body, dict) and rng.random() < 0.5:
        body = {**body, "stream": True}
    return json.dumps(body).encode(), headers


class Tally:
    """Statuses, latencies and stalls of one phase."""

    def __init__(self) -> None:
        self.statuses: Counter[int] = Counter()
        self.latencies: list[float] = []
        self.stalls = 0
        self.closed = 0
        self.upstream_failures = 0  # 502 `upstream_error`: the mock failed the call after retries
        self.bad_shape = 0

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.latencies) or [0.0]
        return {
            "requests": sum(self.statuses.values()) + self.stalls + self.closed,
            "statuses": dict(sorted(self.statuses.items())),
            "5xx": sum(count for status, count in self.statuses.items() if status >= 500) - self.upstream_failures,
            "upstream_failures_502": self.upstream_failures,
            "stalls": self.stalls,
            "closed_without_an_answer": self.closed,
            "errors_without_a_json_body": self.bad_shape,
            "p50_ms": round(statistics.median(ordered) * 1000, 1),
            "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1 if len(ordered) > 1 else 0] * 1000, 1),
        }


async def send(http: aiohttp.ClientSession, tally: Tally, method: str, url: str, data: bytes, headers: dict[str, str]) -> None:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(STALL_S):
            async with http.request(method, url, data=data, headers=headers) as answer:
                text = await answer.read()
                tally.statuses[answer.status] += 1
                if answer.status == 502 and b'"upstream_error"' in text:
                    tally.upstream_failures += 1
                if answer.status >= 400 and answer.status != 405 and not text.lstrip().startswith((b"{", b"[")):
                    tally.bad_shape += 1
    except TimeoutError:
        tally.stalls += 1
        return
    except aiohttp.ClientError:
        tally.closed += 1  # the server closed the connection without an answer
    tally.latencies.append(time.perf_counter() - started)


async def open_rollouts(mock: MockModelServer, count: int) -> list[tuple[str, str]]:
    endpoint = await get_endpoint()
    # the mock shares this machine's CPUs with the endpoint: an overloaded mock is retried, as a real upstream would be
    client = await resolve_client(vf.ClientConfig(api_base_url=mock.url, max_retries=3))
    rollouts = []
    for _ in range(count):
        state = vf.State.for_task({"prompt": "hi"})
        upstream(state).client = client
        state.runtime.model = "m"
        state.runtime.max_turns = 10**6
        session = endpoint.open(state)
        rollouts.append((session.base_url.removesuffix("/v1"), session.api_key))
    return rollouts


async def fuzz(http: aiohttp.ClientSession, rollouts: list[tuple[str, str]], requests: int, concurrency: int, seed: int) -> Tally:
    rng, tally, gate = random.Random(seed), Tally(), asyncio.Semaphore(concurrency)

    async def one() -> None:
        root, key = rng.choice(rollouts)
        route = rng.choice([*ROUTES, GEMINI])
        url = root + (route if route == GEMINI else "/v1" + route)
        method = rng.choice(["POST"] * 8 + ["GET", "PUT", "DELETE"])
        auth = rng.choice(
            [{"Authorization": f"Bearer {key}"}] * 6 + [{"x-api-key": key}, {}, {"Authorization": "Bearer v1-wrong"}]
        )
        if route == GEMINI and auth:
            auth = {"x-goog-api-key": key}
        data, extra = hostile_body(route, rng)
        if rng.random() < 0.1:
            extra["Idempotency-Key"] = rng.choice(["a", "b"])
        async with gate:
            await send(http, tally, method, url, data, {"Content-Type": "application/json", **auth, **extra})

    await asyncio.gather(*(one() for _ in range(requests)))
    return tally


async def concurrency_phase(http: aiohttp.ClientSession, rollouts: list[tuple[str, str]]) -> Tally:
    tally = Tally()
    calls = []
    for index, (root, key) in enumerate(rollouts):
        for call in range(5):
            body = {**VALID["/chat/completions"], "stream": (index + call) % 2 == 0}
            headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
            calls.append(send(http, tally, "POST", f"{root}/v1/chat/completions", json.dumps(body).encode(), headers))
    await asyncio.gather(*calls)
    return tally


async def flood_phase(http: aiohttp.ClientSession, mock: MockModelServer) -> Tally:
    [(root, key)] = await open_rollouts(mock, 1)
    tally = Tally()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    body = json.dumps(VALID["/chat/completions"]).encode()
    url = f"{root}/v1/chat/completions"
    await asyncio.gather(*(send(http, tally, "POST", url, body, headers) for _ in range(2 * MAX_CALLS_IN_FLIGHT)))
    return tally


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with MockModelServer() as mock:
        rollouts = await open_rollouts(mock, args.rollouts)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as http:
            fuzzed = await fuzz(http, rollouts, args.requests, args.concurrency, args.seed)
            concurrent = await concurrency_phase(http, rollouts)
            mock.responder = lambda request: Reply.text("slow", delay=0.5)
            flooded = await flood_phase(http, mock)
    return {"fuzz": fuzzed.summary(), "concurrency": concurrent.summary(), "flood": flooded.summary()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if min(args.requests, args.rollouts, args.concurrency) < 1:
        parser.error("--requests, --rollouts and --concurrency must be at least 1")
    figures = asyncio.run(run(args))
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)
    broken = sum(phase["5xx"] + phase["stalls"] for phase in figures.values())
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
