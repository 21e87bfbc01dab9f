"""`PythonRepl`: one persistent Python interpreter in a sandbox, fed code cells over a control socket.

The interpreter (`_repl_server.py`) runs as one long sandbox command; it reaches
the host through a Unix socket that the backend shows inside the sandbox
(`Sandbox.control_socket_path`), so only backends with a control channel (the
local one) can hold it. A cell that runs past its timeout kills the interpreter:
the next cell starts a fresh one, and its answer says that the variables are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from pathlib import Path
from typing import Any

from v1.errors import SandboxError
from v1.sandbox._backend import ExecResult, Sandbox

SERVER = Path(__file__).with_name("_repl_server.py")
SERVER_PATH = ".v1/repl_server.py"
START_TIMEOUT = 300.0
"""How long a started interpreter may live without connecting. One that exits is seen at once, so this bounds only
a hung one: on a loaded machine a healthy Python in a sandbox can take over 30 s to get to its first line."""
MAX_REPLY_BYTES = 16 * 1024 * 1024


class PythonRepl:
    """A Python interpreter that keeps its namespace across `run` calls, living in `sandbox`."""

    def __init__(self, sandbox: Sandbox, python: str = "python3") -> None:
        self.sandbox = sandbox
        self.python = python
        self.starts = 0
        self._lock = asyncio.Lock()
        self._server: asyncio.AbstractServer | None = None
        self._process: asyncio.Task[ExecResult] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lost_state = False

    async def run(self, code: str, timeout: float) -> str:
        """Run one cell and return what it printed (and its last expression's value).

        Raises:
            SandboxError: the interpreter could not start, or died without answering.
        """
        async with self._lock:
            if self._writer is None:
                await self._start()
            notice = ""
            if self._lost_state:
                notice, self._lost_state = "[the interpreter was restarted: earlier variables are gone]\n", False
            assert self._reader is not None and self._writer is not None
            self._writer.write(json.dumps({"code": code}).encode() + b"\n")
            try:
                await self._writer.drain()
                line = await asyncio.wait_for(self._reader.readline(), timeout)
            except asyncio.TimeoutError:
                await self._stop()
                self._lost_state = True
                return f"{notice}[timed out after {timeout:g} s; the interpreter was stopped]"
            except (ConnectionError, ValueError) as exc:
                await self._crashed(f"broke its connection ({exc})")
            if not line:
                await self._crashed("exited")
            return notice + str(json.loads(line)["output"])

    async def _crashed(self, what: str) -> None:
        if self._process is not None:
            await asyncio.wait({self._process}, timeout=2)  # its last words, if it is ending anyway
        result = await self._stop()
        self._lost_state = True
        detail = (result.stderr or result.stdout)[-2000:] if result is not None else ""
        raise SandboxError(f"the Python interpreter in sandbox {self.sandbox.id} {what}: {detail}".rstrip(": "))

    async def _start(self) -> None:
        paths = self.sandbox.control_socket_path(f"repl-{secrets.token_hex(8)}.sock")
        if paths is None:
            raise SandboxError(
                f"sandbox {self.sandbox.id} has no control channel for a persistent Python interpreter; "
                "use the local sandbox backend"
            )
        host_path, inside_path = paths
        connected: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Future()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if connected.done():
                writer.close()
            else:
                connected.set_result((reader, writer))

        self._server = await asyncio.start_unix_server(accept, path=str(host_path), limit=MAX_REPLY_BYTES)
        await self.sandbox.write_file(SERVER_PATH, SERVER.read_bytes())
        server = f"{self.sandbox.workdir}/{SERVER_PATH}"
        # The backend binds a control socket only into a command whose environment names it.
        command = self.sandbox.exec([self.python, "-u", server], env={"V1_CONTROL_SOCKET": inside_path})
        self._process = asyncio.ensure_future(command)
        self.starts += 1
        waiting: set[asyncio.Future[Any]] = {connected, self._process}
        await asyncio.wait(waiting, timeout=START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        if not connected.done():
            failure = self._process.exception() if self._process.done() else None
            result = await self._stop()
            why = (result.stderr or result.stdout)[-2000:] if result is not None else f"no connection in {START_TIMEOUT:g} s"
            why = str(failure) if failure is not None else why
            raise SandboxError(f"the Python interpreter in sandbox {self.sandbox.id} did not start: {why}")
        self._reader, self._writer = connected.result()

    async def _stop(self) -> ExecResult | None:
        """Kill the interpreter (cancelling its command kills its process tree); its result if it had ended."""
        result = None
        if self._process is not None:
            if self._process.done() and not self._process.cancelled() and self._process.exception() is None:
                result = self._process.result()
            self._process.cancel()
            with contextlib.suppress(BaseException):
                await self._process
        if self._writer is not None:
            self._writer.close()
        if self._server is not None:
            self._server.close()
        self._process = self._server = self._reader = self._writer = None
        return result

    async def close(self) -> None:
        """Stop the interpreter (its sandbox stays)."""
        async with self._lock:
            await self._stop()


__all__ = ["PythonRepl"]
