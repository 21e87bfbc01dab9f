"""A network policy enforced on real bubblewrap sandboxes: hosts served on this machine's loopback.

Each probe is sent from inside the sandbox as a program would send it: through the proxy the
environment names, with the proxy variables unset, straight to an address, to the endpoint's port.
The allow entries name `localhost:PORT`, which the proxy resolves through the system resolver.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.config import NetworkPolicy
from v1.sandbox import EndpointTarget, get_manager, network_tally
from v1.sandbox._egress_proxy import MAX_DENIED_HOSTS, EgressProxy, NetworkTally
from v1.testing import MockModelServer

PROBE = r"""
import json, os, socket, sys, urllib.request

PROXY = ("127.0.0.1", int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1]))

def connect(target):
    # What an HTTPS client sends its proxy: CONNECT host:port, then its bytes through the tunnel.
    s = socket.create_connection(PROXY, timeout=30)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    answer = s.recv(4096)
    status = answer.split(b"\r\n")[0].decode()
    if " 200 " not in status:
        return status + " | " + answer.split(b"\r\n\r\n", 1)[-1].decode().strip()
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    body = b""
    while chunk := s.recv(4096):
        body += chunk
    return status + " | " + body.split(b"\r\n\r\n", 1)[1].decode()

def direct(host, port):
    try:
        socket.create_connection((host, port), timeout=5)
        return "CONNECTED"
    except OSError as exc:
        return type(exc).__name__

def fetch(url, proxies=None):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies)) if proxies is not None else urllib.request.build_opener()
    try:
        return opener.open(url, timeout=30).read().decode()
    except Exception as exc:
        return f"{type(exc).__name__}: {getattr(exc, 'code', '')}"

out = {}
for name, target in json.loads(sys.argv[1]).items():
    out[name] = connect(target)
out["plain_http"] = fetch(sys.argv[2])
out["unset_proxy"] = fetch(sys.argv[2], proxies={})
out["direct_loopback"] = direct("127.0.0.1", int(sys.argv[3]))
out["direct_name"] = direct("localhost", int(sys.argv[3]))
print(json.dumps(out))
"""


class _Named(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.server.name}".encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hosts() -> Iterator[dict[str, int]]:
    """Three HTTP servers on this machine's loopback, by name: their ports."""
    servers = {}
    for name in ("allowed", "blocked", "unlisted"):
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Named)
        server.name = name  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[name] = server
    yield {name: server.server_address[1] for name, server in servers.items()}
    for server in servers.values():
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def private_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


def _listening() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


async def test_t14_t15_only_allowed_hosts_answer_and_there_is_no_other_way_out(hosts: dict[str, int]) -> None:
    endpoint = _listening()  # stands in for the endpoint: the proxy must never reach its port
    endpoint_port = endpoint.getsockname()[1]
    allowed, blocked, unlisted = hosts["allowed"], hosts["blocked"], hosts["unlisted"]
    policy = {
        "allow": [f"localhost:{allowed}", f"localhost:{blocked}", f"127.0.0.1:{endpoint_port}", "*.example"],
        "block": [f"localhost:{blocked}"],
    }
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig(network=policy), endpoint=EndpointTarget("127.0.0.1", endpoint_port))
    targets = {
        "allowed": f"localhost:{allowed}",
        "blocked": f"localhost:{blocked}",
        "unlisted": f"localhost:{unlisted}",
        "literal_ip": f"127.0.0.1:{allowed}",
        "endpoint_by_address": f"127.0.0.1:{endpoint_port}",
    }
    rollout_env = {"OPENAI_BASE_URL": f"http://127.0.0.1:{endpoint_port}/r/netprobe/v1"}
    try:
        result = await sandbox.exec(
            ["python", "-c", PROBE, json.dumps(targets), f"http://localhost:{allowed}/", str(allowed)],
            env=rollout_env,
            timeout=HANG_S,
        )
    finally:
        await manager.delete(sandbox)
        endpoint.close()
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["allowed"] == "HTTP/1.1 200 Connection established | hello from allowed"
    assert out["plain_http"] == "hello from allowed"
    reasons = {
        "blocked": "in the sandbox's network block list",
        "unlisted": "not in the sandbox's network allow list",
        "literal_ip": "not in the sandbox's network allow list",  # names match names, addresses addresses
        "endpoint_by_address": "the endpoint is reached through its own relay, never through the proxy",
    }
    for refused, reason in reasons.items():
        assert out[refused].startswith("HTTP/1.1 403 ") and out[refused].endswith(reason), (refused, out[refused])
    assert out["unset_proxy"].startswith("URLError"), out["unset_proxy"]
    assert out["direct_loopback"] == "ConnectionRefusedError" and out["direct_name"] != "CONNECTED"
    tally = network_tally("netprobe", done=True)
    assert tally is not None and tally["allowed"] == 2 and tally["denied"] == 4
    assert set(tally["denied_hosts"]) == {
        f"localhost:{blocked}",
        f"localhost:{unlisted}",
        f"127.0.0.1:{allowed}",
        f"127.0.0.1:{endpoint_port}",
    }


