"""`OpenEnvEnv`: an OpenEnv project's server (gym contract: reset, step) as a multi-turn classic environment.

The project is a directory with a `.build.json` manifest::

    {"image": "registry/my-env:1.0", "start_command": "python3 -m server.app"}

Each rollout gets its own sandbox running `start_command`, which must serve on
`$HOST:$PORT` (set for it) and answer `GET /health` when ready. The
rollout starts with `POST /reset {"seed": ...}`; `prompt_renderer(observation)`
turns each observation into chat messages. Each model answer must hold one JSON
object, the action: it goes to `POST /step {"action": ...}`. The episode ends when
the server says `done`; the reward is the sum of the step rewards.

Where it runs: on the local backend the project's folder is copied into the
sandbox and run with the host's Python, so the project's dependencies
(openenv-core, fastapi, uvicorn, ...) must be installed on this machine; the
sandbox shares the host's network so the host can reach the server. The
manifest's `image` (a prebuilt container) needs a remote backend, and reaching a
server inside a remote sandbox needs an exposed port, which v1's prime backend
does not provide yet: `backend="prime"` is refused. The MCP contract (tools
listed and called through the server) is not supported.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from v1.classic._multiturn_env import MultiTurnEnv
from v1.classic._rubric import Rubric
from v1.classic._sandbox_mixin import SandboxMixin
from v1.config import SandboxConfig
from v1.errors import ConfigError, ProgramError, SandboxError
from v1.rollout import State, cleanup, reward, teardown
from v1.sandbox import ExecResult, Sandbox
from v1.types import Messages

MANIFEST = ".build.json"
DEFAULT_PROJECT = "proj"
PROJECT_DIR = "project"
START_TIMEOUT = 60.0
REQUEST_TIMEOUT = 60.0
JSON_BLOCK = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


class OpenEnvEnv(SandboxMixin, MultiTurnEnv):
    """An OpenEnv project's server in a sandbox per rollout (see the module docs).

    Args:
        openenv_project: the project directory (holding `.build.json`); by default `proj/` beside
            the module that builds the environment, as in verifiers.
        num_train_examples, num_eval_examples: how many episodes (seeds) each dataset has.
        seed: the first seed; evaluation seeds follow the training ones.
        prompt_renderer: `(observation) -> messages` (or a string, one user message); required.
        max_turns: the most model turns (-1: until the server says done).
        rubric: scoring on top of the episode reward (`openenv_reward`).
        **kwargs: `SandboxConfig` fields for the sandbox (`memory_gb`, ...); the rest go to `MultiTurnEnv`.

    Raises:
        ConfigError: no project, no or malformed manifest, no `prompt_renderer`, bad counts, a remote backend.
    """

    def __init__(
        self,
        openenv_project: str | Path | None = None,
        num_train_examples: int = 100,
        num_eval_examples: int = 50,
        seed: int = 0,
        prompt_renderer: Callable[..., Messages] | None = None,
        max_turns: int = -1,
        rubric: Rubric | None = None,
        **kwargs: Any,
    ) -> None:
        if prompt_renderer is None or not callable(prompt_renderer):
            raise ConfigError("OpenEnvEnv needs prompt_renderer: a function turning an observation into chat messages")
        for name, count in (("num_train_examples", num_train_examples), ("num_eval_examples", num_eval_examples)):
            if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 10_000_000:
                raise ConfigError(f"OpenEnvEnv: {name} must be an integer in [0, 10000000], got {count!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"OpenEnvEnv: seed must be an integer, got {seed!r}")
        self.project = _project_dir(openenv_project if openenv_project is not None else _caller_project())
        self.manifest = read_manifest(self.project)
        fields = set(SandboxConfig.model_fields)
        sandbox = {key: value for key, value in kwargs.items() if key in fields}
        if sandbox.get("backend", "local") != "local":
            raise ConfigError("OpenEnvEnv: only backend='local' is supported (a remote sandbox's server needs an exposed port)")
        self.init_sandboxes(SandboxConfig(**{**sandbox, "network_access": True}))
        self.prompt_renderer = prompt_renderer
        self.seed = seed
        rows = [_row(seed + index) for index in range(num_train_examples)]
        eval_rows = [_row(seed + num_train_examples + index) for index in range(num_eval_examples)]
        rest = {key: value for key, value in kwargs.items() if key not in fields}
        super().__init__(max_turns=max_turns, dataset=rows or None, eval_dataset=eval_rows or None, rubric=rubric, **rest)
        self._servers: dict[str, asyncio.Future[ExecResult]] = {}
        self._urls: dict[str, str] = {}

    # -- the server ---------------------------------------------------------------------------

    async def start_server(self, state: State) -> str:
        """Start the project's server in a new sandbox for this rollout; its base URL.

        Raises:
            SandboxError: the sandbox or the server did not start (the server's output is in the message).
        """
        sandbox = await self.create_sandbox(state)
        await sandbox.upload(self.project, PROJECT_DIR)
        port = _free_port()
        command = str(self.manifest["start_command"])
        env = {"PORT": str(port), "HOST": "127.0.0.1"}
        cwd = f"{sandbox.workdir}/{PROJECT_DIR}"
        process = asyncio.ensure_future(sandbox.exec(["sh", "-c", command], env=env, cwd=cwd))
        self._servers[sandbox.id] = process
        url = f"http://127.0.0.1:{port}"
        await _wait_healthy(url, process, sandbox)
        self._urls[sandbox.id] = url
        return url

    async def request(self, state: State, route: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST `body` to the rollout's server; its JSON answer.

        Raises:
            ProgramError: the server answered with an error status or not a JSON object.
        """
        import aiohttp  # `import v1` loads no HTTP client library

        url = self._urls[str(state["sandbox_id"])] + route
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.post(url, json=dict(body)) as answer:
            text = await answer.text()
            if answer.status >= 400:
                raise ProgramError(f"OpenEnv server {route}: HTTP {answer.status}: {text[:500]}")
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, dict) or "observation" not in data:
            raise ProgramError(f"OpenEnv server {route}: expected a JSON object with 'observation', got {text[:200]!r}")
        return data

    # -- the rollout --------------------------------------------------------------------------

    async def setup_state(self, state: State) -> State:
        """Start the server, reset the episode and render its first observation as the prompt."""
        state = await super().setup_state(state)
        await self.start_server(state)
        info = state.task.get("info") or {}
        answer = await self.request(state, "/reset", {"seed": info.get("seed")})
        state["openenv_rewards"] = []
        state["openenv_done"] = bool(answer.get("done"))
        state["prompt"] = [*self.render(answer["observation"])]
        return state

    def render(self, observation: Any) -> list[dict[str, Any]]:
        """`prompt_renderer(observation)` as a list of chat messages.

        Raises:
            ProgramError: the renderer returned something else.
        """
        messages = self.prompt_renderer(observation)
        if isinstance(messages, str):
            return [{"role": "user", "content": messages}]
        if not isinstance(messages, list) or not all(isinstance(m, Mapping) and "role" in m for m in messages):
            raise ProgramError(f"OpenEnvEnv.prompt_renderer returned {messages!r:.80}; expected a list of chat messages")
        return [dict(message) for message in messages]

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages:
        """The model's JSON action sent to `/step`; the next observation rendered (final when done)."""
        action = parse_action(messages[-1].get("content") if isinstance(messages, list) and messages else None)
        if isinstance(action, str):
            return [{"role": "user", "content": action}]
        answer = await self.request(state, "/step", {"action": action})
        step_reward = answer.get("reward")
        state["openenv_rewards"] = [*state["openenv_rewards"], float(step_reward or 0.0)]
        rendered = self.render(answer["observation"])
        if answer.get("done"):
            state["openenv_done"] = True
            state["final_env_response"] = rendered
        return rendered

    @reward
    async def openenv_reward(self, state: State) -> float:
        """The episode's reward: the sum of the server's step rewards."""
        return float(sum(state.get("openenv_rewards") or []))

    @cleanup
    async def stop_server(self, state: State) -> None:
        """Stop the rollout's server and delete its sandbox (after scoring)."""
        sandbox_id = state.get("sandbox_id")
        process = self._servers.pop(sandbox_id, None) if isinstance(sandbox_id, str) else None
        self._urls.pop(str(sandbox_id), None)
        if process is not None:
            process.cancel()
            with contextlib.suppress(BaseException):
                await process
        await self.delete_sandbox(state)

    @teardown
    async def teardown_sandboxes(self) -> None:
        """Delete every sandbox still held."""
        for process in self._servers.values():
            process.cancel()
        self._servers.clear()
        await self.delete_all_sandboxes()


