"""A real MCP server for the tests and benchmarks, written with the `mcp` SDK's server side.

Run as `python tests/tools/mcp_server.py` (stdio) or `python tests/tools/mcp_server.py --http PORT`;
other arguments (e.g. `--marker X`, to find the process in the process table) are ignored.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from patience import HANG_S  # run as a script: this folder is on sys.path

server = MCPServer("v1-test-server")

# A 1x1 PNG.
PIXEL = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


@server.tool()
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number.
    """
    await asyncio.sleep(0)
    return a + b


@server.tool()
async def wait(seconds: float) -> str:
    """Sleep, then answer (stands in for a tool that waits on I/O)."""
    await asyncio.sleep(seconds)
    return "waited"


@server.tool()
async def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def pixel() -> Image:
    """A tiny image."""
    return Image(data=PIXEL, format="png")


@server.tool()
def fail(message: str) -> str:
    """Always raises."""
    raise ToolError(message)


_arrived = 0
_everyone_here = asyncio.Event()


@server.tool()
async def rendezvous(parties: int) -> str:
    """Wait until `parties` calls are in flight at once ("met"), or give up after `HANG_S` ("alone")."""
    global _arrived
    _arrived += 1
    if _arrived >= parties:
        _everyone_here.set()
    try:
        await asyncio.wait_for(_everyone_here.wait(), HANG_S)
    except asyncio.TimeoutError:
        return "alone"
    return "met"


@server.tool()
def die() -> str:
    """Kill the server mid-call."""
    os._exit(3)


if __name__ == "__main__":
    if "--http" in sys.argv:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[sys.argv.index("--http") + 1]))
    else:
        server.run()
