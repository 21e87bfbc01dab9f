"""The terminal agent that `harnesses.terminus` runs inside the rollout's sandbox (standard library only).

It starts bash in a tmux session, shows the model the screen, and types the
model's keystrokes: each turn the model answers with one JSON object
(`analysis`, `plan`, `commands`, `task_complete`, optionally `tool_calls` for the
rollout's MCP tools). Model calls go to the rollout's endpoint
(`$OPENAI_BASE_URL/chat/completions`), so every turn is a trajectory step. The
shell never sees the endpoint's variables, so commands the model types cannot
call the model unrecorded or with the rollout's key.

Run as a script: `python3 terminus_agent.py`. Settings come from the environment
(`TERMINUS_WIDTH`, `TERMINUS_HEIGHT`, `TERMINUS_MAX_DURATION`, `TERMINUS_MAX_EPISODES`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

ENDPOINT_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "V1_MCP_URL", "V1_MODEL")
SCREEN_CHARS = 16000

INSTRUCTIONS = """You work in a Linux terminal: a bash shell in tmux. Each turn you are shown the terminal screen.
Reply with exactly one JSON object and nothing else:
{
  "analysis": "what the screen shows and what it means for the task",
  "plan": "what you do next and why",
  "commands": [{"keystrokes": "ls -la\\n", "duration": 1.0}],
  "task_complete": false
}
Keystrokes are typed as written; a newline presses Enter. To press special keys, give
{"keys": ["C-c"]} (tmux key names) instead of keystrokes. `duration` is the longest you want to wait,
in seconds, before you see the screen again; the wait ends early when the shell prompt is back.
Set "task_complete" to true once the task is done (the commands of that turn still run first)."""

TOOLS_NOTE = """
You may also call these tools by adding "tool_calls": [{"name": "...", "arguments": {...}}] to your reply;
their results come with the next screen:
"""


class AgentFailure(Exception):
    """Something the agent cannot go on after; its message is the agent's last line on stderr."""


def setting(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        raise AgentFailure(f"{name} must be a number, got {os.environ[name]!r}") from None


class Terminal:
    """bash in a private tmux server (its socket in the agent's folder)."""

    def __init__(self, folder: str, width: int, height: int) -> None:
        self.socket = os.path.join(folder, "tmux.sock")
        self.prompts = os.path.join(folder, "prompts")
        open(self.prompts, "w").close()
        rcfile = os.path.join(folder, "bashrc")
        with open(rcfile, "w") as file:  # one byte per prompt shown: the command before it is done
            file.write(f"PS1='$ '\nPROMPT_COMMAND='printf . >> {self.prompts}'\n")
        env = {key: value for key, value in os.environ.items() if key not in ENDPOINT_VARIABLES}
        env.setdefault("TERM", "xterm-256color")
        shell = f"bash --noprofile --rcfile {rcfile}"
        self.tmux("new-session", "-d", "-s", "v1", "-x", str(width), "-y", str(height), shell, env=env)
        self.wait_for_prompt(0, 10.0)

    def tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        try:
            done = subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, timeout=30, env=env)
        except FileNotFoundError:
            raise AgentFailure("tmux is not installed in the sandbox") from None
        if done.returncode != 0:
            raise AgentFailure(f"tmux {args[0]} failed: {done.stderr.strip()}")
        return done.stdout

    def prompt_count(self) -> int:
        return os.path.getsize(self.prompts)

    def wait_for_prompt(self, seen: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.prompt_count() <= seen and time.monotonic() < deadline:
            time.sleep(0.05)

    def run(self, command: dict[str, Any], max_duration: float) -> None:
        """Type one command's keystrokes (or press its keys) and wait up to its duration."""
        duration = min(max(command["duration"], 0.0), max_duration)
        seen = self.prompt_count()
        keys = command.get("keys")
        if keys is not None:
            self.tmux("send-keys", "-t", "v1", *[str(key) for key in (keys if isinstance(keys, list) else [keys])])
            time.sleep(duration)
            return
        text = str(command.get("keystrokes", ""))
        lines = text.split("\n")
        for index, line in enumerate(lines):
            if line:
                self.tmux("send-keys", "-t", "v1", "-l", line)
            if index < len(lines) - 1:
                self.tmux("send-keys", "-t", "v1", "Enter")
        if "\n" in text:
            self.wait_for_prompt(seen, duration)
        else:
            time.sleep(duration)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "v1").rstrip()[-SCREEN_CHARS:]

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=30)