AGENT = r"""
import os, socket, sys, urllib.request, openai
reply = openai.OpenAI().chat.completions.create(model=os.environ["V1_MODEL"], messages=[{"role": "user", "content": "hi"}])
print(reply.choices[0].message.content)
for port in sys.argv[1:]:
    try:
        print(urllib.request.urlopen(f"http://localhost:{port}/", timeout=30).read().decode())
    except Exception as exc:
        print(type(exc).__name__, getattr(exc, "code", ""))
"""


async def test_a_rollout_records_its_connections_and_a_row_narrows_but_never_widens(
    tmp_path: Path, mock: MockModelServer, hosts: dict[str, int]
) -> None:
    allowed, blocked = hosts["allowed"], hosts["blocked"]
    harness = vf.Harness(
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="m",
        timeout_seconds=HANG_S,
        program={"command": ["python", "agent.py", str(allowed), str(blocked)], "files": {"agent.py": AGENT}},
        sandbox={"memory_gb": 1, "network": {"allow": [f"localhost:{allowed}", f"localhost:{blocked}"]}},
    )
    state = await harness.run({"prompt": "p"})
    assert state["error"] is None, state["error"]
    assert state["program_result"]["stdout"].splitlines() == ["hi", "hello from allowed", "hello from blocked"]
    assert state["network"] == {"allowed": 2, "denied": 0, "denied_hosts": []}

    narrowed = await harness.run({"prompt": "p", "sandbox": {"network": {"allow": [f"localhost:{allowed}"]}}})
    assert narrowed["error"] is None, narrowed["error"]
    assert narrowed["program_result"]["stdout"].splitlines() == ["hi", "hello from allowed", "HTTPError 403"]
    assert narrowed["network"] == {"allowed": 1, "denied": 1, "denied_hosts": [f"localhost:{blocked}"]}
    assert len(narrowed["trajectory"]) == 1

    off = await harness.run({"prompt": "p", "sandbox": {"network": "none"}})
    assert off["error"] is None, off["error"]
    lines = off["program_result"]["stdout"].splitlines()
    assert lines[0] == "hi" and len(off["trajectory"]) == 1  # the endpoint answers under "none"
    assert all(line.startswith("URLError") for line in lines[1:]) and "network" not in off

    widened = await harness.run({"prompt": "p", "sandbox": {"network": {"allow": [f"localhost:{hosts['unlisted']}"]}}})
    assert widened["error"] is not None and widened["error"]["type"] == "TaskError"
    assert widened["error"]["message"].startswith("task field 'sandbox.network': ") and widened.get("program_result") is None


