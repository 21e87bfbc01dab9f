"""The local (bubblewrap) backend through the manager: isolation, limits, timeouts, cleanup."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.sandbox import EndpointTarget, get_backend, get_manager, list_sandboxes, reap_sandboxes, sandbox_root
from v1.sandbox import _manager as manager_module


@pytest.fixture(autouse=True)
def private_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "sandboxes"
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(root))
    return root


async def test_exec_streams_output_and_sees_only_its_workspace(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("TOP-SECRET")
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig())
    try:
        await sandbox.write_file("in.txt", b"hello")
        chunks: list[tuple[str, bytes]] = []
        result = await sandbox.exec(
            ["sh", "-c", f"cat in.txt; echo; cat {secret} || echo unreadable; ls /root/.ssh 2>&1; echo err >&2"],
            on_output=lambda stream, data: chunks.append((stream, data)),
        )
        assert result.exit_code == 0
        assert result.stdout.startswith("hello\nunreadable")
        assert "TOP-SECRET" not in result.stdout
        assert "err" in result.stderr and any(stream == "stderr" for stream, _ in chunks)
        await sandbox.exec(["sh", "-c", "echo out > made.txt"])
        assert await sandbox.read_file("made.txt", 100) == b"out\n"
        with pytest.raises(vf.SandboxError, match="outside the sandbox workspace"):
            await sandbox.read_file("/etc/passwd", 100)
    finally:
        await manager.delete(sandbox)
    assert not any(sandbox_root().joinpath("local").iterdir())
    assert list_sandboxes() == []


async def test_no_network_but_the_forwarded_endpoint() -> None:
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen()
    endpoint = socket.socket()
    endpoint.bind(("127.0.0.1", 0))
    endpoint.listen()
    endpoint_port, other_port = endpoint.getsockname()[1], other.getsockname()[1]

    async def answer() -> None:
        loop = asyncio.get_running_loop()
        endpoint.setblocking(False)
        conn, _ = await loop.sock_accept(endpoint)
        data = await loop.sock_recv(conn, 200)
        await loop.sock_sendall(conn, b"echo:" + data)
        conn.close()

    server = asyncio.create_task(answer())
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig(), endpoint=EndpointTarget("127.0.0.1", endpoint_port))
    probe = (
        "import socket,sys\n"
        f"s=socket.create_connection(('127.0.0.1',{endpoint_port}),timeout={HANG_S})\n"
        "s.sendall(b'GET /r/probe/v1/models HTTP/1.1\\r\\nConnection: keep-alive\\r\\n\\r\\n'); print(s.recv(200))\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1',{other_port}),timeout=2); print('OTHER-REACHED')\n"
        "except OSError as e: print('other refused')\n"
        "try:\n"
        "    socket.create_connection(('pypi.org',443),timeout=2); print('INTERNET')\n"
        "except OSError as e: print('no internet')\n"
    )
    try:
        rollout_url = f"http://127.0.0.1:{endpoint_port}/r/probe/v1"  # a command of rollout "probe"
        result = await sandbox.exec(["python", "-c", probe], env={"OPENAI_BASE_URL": rollout_url}, timeout=HANG_S)
        no_rollout = await sandbox.exec(["sh", "-c", "ls /run/v1 2>&1 || true"], timeout=HANG_S)
    finally:
        await manager.delete(sandbox)
        other.close()
        endpoint.close()
    await server
    # The relay pins the request to the command's rollout and closes the connection after it.
    head = rb"b'echo:GET /r/probe/v1/models HTTP/1.1\r\nConnection: close\r\nX-V1-Rollout: probe\r\n\r\n'"
    assert result.stdout.splitlines() == [head.decode(), "other refused", "no internet"], result.stderr
    assert "endpoint.sock" not in no_rollout.stdout  # a command of no rollout reaches no endpoint


async def test_timeout_kills_the_whole_tree_and_limits_are_reported() -> None:
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig(memory_gb=0.25, disk_size_gb=0.02))
    try:
        marker = f"v1-local-hang-{os.getpid()}"
        script = f"(sh -c 'sleep 300; : {marker}' &) ; (sh -c 'sleep 301; : {marker}' &); sleep 302; : {marker}"
        hang = await sandbox.exec(["sh", "-c", script], timeout=0.5)
        assert hang.timed_out and hang.exit_code == 137
        memory = await sandbox.exec(["python", "-c", "x = bytearray(1024 * 1024 * 1024)"], timeout=HANG_S)
        assert memory.limit == "memory" and not memory.ok
        disk = await sandbox.exec(["sh", "-c", "head -c 50000000 /dev/zero > big"], timeout=HANG_S)
        assert disk.limit == "disk"
        fine = await sandbox.exec(["sh", "-c", "rm big; echo still-fine"])
        assert fine.ok and fine.stdout == "still-fine\n"
    finally:
        await manager.delete(sandbox)
    assert not any(marker in _cmdline(pid) for pid in os.listdir("/proc") if pid.isdigit())


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


async def test_mounts_are_visible_read_only(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "tool.txt").write_text("installed once")
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig(mounts={"/opt/tools": str(shared)}))
    try:
        result = await sandbox.exec(["sh", "-c", "cat /opt/tools/tool.txt; echo; echo x > /opt/tools/tool.txt || echo refused"])
        assert result.stdout == "installed once\nrefused\n"
        assert (shared / "tool.txt").read_text() == "installed once"
    finally:
        await manager.delete(sandbox)
    with pytest.raises(vf.SandboxError, match="does not exist"):
        await manager.create(vf.SandboxConfig(mounts={"/opt/tools": str(tmp_path / "missing")}))


async def test_a_workdir_above_the_python_and_a_mount_inside_the_workdir_both_stay_visible(tmp_path: Path) -> None:
    """Binds go parent first: a workdir over the folder holding the interpreter (a venv in /work/venv with
    workdir /work) does not hide it, and a mount below the workdir is not hidden by the workspace."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.txt").write_text("mounted")
    workdir = str(Path(sys.prefix).parent)
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig(workdir=workdir, mounts={f"{workdir}/data": str(data)}))
    try:
        result = await sandbox.exec(["sh", "-c", f"pwd; cat data/rows.txt; echo; {sys.executable} -c 'print(7 * 6)'"])
        assert result.exit_code == 0, result.stderr
        assert result.stdout == f"{workdir}\nmounted\n42\n"
    finally:
        await manager.delete(sandbox)


