"""`MCPTool`: an MCP server as a source of tools, through the official `mcp` SDK.

A stdio server (`command`, `args`, `env`, `cwd`) is started as a subprocess once
per scope of its toolset (rollout, group or global) and stopped when the scope
ends, even when the rollout failed; a streamable-HTTP server (`url`) is
connected to the same way. One `mcp.Client` serves every concurrent call of a
connection: requests are multiplexed by id, never queued behind each other.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from v1._util.byte_tail import ByteTail
from v1.config import MCPToolConfig
from v1.errors import ToolError
from v1.types import Tool, ToolContent

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup


class MCPTool:
    """An MCP server whose tools join the owning toolset.

    Args:
        command: the executable of a stdio server (e.g. ``"python"``).
        args: its arguments.
        env: extra environment variables; the server gets the SDK's safe default
            environment (HOME, PATH, ...) plus `PYTHONPATH`, never the rest of ours.
        cwd: its working directory.
        url: a streamable-HTTP server's URL instead of a command.
        headers: HTTP headers for `url` servers.
        name: the prefix used when one of its tools collides with another tool's name
            (default: the command's or URL host's name).
        startup_timeout: seconds allowed to start the server and list its tools.
        call_timeout: seconds allowed per tool call.
        config: an `MCPToolConfig` (or mapping); keyword arguments override it.
    """

    def __init__(
        self,
        command: str | None = None,
        args: list[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        startup_timeout: float | None = None,
        call_timeout: float | None = None,
        config: MCPToolConfig | Mapping[str, object] | None = None,
    ) -> None:
        given = {
            "command": command,
            "args": list(args) if args is not None else None,
            "env": dict(env) if env is not None else None,
            "cwd": cwd,
            "url": url,
            "headers": dict(headers) if headers is not None else None,
            "name": name,
            "startup_timeout": startup_timeout,
            "call_timeout": call_timeout,
        }
        self.config = MCPToolConfig.from_config(config, **{k: v for k, v in given.items() if v is not None})

    @property
    def name(self) -> str:
        if self.config.name:
            return self.config.name
        if self.config.command is not None:
            stem = Path(self.config.args[-1] if self.config.args else self.config.command).stem
            return stem.replace("-", "_").replace(".", "_") or "mcp"
        host = urlsplit(self.config.url or "").hostname or "mcp"
        return host.replace(".", "_").replace("-", "_")

    def __repr__(self) -> str:
        target = self.config.url or " ".join([self.config.command or "", *self.config.args])
        return f"MCPTool({target!r})"

    def connect(self) -> MCPConnection:
        """A new, not yet started connection to this server."""
        return MCPConnection(self)


class MCPConnection:
    """One running server (or HTTP session): started by `start`, stopped by `aclose`.

    The SDK's transports are anyio context managers that must be left from the task
    that entered them, so each connection lives in its own task, whichever rollout
    (or teardown) closes it.
    """

    def __init__(self, source: MCPTool) -> None:
        self.source = source
        self.tools: list[Tool] = []
        self.pid: int | None = None
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._stop: asyncio.Event | None = None
        self._stderr: _StderrTail | None = None

    def _transport(self, http_client: Any) -> Any:
        from mcp import StdioServerParameters
        from mcp.client.stdio import get_default_environment, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        config = self.source.config
        if config.url is not None:
            return streamable_http_client(config.url, http_client=http_client)
        env = get_default_environment()
        if "PYTHONPATH" in os.environ:
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        env.update(config.env)
        parameters = StdioServerParameters(command=config.command or "", args=list(config.args), env=env, cwd=config.cwd)
        self._stderr = _StderrTail()
        return stdio_client(parameters, errlog=self._stderr.file)

    async def start(self) -> list[Tool]:
        """Start the server and list its tools.

        Raises:
            ToolError: the server could not be started or listed in `startup_timeout` seconds.
        """
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._serve(), name=f"mcp:{self.source.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.source.config.startup_timeout)
        except asyncio.TimeoutError:
            await self.aclose()
            raise ToolError(f"{self.source!r}: no answer within {self.source.config.startup_timeout}s of starting") from None
        except BaseException:
            await self.aclose()
            raise
        return self.tools

    async def _serve(self) -> None:
        from mcp import Client

        assert self._ready is not None and self._stop is not None
        http_client = None
        config = self.source.config
        try:
            if config.url is not None and config.headers:
                import httpx2  # the HTTP library of the mcp SDK's streamable-HTTP transport

                timeout = httpx2.Timeout(30.0, read=config.call_timeout)
                http_client = httpx2.AsyncClient(headers=config.headers, timeout=timeout)
            async with Client(self._transport(http_client)) as client:
                listed = await client.list_tools()
                self.tools = [
                    Tool(name=tool.name, description=tool.description or "", parameters=tool.input_schema)
                    for tool in listed.tools
                ]
                self._client = client
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                said = await asyncio.to_thread(self._stderr.close, 2.0) if self._stderr is not None else ""
                ends = f"; its stderr ends: {said[-500:]}" if said else ""
                self._ready.set_exception(ToolError(f"{self.source!r} failed to start: {_describe(exc)}{ends}"))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None
            if self._stderr is not None:
                self._stderr.close()
            if http_client is not None:
                await http_client.aclose()

    async def call(self, name: str, arguments: Mapping[str, Any]) -> Any:
        """Call a tool; returns the SDK's `CallToolResult`.

        Raises:
            ToolError: the connection is closed or the server went away.
        """
        client = self._client
        if client is None:
            raise ToolError(f"{self.source!r} is not running (it failed, exited, or its scope ended)")
        try:
            return await client.call_tool(name, dict(arguments), read_timeout_seconds=self.source.config.call_timeout)
        except Exception as exc:
            raise ToolError(f"MCP tool {name!r} of {self.source!r} failed: {_describe(exc)}") from exc

    async def aclose(self) -> None:
        """Stop the server (idempotent); waits for the subprocess to be gone."""
        task, self._task = self._task, None
        if task is None:
            return
        assert self._stop is not None
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 10)
        except asyncio.TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        except Exception:
            pass


class _StderrTail:
    """A stdio server's stderr: copied to ours as it arrives, its last `KEEP` bytes kept for a failed start's message."""

    KEEP = 2000

    def __init__(self) -> None:
        read_end, write_end = os.pipe()
        self.file = os.fdopen(write_end, "w")
        self._reader = os.fdopen(read_end, "rb", buffering=0)
        self._kept = ByteTail(self.KEEP)
        self._pump = threading.Thread(target=self._copy, name="mcp-stderr", daemon=True)
        self._pump.start()

    def _copy(self) -> None:
        with self._reader:
            while chunk := self._reader.read(65536):
                self._kept.add(chunk)
                sys.stderr.write(chunk.decode(errors="replace"))

    def close(self, wait: float = 0.0) -> str:
        """Close our end; wait up to `wait` s for what the server wrote; the kept text, last line last."""
        if not self.file.closed:
            self.file.close()
        self._pump.join(wait)
        return self._kept.text().strip()


def _describe(error: BaseException) -> str:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in error.exceptions)
    return f"{type(error).__name__}: {error}"


def mcp_result_content(result: Any) -> ToolContent:
    """A `CallToolResult` as tool-message content: text joined, images as data-URL parts,
    structured results as JSON, errors prefixed with ``Error:``."""
    parts: list[dict[str, Any]] = []
    for block in result.content or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append({"type": "text", "text": block.text})
        elif kind == "image":
            data = block.data if isinstance(block.data, str) else base64.b64encode(block.data).decode()
            parts.append({"type": "image_url", "image_url": {"url": f"data:{block.mime_type};base64,{data}"}})
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append({"type": "text", "text": text if text is not None else f"[resource {resource.uri}]"})
        elif kind == "resource_link":
            parts.append({"type": "text", "text": f"[resource {block.uri}]"})
        else:
            parts.append({"type": "text", "text": f"[{kind} content]"})
    if not parts and result.structured_content is not None:
        parts.append({"type": "text", "text": json.dumps(result.structured_content)})
    if result.is_error:
        message = "\n".join(part["text"] for part in parts if part["type"] == "text") or "the tool reported an error"
        return f"Error: {message}"
    if all(part["type"] == "text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


def mcp_result_value(result: Any) -> Any:
    """A `CallToolResult` as a Python value for `state.get_tools()` callers.

    Raises:
        ToolError: the tool reported an error.
    """
    if result.is_error:
        raise ToolError(str(mcp_result_content(result))[len("Error: ") :])
    structured = result.structured_content
    if isinstance(structured, Mapping) and set(structured) == {"result"}:
        return structured["result"]
    if structured is not None:
        return structured
    return mcp_result_content(result)


__all__ = ["MCPConnection", "MCPTool", "mcp_result_content", "mcp_result_value"]
