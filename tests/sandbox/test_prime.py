"""The prime backend with the real prime-sandboxes SDK against a local fake of the service."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import v1 as vf
from v1.sandbox import EndpointTarget, get_backend, get_manager, list_sandboxes, register_backend
from v1.sandbox._prime import PrimeBackend, create_request_fields, rewrite_url
from v1.testing import MockModelServer

from .prime_fake import FakePrime


class ForwardingTunnel:
    """A real TCP forwarder on a new local port, standing in for a public tunnel."""

    def __init__(self) -> None:
        self.server: asyncio.AbstractServer | None = None
        self.connections = 0

    async def open(self, target: EndpointTarget) -> str:
        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            up_reader, up_writer = await asyncio.open_connection(target.host, target.port)

            async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
                dst.close()

            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer), return_exceptions=True)

        self.server = await asyncio.start_server(relay, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakePrime]:
    service = await FakePrime().start()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the SDK keeps an auth cache under ~/.prime
    monkeypatch.setenv("PRIME_API_BASE_URL", service.url)
    monkeypatch.setenv("PRIME_API_KEY", "fake-key")
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))
    register_backend("prime", PrimeBackend)  # a fresh backend: its SDK client reads the settings above
    yield service
    await service.close()


def test_seed_fields_map_onto_the_create_request() -> None:
    config = vf.SandboxConfig(
        backend="prime",
        image="ubuntu:24.04",
        start_command="tail -f /dev/null",
        cpu_cores=2,
        memory_gb=4,
        disk_size_gb=20,
        gpu_count=1,
        timeout_minutes=30.5,
        env={"A": "1"},
        labels=["x"],
    )
    fields = create_request_fields(config, "v1-abc", ["v1", "x"])
    assert fields == {
        "name": "v1-abc",
        "docker_image": "ubuntu:24.04",
        "cpu_cores": 2,
        "memory_gb": 4,
        "disk_size_gb": 20,
        "gpu_count": 1,
        "timeout_minutes": 31,
        "labels": ["v1", "x"],
        "start_command": {"executable": "tail", "args": ["-f", "/dev/null"]},
        "environment_vars": {"A": "1"},
        "network_allowlist": [],
    }
    assert rewrite_url("http://127.0.0.1:5555/r/abc/v1", "https://t.example/p") == "https://t.example/p/r/abc/v1"


async def test_command_program_on_prime_through_the_sdk_and_a_tunnel(fake: FakePrime, mock: MockModelServer) -> None:
    tunnel = ForwardingTunnel()
    backend = get_backend("prime")
    assert isinstance(backend, PrimeBackend)
    backend.tunnel = tunnel
    script = (
        'curl -sS --fail-with-body "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" '
        "-H 'Content-Type: application/json' -d @request.json > answer.json"
    )
    program = {
        "command": ["sh", "-c", script],
        "files": {"request.json": '{"model": "x", "messages": [{"role": "user", "content": "via prime"}]}'},
        "artifacts": [{"path": "answer.json", "format": "json"}],
    }
    harness = vf.Harness(
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="m",
        program=program,
        sandbox={"backend": "prime", "memory_gb": 4, "image": "python:3.12"},
    )
    fake.fail_creates = 1  # the manager retries creation
    state = await harness.run("x")
    assert state["error"] is None, (state["error"], state.get("program_result"))
    assert state["artifacts"]["answer.json"]["choices"][0]["message"]["content"] == "via prime"
    assert len(state["trajectory"]) == 1 and tunnel.connections == 1
    [request] = fake.requests
    assert request.docker_image == "python:3.12" and request.memory_gb == 4 and "v1" in request.labels
    tunnel_port = tunnel.server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    assert request.network_allowlist == [f"127.0.0.1:{tunnel_port}"]  # network "none": the endpoint only
    command = fake.commands[-1]  # after the SDK's readiness probe
    assert command["cmd"] == "/bin/bash" and command["envs"]["OPENAI_BASE_URL"].startswith(
        f"http://127.0.0.1:{tunnel.server.sockets[0].getsockname()[1]}/r/"  # type: ignore[union-attr]
    )
    assert fake.deleted and not fake.sandboxes and list_sandboxes() == []
    await tunnel.close()


async def test_prime_delete_is_retried_and_missing_tunnel_is_clear(fake: FakePrime) -> None:
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig(backend="prime"))
    result = await sandbox.exec(["sh", "-c", "echo out; echo err >&2; exit 4"])
    assert (result.exit_code, result.stdout, result.stderr) == (4, "out\n", "err\n")
    await sandbox.write_file("a/b.txt", b"payload")
    assert await sandbox.read_file("a/b.txt", 100) == b"payload"
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("missing.txt", 100)
    fake.fail_deletes = 2
    await manager.delete(sandbox)
    assert fake.deleted == [sandbox.id] and list_sandboxes() == []
    with pytest.raises(vf.SandboxError, match="without a tunnel: set V1_SANDBOX_TUNNEL"):
        await manager.create(vf.SandboxConfig(backend="prime"), endpoint=EndpointTarget("127.0.0.1", 1))


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        ("all", {}),
        ("none", {"network_allowlist": ["t.example"]}),
        ({"allow": ["pypi.org", "*.pythonhosted.org:443"]}, {"network_allowlist": ["pypi.org", "*.pythonhosted.org:443", "t.example"]}),
        ({"allow": ["*"], "block": ["evil.example", "10.0.0.0"]}, {"network_denylist": ["evil.example", "10.0.0.0"]}),
        ({"allow": ["*"]}, {}),
    ],
)  # fmt: skip
def test_a_network_policy_maps_onto_the_sdks_egress_lists(network: object, expected: dict[str, list[str]]) -> None:
    fields = create_request_fields(vf.SandboxConfig(backend="prime", network=network), "v1-abc", ["v1"], "https://t.example/p")
    assert {key: value for key, value in fields.items() if key.startswith("network_")} == expected


@pytest.mark.parametrize(
    ("network", "why"),
    [
        ({"allow": ["pypi.org"], "block": ["evil.pypi.org"]}, "an allow list with blocks"),
        ({"allow": ["pypi.org:8080"]}, "domain entries support only ports 80 and 443"),
        ({"allow": ["[2001:db8::1]:443"]}, "can't enforce IPv6 entries"),
        ({"allow": ["*", "pypi.org"]}, "'*'"),
    ],
)
async def test_a_policy_the_sdk_cannot_express_is_refused_in_one_line(fake: FakePrime, network: object, why: str) -> None:
    with pytest.raises(vf.SandboxError) as caught:
        await get_manager().create(vf.SandboxConfig(backend="prime", network=network))
    assert why in str(caught.value) and "\n" not in str(caught.value)
    assert fake.requests == [] and list_sandboxes() == []


async def test_packages_on_a_prime_sandbox_without_network_are_refused_before_creating_it(fake: FakePrime) -> None:
    with pytest.raises(vf.SandboxError) as caught:
        await get_manager().create(vf.SandboxConfig(backend="prime", packages=["requests"]))
    assert "network is 'none'" in str(caught.value) and "pypi.org" in str(caught.value) and "\n" not in str(caught.value)
    assert fake.requests == [] and list_sandboxes() == []
    allowed = vf.SandboxConfig(backend="prime", packages=["requests"], network={"allow": ["pypi.org", "files.pythonhosted.org"]})
    fields = create_request_fields(allowed, "v1-abc", ["v1"], "https://t.example/p")
    assert fields["network_allowlist"] == ["pypi.org", "files.pythonhosted.org", "t.example"]
