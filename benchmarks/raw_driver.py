"""The physical limit: a bare aiohttp client posting Chat Completions requests to a mock, no v1 in the way.

    python benchmarks/raw_driver.py --url URL [--n 4000] [--concurrency 256]

Prints one JSON line with the same keys `commit_driver.py` prints (`rollouts_per_s` here counts
requests), so `rate_vs_raw.py` reads both alike: requests/s, CPU ms of this process per request,
wall time and failed requests. Each answer is read and parsed, as a client must. `--gate` works as
`commit_driver.py`'s.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import aiohttp
from commit_driver import MODEL, plain_main, warmed_and_timed

BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}).encode()
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer raw"}


async def requests(url: str, n: int, concurrency: int, gated: bool = False) -> dict[str, Any]:
    limit = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def one() -> bool:
            async with limit, session.post(f"{url}/chat/completions", data=BODY, headers=HEADERS) as answer:
                content = json.loads(await answer.read())
            return answer.status == 200 and bool(content["choices"])

        return await warmed_and_timed(one, n, gated)


def main(argv: list[str] | None = None) -> int:
    return plain_main(__doc__ or "", requests, "requests", argv)


if __name__ == "__main__":
    sys.exit(main())
