"""The physical limit: a bare aiohttp client posting Chat Completions requests to a mock, no v1 in the way.

    python benchmarks/raw_driver.py --url URL [--n 4000] [--concurrency 256]

Prints one JSON line with the same keys `commit_driver.py` prints (`rollouts_per_s` here counts
requests), so `rate_vs_raw.py` reads both alike: requests/s, CPU ms of this process per request,
wall time and failed requests. Each answer is read and parsed, as a client must. `--gate` works as
`commit_driver.py`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import aiohttp
from commit_driver import MODEL, WARMUP, gate, run_loop, timed

BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}).encode()
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer raw"}


async def requests(url: str, n: int, concurrency: int, gated: bool = False) -> dict[str, Any]:
    limit = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def one() -> bool:
            async with limit, session.post(f"{url}/chat/completions", data=BODY, headers=HEADERS) as answer:
                content = json.loads(await answer.read())
            return answer.status == 200 and bool(content["choices"])

        await asyncio.gather(*(one() for _ in range(min(WARMUP, n))))
        if gated:
            await gate("READY")
        figures = await timed(lambda: asyncio.gather(*(one() for _ in range(n))), n)
        if gated:
            await gate("DONE")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the mock model server's base URL")
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--gate", action="store_true", help="wait for a stdin line before and after the timed requests")
    args = parser.parse_args(argv)
    if args.n < 1 or args.concurrency < 1:
        parser.error("--n and --concurrency must be at least 1")
    print(json.dumps(run_loop(requests(args.url, args.n, args.concurrency, args.gate))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