def parse_action(content: Any) -> dict[str, Any] | str:
    """The JSON object in a model answer (bare, or in a ```json block); else the message telling the model so."""
    text = content if isinstance(content, str) else ""
    candidates = [*JSON_BLOCK.findall(text), text.strip()]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return 'Your answer held no action. Reply with the action as one JSON object, e.g. {"...": ...}.'


def read_manifest(project: Path) -> dict[str, Any]:
    """The project's `.build.json`.

    Raises:
        ConfigError: missing, not a JSON object, or without a `start_command`.
    """
    path = project / MANIFEST
    if not path.is_file():
        raise ConfigError(f"OpenEnvEnv: {path} is missing; an OpenEnv project needs a {MANIFEST} manifest")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"OpenEnvEnv: {path} is not valid JSON: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("start_command"), str):
        raise ConfigError(f"OpenEnvEnv: {path} needs a 'start_command' string (how the server starts)")
    return manifest


def _caller_project() -> Path:
    """`proj/` beside the module that built the environment (the first caller outside this file), as verifiers does.

    Raises:
        ConfigError: there is no such directory.
    """
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    caller = Path(frame.f_code.co_filename)
    project = caller.parent / DEFAULT_PROJECT
    if not project.is_dir():
        raise ConfigError(
            f"OpenEnvEnv: no openenv_project given, and no {DEFAULT_PROJECT!r} directory beside {caller} "
            "(pass the directory of an OpenEnv project)"
        )
    return project


def _project_dir(project: str | Path) -> Path:
    path = Path(project)
    if not path.is_dir():
        raise ConfigError(f"OpenEnvEnv: openenv_project {str(path)!r} is not a directory")
    return path.resolve()


def _row(seed: int) -> dict[str, Any]:
    return {"prompt": [{"role": "user", "content": f"(episode {seed})"}], "info": {"seed": seed}}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _wait_healthy(url: str, process: asyncio.Future[ExecResult], sandbox: Sandbox) -> None:
    import aiohttp  # `import v1` loads no HTTP client library

    deadline = time.monotonic() + START_TIMEOUT
    timeout = aiohttp.ClientTimeout(total=2)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() < deadline:
            if process.done():
                result = process.result()
                output = (result.stderr or result.stdout)[-1500:]
                raise SandboxError(f"the OpenEnv server in sandbox {sandbox.id} exited {result.exit_code}: {output}")
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with session.get(url + "/health") as answer:
                    if answer.status < 500:
                        return
            await asyncio.sleep(0.1)
    raise SandboxError(f"the OpenEnv server in sandbox {sandbox.id} did not answer {url}/health in {START_TIMEOUT:g} s")


__all__ = ["MANIFEST", "OpenEnvEnv", "parse_action", "read_manifest"]
