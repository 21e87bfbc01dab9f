"""Dependency strings are outside data: a sandboxed fn's package may name requirements on the index only (S2, S3).

The attacker ships a package whose `[project.dependencies]` points pip at a host-only HTTP
server. Before the fix the sandbox's networked download step fetched it (S3: a GET to a host
service) and prepared its metadata (S2: its `setup.py` ran with host loopback). Now the entry is
refused before pip runs, in one line naming it, and the server sees nothing.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.programs._install import project_dependencies
from v1.testing import MockModelServer


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


@pytest.fixture
def host_only_server() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on host loopback that records every request (and serves nothing useful)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def evil_package(root: Path, name: str, dependency: str) -> None:
    project = root / name
    project.mkdir(parents=True)
    (project / "__init__.py").write_text("async def run(task, state):\n    state['ran'] = True\n")
    (project / "pyproject.toml").write_text(f'[project]\nname = "{name}"\nversion = "0"\ndependencies = ["{dependency}"]\n')


async def test_s2_s3_a_bare_url_dependency_is_refused_before_pip_reaches_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock: MockModelServer, host_only_server: tuple[str, list[str]]
) -> None:
    url, seen = host_only_server
    evil_package(tmp_path / "src", "evil_dep_pkg", f"{url}/evil-0.tar.gz")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    h = vf.Harness(
        program={"fn": "evil_dep_pkg:run", "sandbox": True},
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="m",
        timeout_seconds=HANG_S,
    )
    state = await h.run({"prompt": "p"})
    assert seen == []
    assert state["error"] is not None and state["error"]["type"] == "SandboxError", state["error"]
    message = state["error"]["message"]
    assert f"[project.dependencies]: '{url}/evil-0.tar.gz' is not a plain requirement" in message and "\n" not in message
    assert "ran" not in state


@pytest.mark.parametrize(
    "dependency",
    [
        "http://127.0.0.1:9/evil-0.tar.gz",
        "https://example.invalid/evil.whl",
        "file:///tmp/evil",
        "./evil",
        "../evil",
        "/abs/evil",
        "evil/",
        "evil.whl",
        "evil-0.tar.gz",
        "evil.zip",
        "EVIL.TGZ",
        "git+https://example.invalid/evil",
        "evil @ http://127.0.0.1:9/evil.whl",
        "evil @ file:///tmp/evil",
        "--index-url=http://127.0.0.1:9/",
        " -r/etc/passwd",
        "évil",
        "evil\n--extra-index-url http://127.0.0.1:9/",
    ],
)
def test_urls_paths_archives_and_options_are_refused(tmp_path: Path, dependency: str) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'x'\ndependencies = [{dependency!r}]\n".replace("'", '"'))
    with pytest.raises(vf.SandboxError, match="is not a plain requirement") as caught:
        project_dependencies(tmp_path)
    assert "\n" not in str(caught.value).replace(repr(dependency), "")


def test_plain_requirements_pass(tmp_path: Path) -> None:
    dependencies = ["numpy>=1.26", "requests[socks]==2.*", "tomli; python_version < '3.11'", "zope.interface"]
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'x'\ndependencies = [" + ", ".join(f'"{d}"' for d in dependencies) + "]\n"
    )
    assert project_dependencies(tmp_path) == dependencies
