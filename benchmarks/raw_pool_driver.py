"""The mock's own limit: a bare client on v1's plain pool (`PlainHTTPPool`) posting Chat Completions requests.

    python benchmarks/raw_pool_driver.py --url URL [--n 4000] [--concurrency 256]

`raw_driver.py`'s requests, posted through the keep-alive pool v1's endpoint posts through rather than
aiohttp's client (whose own instructions grow at high concurrency). It takes about 60% of the raw
client's CPU a request, so on this machine the mock, not this process, is what its rate meets: what the
mock itself loses at 256 against 64 shows here. Prints `commit_driver.py`'s keys (`rollouts_per_s`
counts requests); `--gate` works as theirs.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any
from urllib.parse import urlsplit

from commit_driver import MODEL, plain_main, warmed_and_timed

from v1.clients._answer_limits import AnswerLimits
from v1.clients._plain_http import PlainHTTPPool

BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}).encode()
MAX_ANSWER_BYTES = 1 << 24
ANSWER_SECONDS = 600.0


async def requests(url: str, n: int, concurrency: int, gated: bool = False) -> dict[str, Any]:
    address = urlsplit(url)
    if address.scheme != "http" or address.hostname is None or address.port is None:
        print(
            f"raw_pool_driver.py: --url {url!r} must be http://HOST:PORT/... (the plain pool speaks plain HTTP)", file=sys.stderr
        )
        raise SystemExit(2)
    path = f"{address.path.rstrip('/')}/chat/completions".encode()
    request = (
        b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\nAuthorization: Bearer raw\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (path, address.hostname.encode(), address.port, len(BODY), BODY)
    )
    pool = PlainHTTPPool(address.hostname, address.port, max_connections=concurrency, connect_timeout=30, read_timeout=60)
    limit = asyncio.Semaphore(concurrency)

    async def one() -> bool:
        async with limit:
            status, _, body = await pool.post(request, AnswerLimits(url, MAX_ANSWER_BYTES, ANSWER_SECONDS))
        return status == 200 and bool(json.loads(body)["choices"])

    try:
        return await warmed_and_timed(one, n, gated)
    finally:
        pool.close()


def main(argv: list[str] | None = None) -> int:
    return plain_main(__doc__ or "", requests, "requests", argv)


if __name__ == "__main__":
    sys.exit(main())
