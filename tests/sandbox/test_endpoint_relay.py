"""C2: a program's connections to the endpoint can't exhaust the host's file descriptors or hold it with slow heads."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

import v1 as vf
from tests.tools.patience import HANG_S, arrives
from v1.sandbox import EndpointTarget
from v1.sandbox._endpoint_relay import MAX_CONNECTIONS, EndpointRelay, RolloutRelays, pin_head
from v1.testing import MockModelServer


@pytest.fixture(autouse=True)
def private_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


async def echo_endpoint() -> tuple[asyncio.AbstractServer, EndpointTarget]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, EndpointTarget("127.0.0.1", server.sockets[0].getsockname()[1])


async def test_connections_past_the_cap_get_a_503_and_slow_heads_are_dropped(tmp_path: Path) -> None:
    server, target = await echo_endpoint()
    # The cap and the head timeout are two relays: held heads must not time out before the cap is tried.
    capped = EndpointRelay(target, "x", max_connections=4, head_timeout=HANG_S)
    hasty = EndpointRelay(target, "x", max_connections=4, head_timeout=0.5)
    path, hasty_path = str(tmp_path / "endpoint.sock"), str(tmp_path / "hasty.sock")
    unix = await asyncio.start_unix_server(capped.serve, path=path)
    hasty_unix = await asyncio.start_unix_server(hasty.serve, path=hasty_path)
    try:
        held = [await asyncio.open_unix_connection(path) for _ in range(4)]
        for _, writer in held:
            writer.write(b"POST /r/x/v1/chat/completions HTTP/1.1\r\n")  # a head that never ends
        await arrives(lambda: capped.open == 4, "the relay to take the 4 connections")
        reader, writer = await asyncio.open_unix_connection(path)
        refused = await asyncio.wait_for(reader.read(), HANG_S)
        assert refused.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in refused
        assert json.loads(refused.partition(b"\r\n\r\n")[2])["error"]["code"] == "too_many_connections"
        assert capped.refused == 1
        for reader, writer in held:  # their programs give up: the slots are free again
            writer.write_eof()
            assert await asyncio.wait_for(reader.read(), HANG_S) == b""
        await arrives(lambda: capped.open == 0, "the relay to free the slots")
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await asyncio.wait_for(reader.read(), HANG_S)).endswith(b"ok")

        slowloris = [await asyncio.open_unix_connection(hasty_path) for _ in range(4)]
        for _, writer in slowloris:
            writer.write(b"POST /r/x/v1/chat/completions HTTP/1.1\r\n")
        for reader, _ in slowloris:  # the slowloris heads are dropped at head_timeout
            assert await asyncio.wait_for(reader.read(), HANG_S) == b""
        await arrives(lambda: hasty.open == 0, "the relay to free the slots")
        assert hasty.refused == 0
    finally:
        unix.close()
        hasty_unix.close()
        server.close()


FLOOD = """
import json, os, selectors, socket, time
port = int(os.environ["OPENAI_BASE_URL"].split(":")[2].split("/")[0])
held, refused, failed = [], 0, 0
for _ in range(1000):
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        failed += 1
        continue
    held.append(sock)
# The relay answers each connection past its cap; the rest wait for a head. Wait for the answers, however slow.
waiting, answered = selectors.DefaultSelector(), []
for sock in held:
    waiting.register(sock, selectors.EVENT_READ)
deadline = time.monotonic() + HANG_S
while len(answered) < len(held) - MAX_CONNECTIONS and time.monotonic() < deadline:
    for key, _ in waiting.select(timeout=1):
        waiting.unregister(key.fileobj)
        answered.append(key.fileobj)
for sock in answered:
    try:
        if sock.recv(12).startswith(b"HTTP/1.1 503"):
            refused += 1
    except OSError:
        pass
