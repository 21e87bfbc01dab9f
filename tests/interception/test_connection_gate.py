"""C2 over TCP: a flood of connections from an unsandboxed command can't exhaust the endpoint's descriptors.

The scenario runs in a child interpreter whose open-file soft limit is 1,024 (as on many hosts), the hard
limit 1,024 or 4,096, so the endpoint would reach EMFILE before the flood's 2,000 connections if it
accepted them all at that limit.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools.patience import HANG_S
from v1._util.descriptors import raise_descriptor_limit
from v1.interception._connection_gate import MAX_CONNECTIONS, connection_limit

REPO = Path(__file__).resolve().parents[2]

ATTEMPTS = 2000
FLOOD = (
    f"ATTEMPTS, HANG_S = {ATTEMPTS}, {HANG_S}\n"
    + """
import json, os, resource, socket, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
HOLD = hard - 224
port = int(os.environ["OPENAI_BASE_URL"].split(":")[2].split("/")[0])
held, refused, dropped, failed, released = [], 0, 0, 0, 0


def sweep(sockets):
    global refused, dropped
    kept = []
    for sock in sockets:
        try:
            data = sock.recv(16)
        except BlockingIOError:
            kept.append(sock)
            continue
        except OSError:
            data = b""
        refused += data.startswith(b"HTTP/1.1 503")
        dropped += not data
        sock.close()
    return kept


for attempt in range(ATTEMPTS):
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=HANG_S)
    except OSError:
        failed += 1
        continue
    sock.setblocking(False)
    held.append(sock)
    if len(held) >= HOLD:  # its own descriptors are limited too: drop those answered, then the oldest
        held = sweep(held)
        while len(held) >= HOLD:
            held.pop(0).close()
            released += 1
open("holding", "w").close()
deadline = time.monotonic() + HANG_S  # the endpoint answers those past its LIMIT (503 or eviction) when it gets to them
while (held := sweep(held)) and len(held) > LIMIT + 128 and time.monotonic() < deadline:
    time.sleep(0.05)
counts = {"held": len(held), "refused": refused, "dropped": dropped, "failed": failed, "released": released}
json.dump(counts, open("flood.json", "w"))
time.sleep(1)  # still holding while the other rollout runs
"""
)

CALLER = """
import openai
answer = openai.OpenAI(max_retries=3).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi there"}])
print(answer.choices[0].message.content)
"""

SCENARIO = """
import asyncio, io, json, logging, os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, {limits!r})
sys.path.insert(0, {repo!r})
log = io.StringIO()
logging.basicConfig(stream=log, level=logging.INFO)
import v1 as vf
from v1.testing import MockModelServer

FLOOD, CALLER = {flood!r}, {caller!r}


def fds():
    return len(os.listdir("/proc/self/fd"))


async def main():
    with MockModelServer() as mock:
        client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
        flood = vf.Harness(client=client, model="m", timeout_seconds={hang}, program={{
            "command": [sys.executable, "flood.py"], "files": {{"flood.py": FLOOD}},
            "artifacts": [{{"path": "flood.json", "format": "json"}}]}})
        caller = vf.Harness(client=client, model="m", timeout_seconds={hang}, program={{
            "command": [sys.executable, "caller.py"], "files": {{"caller.py": CALLER}}}})
        flooding = asyncio.ensure_future(flood.run({{"prompt": "flood"}}))
        peak = fds()
        while not (flooding.done() or peak >= 300):  # the caller starts while the flood holds its connections
            peak = max(peak, fds())
            await asyncio.sleep(0.05)
        called = await caller.run({{"prompt": "call"}})
        flooded = await flooding
    result = {{"called_error": called["error"], "called": called.get("program_result", {{}}).get("stdout"),
              "flood_error": flooded["error"], "flood": flooded.get("artifacts", {{}}).get("flood.json"),
              "trajectory": len(called["trajectory"]), "log_bytes": len(log.getvalue()), "peak_fds": peak}}
    print(json.dumps(result))


asyncio.run(main())
"""


@pytest.mark.parametrize("hard", [1024, 4096], ids=["at-the-hard-limit", "raised-to-the-hard-limit"])
def test_a_tcp_connection_flood_does_not_stop_a_concurrent_rollout(tmp_path: Path, hard: int) -> None:
    flood = f"LIMIT = {connection_limit(hard)}\n{FLOOD}"  # how many the endpoint holds once it raised its limit to hard
    script = SCENARIO.format(repo=str(REPO), flood=flood, caller=CALLER, limits=(1024, hard), hang=HANG_S)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        cwd=tmp_path,
        env=os.environ | {"PYTHONPATH": str(REPO), "V1_SANDBOX_ROOT": str(tmp_path / "sandboxes")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["called_error"] is None, result
    assert result["called"] == "hi there\n" and result["trajectory"] == 1
    assert result["flood_error"] is None, result
    counts = result["flood"]
    assert counts["failed"] == 0, counts
    if hard == 1024:  # the endpoint held at most its limit (half the descriptors) and let the rest go (503 or eviction)
        # (the limit is counted as connections are accepted, so a burst may overshoot it by a few)
        assert counts["held"] <= 512 + 128 and counts["refused"] + counts["dropped"] >= ATTEMPTS // 4, counts
        assert result["peak_fds"] < 1024 - 100, result  # the endpoint never came near EMFILE
    else:  # it raised its limit to 4,096 and held them all, below its connection limit of 2,048
        assert counts["held"] >= ATTEMPTS - 64, counts
    assert result["log_bytes"] < 20_000 and len(done.stderr) < 20_000, (result, done.stderr[-2000:])


@pytest.mark.parametrize(
    ("descriptors", "expected"), [(0, 32), (-1, 32), (1024, 512), (20_000, MAX_CONNECTIONS), (2**62, MAX_CONNECTIONS)]
)
def test_the_connection_limit_stays_within_bounds(descriptors: int, expected: int) -> None:
    assert connection_limit(descriptors) == expected


def test_the_descriptor_limit_is_raised_to_the_hard_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(soft, 256)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        now = raise_descriptor_limit()
        assert now == resource.getrlimit(resource.RLIMIT_NOFILE)[0] > lowered or hard == lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_connection_being_answered_is_never_evicted_an_idle_one_is() -> None:
    import asyncio

    from aiohttp import web

    from v1.interception._connection_gate import ConnectionGate

    release, begun = asyncio.Event(), asyncio.Event()
    gate: ConnectionGate

    async def slow(request: web.BaseRequest) -> web.StreamResponse:
        with gate.serving(request.transport):
            begun.set()
            await release.wait()
            response = web.Response(text="done")
            await response.prepare(request)
            await response.write_eof()
            return response

    server = web.Server(slow)
    gate = ConnectionGate(server, lambda: server.connections, limit=2)
    port = gate.listen("127.0.0.1", 16)
    busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", port)
    busy_writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await busy_writer.drain()
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.wait_for(begun.wait(), HANG_S)  # the first one's request is being answered

    async def both_accepted() -> None:  # aiohttp has no event for a connection made
        while len(server.connections) < 2:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    await asyncio.wait_for(both_accepted(), HANG_S)
    _, third_writer = await asyncio.open_connection("127.0.0.1", port)  # over the limit: the idle one goes
    assert await asyncio.wait_for(idle_reader.read(), HANG_S) == b""
    assert gate.evicted == 1 and gate.refused == 0
    release.set()
    assert (await asyncio.wait_for(busy_reader.readuntil(b"done"), HANG_S)).startswith(b"HTTP/1.1 200")
    for writer in (busy_writer, idle_writer, third_writer):
        writer.close()
    gate.close()
    await server.shutdown()