async def _ask(path: Path, request: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(request)
    answer = await asyncio.wait_for(reader.read(4096), HANG_S)
    writer.close()
    return answer


async def test_the_proxy_keeps_wildcards_off_this_machine_and_names_at_most_so_many_denied_hosts(
    tmp_path: Path, hosts: dict[str, int]
) -> None:
    tally = NetworkTally()
    proxy = EgressProxy(NetworkPolicy(allow=["*", f"localhost:{hosts['allowed']}"]), EndpointTarget("127.0.0.1", 9), tally)
    server = await asyncio.start_unix_server(proxy.serve, path=str(tmp_path / "p.sock"))
    try:
        exact = await _ask(tmp_path / "p.sock", f"CONNECT localhost:{hosts['allowed']} HTTP/1.1\r\n\r\n".encode())
        assert exact.startswith(b"HTTP/1.1 200 ")
        # `*` matches the name localhost, but it resolves to this machine: only an exact entry reaches it
        by_wildcard = await _ask(tmp_path / "p.sock", f"CONNECT localhost:{hosts['unlisted']} HTTP/1.1\r\n\r\n".encode())
        assert by_wildcard.startswith(b"HTTP/1.1 403 ") and b"exact allow entry" in by_wildcard
        address = await _ask(tmp_path / "p.sock", f"GET http://127.0.0.1:{hosts['allowed']}/ HTTP/1.1\r\n\r\n".encode())
        assert address.startswith(b"HTTP/1.1 403 ") and b"not in the sandbox's network allow list" in address
        for bad in (b"GET / HTTP/1.1\r\n\r\n", b"CONNECT a b HTTP/1.1\r\n\r\n", b"CONNECT x:0 HTTP/1.1\r\n\r\n", b"\0\r\n\r\n"):
            assert (await _ask(tmp_path / "p.sock", bad)).startswith(b"HTTP/1.1 400 "), bad
        for port in range(1, MAX_DENIED_HOSTS + 10):
            assert (await _ask(tmp_path / "p.sock", f"CONNECT 10.9.9.9:{port} HTTP/1.1\r\n\r\n".encode())).startswith(
                b"HTTP/1.1 403 "
            )
    finally:
        server.close()
    assert tally.allowed == 1 and tally.denied == 2 + MAX_DENIED_HOSTS + 9
    assert len(tally.denied_hosts) == MAX_DENIED_HOSTS


async def test_a_child_harness_reaches_no_more_than_its_parent_rollouts_sandbox(
    mock: MockModelServer, hosts: dict[str, int]
) -> None:
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    probe = [
        "python",
        "-c",
        f"import urllib.request; print(urllib.request.urlopen('http://localhost:{hosts['allowed']}/').read().decode())",
    ]

    def child(network: Any) -> vf.Harness:
        sandbox = {"memory_gb": 1, "network": network}
        return vf.Harness(client=client, model="m", timeout_seconds=HANG_S, program={"command": probe}, sandbox=sandbox)

    children: list[vf.State] = []

    async def parent_program(task: Any, state: Any) -> None:
        children.append(await child({"allow": [f"localhost:{hosts['allowed']}", "*.example"]}).run({"prompt": "wider"}))
        children.append(await child({"allow": [f"localhost:{hosts['allowed']}"]}).run({"prompt": "within"}))

    parent = vf.Harness(
        client=client,
        model="m",
        timeout_seconds=HANG_S,
        program=parent_program,
        sandbox={"memory_gb": 1, "network": {"allow": [f"localhost:{hosts['allowed']}"], "block": ["*.test"]}},
    )
    state = await parent.run({"prompt": "p"})
    assert state["error"] is None, state["error"]
    wider, within = children
    assert wider["error"] is not None and wider["error"]["type"] == "TaskError"
    assert wider["error"]["message"].startswith("a child harness's sandbox.network: allow entry '*.example' is not within")
    assert within["error"] is None, within["error"]
    assert within["program_result"]["stdout"] == "hello from allowed\n"
    assert within["network"] == {"allowed": 1, "denied": 0, "denied_hosts": []}