def test_a_workdir_at_or_inside_the_pythons_folder_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(vf.SandboxError, match="would hide the Python"):
        asyncio.run(get_manager().create(vf.SandboxConfig(workdir=sys.prefix)))


async def test_the_hosts_ca_settings_reach_the_sandbox_only_when_it_shows_their_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bundle = "/etc/ssl/certs/ca-certificates.crt"  # Debian's ca-certificates bundle
    secret = tmp_path / "ca.pem"
    secret.write_text("host-only")
    monkeypatch.setenv("SSL_CERT_FILE", bundle)  # a TLS-inspecting proxy's CA, as a CI image sets it
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(secret))  # a host path the sandbox does not show
    monkeypatch.setenv("PIP_CERT", "/etc/ssl/../../root/x.pem")
    monkeypatch.setenv("OPENAI_API_KEY", "host-secret")
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig())
    try:
        result = await sandbox.exec(
            ["sh", "-c", 'echo "$SSL_CERT_FILE|$REQUESTS_CA_BUNDLE|$PIP_CERT|$OPENAI_API_KEY"; head -c 10 "$SSL_CERT_FILE"']
        )
        assert result.stdout.splitlines()[0] == f"{bundle}|||"
        assert len(result.stdout.splitlines()) > 1  # the bundle is readable inside
    finally:
        await manager.delete(sandbox)


async def test_failed_setup_deletes_the_sandbox() -> None:
    with pytest.raises(vf.SandboxError, match="setup command 'exit 3' exited 3"):
        await get_manager().create(vf.SandboxConfig(setup_commands=["echo ok", "exit 3"]))
    assert list_sandboxes() == []
    assert not any(sandbox_root().joinpath("local").iterdir())