json.dump({"held": len(held), "refused": refused, "failed": failed}, open("flood.json", "w"))
"""

CALLER = """
import openai
answer = openai.OpenAI(max_retries=0).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
open("answer.txt", "w").write(answer.choices[0].message.content)
"""


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_connection_flood_does_not_reach_the_hosts_fds_or_other_rollouts(mock: MockModelServer) -> None:
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    flood = vf.Harness(
        client=client,
        model="m",
        program={
            "command": ["python", "flood.py"],
            "files": {"flood.py": f"HANG_S, MAX_CONNECTIONS = {HANG_S}, {MAX_CONNECTIONS}\n{FLOOD}"},
            "artifacts": [{"path": "flood.json", "format": "json"}],
        },
        sandbox={"memory_gb": 1},
    )
    caller = vf.Harness(
        client=client,
        model="m",
        program={"command": ["python", "caller.py"], "files": {"caller.py": CALLER}, "artifacts": ["answer.txt"]},
        sandbox={},
    )
    before = open_fds()
    peak = before

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, open_fds())
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch())
    try:
        flooded = asyncio.create_task(flood.run({"prompt": "flood"}))
        # the caller runs while the flood holds its connections
        await arrives(lambda: flooded.done() or peak >= before + MAX_CONNECTIONS, "the flood's connections")
        called = await caller.run({"prompt": "hi"})
        flooded_state = await flooded
    finally:
        watcher.cancel()
    assert called["error"] is None, called["error"]
    assert called["artifacts"]["answer.txt"]
    assert flooded_state["error"] is None, (flooded_state["error"], flooded_state.get("program_result"))
    counts = flooded_state["artifacts"]["flood.json"]
    assert counts["refused"] >= 1000 - MAX_CONNECTIONS - counts["failed"] - 50, counts
    assert peak - before < 3 * MAX_CONNECTIONS + 100, (before, peak)


@pytest.mark.parametrize(
    "head",
    [
        b"GET /r/a/v1/models HTTP/1.1\r\nHost: x\nX-V1-Rollout: b\r\n\r\n",  # a bare LF smuggles a header
        b"GET /r/a/v1/models HTTP/1.1\r\nHost: x\rX-V1-Rollout: b\r\n\r\n",  # a bare CR
        b"GET /r/a/v1/models HTTP/1.1\r\nHost: x\r\n X-V1-Rollout: b\r\n\r\n",  # a folded line
        b"GET /r/a/v1/models HTTP/1.1\r\nX-V1-Rollout : b\r\n\r\n",  # space before the colon
        b"GET /r/a/v1/models HTTP/1.1\r\nno colon here\r\n\r\n",
        b"GET /r/a/v1/models HTTP/1.1\r\n: empty name\r\n\r\n",
        b"GET /r/a/v1/models\0 HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
)
def test_a_head_that_is_not_plain_http_is_refused(head: bytes) -> None:
    assert pin_head(head, "a") is None


def test_the_pin_replaces_any_the_program_sent_and_closes_the_connection() -> None:
    head = b"POST /r/b/v1/chat HTTP/1.1\r\nx-v1-rollout: b\r\nX-V1-ROLLOUT: b\r\nConnection: keep-alive, Upgrade\r\nKeep-Alive: 5\r\n\r\n"
    pinned = pin_head(head, "a")
    assert pinned == b"POST /r/b/v1/chat HTTP/1.1\r\nConnection: close\r\nX-V1-Rollout: a\r\n\r\n"


async def test_a_malformed_or_endless_head_never_reaches_the_endpoint(tmp_path: Path) -> None:
    reached: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0)
    relay = EndpointRelay(EndpointTarget("127.0.0.1", server.sockets[0].getsockname()[1]), "a", head_timeout=2)
    path = str(tmp_path / "endpoint.sock")
    unix = await asyncio.start_unix_server(relay.serve, path=path)
    try:
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(b"GET /r/a/v1/models HTTP/1.1\r\nHost: x\nX-V1-Rollout: b\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), HANG_S)
        assert answer.startswith(b"HTTP/1.1 400") and json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"]
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(b"GET / HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 70000 + b"\r\n")  # past MAX_HEAD_BYTES, no end
        assert await asyncio.wait_for(reader.read(), HANG_S) == b""
    finally:
        unix.close()
        server.close()
    assert reached == []


async def test_a_rollouts_socket_is_shared_by_its_commands_and_goes_with_the_last(tmp_path: Path) -> None:
    server, target = await echo_endpoint()
    relays = RolloutRelays(target, tmp_path)
    try:
        first, second = await asyncio.gather(relays.acquire("a"), relays.acquire("a"))  # two commands start at once
        other = await relays.acquire("b")
        assert first == second != other and len(relays.servers) == 2
        await relays.release("a")
        reader, writer = await asyncio.open_unix_connection(str(first))  # the other command still reaches it
        writer.write(b"GET /r/a/v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await asyncio.wait_for(reader.read(), HANG_S)).endswith(b"ok")
        await relays.release("a")
        assert not first.exists() and other.exists() and list(relays.servers) == ["b"]
        with pytest.raises(OSError):
            await asyncio.open_unix_connection(str(first))
    finally:
        await relays.close()
        server.close()