def post(url: str, key: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=3600) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        raise AgentFailure(f"{url} answered {exc.code}: {detail}") from None


class Tools:
    """The rollout's tools over its MCP server (JSON-RPC over HTTP), when it has any."""

    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key
        self.listed: list[dict[str, Any]] = []
        if url:
            self.listed = self.rpc("tools/list", {}).get("tools", [])

    def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        answer = post(self.url, self.key, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        if "error" in answer:
            raise AgentFailure(f"MCP {method} failed: {answer['error'].get('message')}")
        return dict(answer["result"])

    def describe(self) -> str:
        lines = [
            f"- {tool['name']}: {tool.get('description', '')} arguments: {json.dumps(tool['inputSchema'])}"
            for tool in self.listed
        ]
        return TOOLS_NOTE + "\n".join(lines) if lines else ""

    def call(self, call: Any) -> str:
        """One tool call's result, labelled, as the model sees it next turn."""
        arguments = (call.get("arguments") or {}) if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not isinstance(arguments, dict):
            return "Error: a tool call needs a string 'name' and an object 'arguments'"
        result = self.rpc("tools/call", {"name": call["name"], "arguments": arguments})
        text = "\n".join(str(block.get("text", block)) for block in result.get("content", []))
        return f"Tool {call['name']!r} returned:\n" + ("Error: " if result.get("isError") else "") + text


def parse_reply(content: str) -> dict[str, Any]:
    """The model's JSON object (code fences and text around it are tolerated). Raises ValueError."""
    start, end = content.find("{"), content.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object found")
    reply = json.loads(content[start : end + 1])
    if not isinstance(reply, dict):
        raise ValueError("the reply is not a JSON object")
    commands = reply.get("commands", [])
    if not isinstance(commands, list) or not all(isinstance(command, dict) for command in commands):
        raise ValueError("'commands' must be a list of objects")
    for command in commands:
        command["duration"] = float(command.get("duration", 1.0))  # ValueError/TypeError: not a number
    return reply


def read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read().strip()
    except OSError:
        return ""


def main() -> int:
    base_url, key, model = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"], os.environ["V1_MODEL"]
    width, height = int(setting("TERMINUS_WIDTH", 160)), int(setting("TERMINUS_HEIGHT", 48))
    max_duration, episodes = setting("TERMINUS_MAX_DURATION", 60.0), int(setting("TERMINUS_MAX_EPISODES", 1000))
    tools = Tools(os.environ.get("V1_MCP_URL", ""), key)
    system = "\n\n".join(part for part in (INSTRUCTIONS + tools.describe(), read(os.environ["V1_SYSTEM_FILE"])) if part)
    task = read(os.environ["V1_PROMPT_FILE"])
    terminal = Terminal(os.path.dirname(os.path.abspath(__file__)), width, height)
    try:
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Task:\n{task}\n\nCurrent terminal screen:\n{terminal.screen()}"},
        ]
        for _ in range(episodes):
            answer = post(f"{base_url}/chat/completions", key, {"model": model, "messages": messages})
            content = answer["choices"][0]["message"].get("content") or ""
            messages.append({"role": "assistant", "content": content})
            try:
                reply = parse_reply(content)
            except (ValueError, TypeError) as exc:
                messages.append(
                    {"role": "user", "content": f"Your reply was not usable ({exc}). Reply with only the JSON object."}
                )
                continue
            for command in reply.get("commands", []):
                terminal.run(command, max_duration)
            calls = reply.get("tool_calls") or []
            results = [tools.call(call) for call in (calls if isinstance(calls, list) else [calls])]
            if reply.get("task_complete") is True:
                print(reply.get("analysis", ""))
                return 0
            screen = "\n\n".join([*results, f"Current terminal screen:\n{terminal.screen()}"])
            messages.append({"role": "user", "content": screen})
        raise AgentFailure(f"the task was not complete after {episodes} turns")
    finally:
        terminal.close()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AgentFailure as failure:
        print(f"terminus: {failure}", file=sys.stderr)
        sys.exit(1)