async def test_host_wide_cap_makes_creators_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_MAX_SANDBOXES", "1")
    refusals = threading.Semaphore(0)
    try_slots = manager_module._try_slots

    def observed_try_slots(slots: Path, cap: int) -> Any:
        handle = try_slots(slots, cap)
        if handle is None:
            refusals.release()
        return handle

    monkeypatch.setattr(manager_module, "_try_slots", observed_try_slots)
    manager = get_manager()
    first = await manager.create(vf.SandboxConfig())
    second = asyncio.create_task(manager.create(vf.SandboxConfig()))
    for _ in range(2):  # refused a slot, then again on its retry: it waits rather than failing or going over the cap
        assert await asyncio.to_thread(refusals.acquire, timeout=HANG_S)
    assert not second.done()
    await manager.delete(first)
    await manager.delete(await asyncio.wait_for(second, HANG_S))


async def test_reap_deletes_leftovers_of_dead_processes(private_root: Path) -> None:
    backend = get_backend("local")
    orphan = await backend.create(vf.SandboxConfig(), endpoint=None, labels=())
    ledger = private_root / "ledger"
    ledger.mkdir(parents=True, exist_ok=True)
    (ledger / f"local--{orphan.id}.json").write_text(
        f'{{"backend": "local", "id": "{orphan.id}", "owner_pid": 999999999, "created": 1, "labels": []}}'
    )
    [record] = list_sandboxes()
    assert record.sandbox_id == orphan.id and not record.owner_alive
    reaped, failed = await reap_sandboxes()
    assert [r.sandbox_id for r in reaped] == [orphan.id] and failed == []
    assert list_sandboxes() == [] and not (private_root / "local" / orphan.id).exists()


async def test_missing_bubblewrap_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(vf.SandboxError, match="apt-get install -y bubblewrap"):
        await get_manager().create(vf.SandboxConfig())


def test_bad_sandbox_config_fails_with_the_field() -> None:
    with pytest.raises(vf.ConfigError, match="workdir"):
        vf.SandboxConfig(workdir="relative")
    with pytest.raises(vf.ConfigError, match="unknown sandbox backend 'nope'"):
        get_backend("nope")


async def test_creation_rate_limit_and_backend_preference(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("V1_SANDBOX_CREATES_PER_SECOND", "20")
    manager = get_manager()
    config = vf.SandboxConfig(prefer=["lcoal-typo", "local"], backend="prime")
    start = time.monotonic()
    with caplog.at_level("WARNING", logger="v1.sandbox._manager"):
        sandboxes = [await manager.create(config) for _ in range(5)]
    assert time.monotonic() - start >= 4 / 20  # five creates at 20/s span at least four intervals
    assert all(type(sandbox).__name__ == "LocalSandbox" for sandbox in sandboxes)
    skipped = [record.getMessage() for record in caplog.records if "lcoal-typo" in record.getMessage()]
    assert len(skipped) == 1 and "unknown sandbox backend 'lcoal-typo'" in skipped[0]  # once, and why
    for sandbox in sandboxes:
        await manager.delete(sandbox)


async def test_uploading_a_folder_that_holds_the_sandboxes_leaves_them_out(tmp_path: Path) -> None:
    # V1_SANDBOX_ROOT is tmp_path/sandboxes (the fixture): a project folder that holds it, as a user's
    # `V1_SANDBOX_ROOT=./sandboxes` does, must not copy other sandboxes in, nor this one into itself.
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    manager = get_manager()
    other, sandbox = await manager.create(vf.SandboxConfig()), await manager.create(vf.SandboxConfig())
    try:
        await other.write_file("secret.txt", b"another rollout's")
        await sandbox.upload(tmp_path, "project")
        listing = await sandbox.exec(["sh", "-c", "cd project && find . | sort"], timeout=HANG_S)
        assert listing.stdout.split() == [".", "./pyproject.toml"]
    finally:
        await manager.delete(other)
        await manager.delete(sandbox)
