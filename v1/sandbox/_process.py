"""Running one process group to completion: output streamed and kept (tails), stdin fed, killed at a timeout."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from v1._util.byte_tail import ByteTail
from v1.sandbox._backend import ExecResult, OutputCallback

MAX_OUTPUT_BYTES = 1_000_000
REAP_SECONDS = 5.0
CHILDREN_GRACE_SECONDS = 1.0


def kill_group(pgid: int) -> None:
    """SIGKILL a process group (nothing if it is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def reap_now(pid: int, wait_seconds: float = REAP_SECONDS) -> None:
    """Wait for a killed child without an event loop (interpreter exit), so it leaves no zombie."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # reaped already (by asyncio's child watcher) or not our child
        if done or time.monotonic() > deadline:
            return
        time.sleep(0.01)


def kill_children(pid: int) -> None:
    """SIGKILL the direct children of `pid` (a sandbox's pid-1 reaper), so `pid` itself exits and reaps them.

    Killing `pid` first would orphan them: reparented to a host init that may never reap them.
    """
    with contextlib.suppress(OSError, ValueError):
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(child), signal.SIGKILL)


async def _reap(process: asyncio.subprocess.Process) -> int | None:
    """Stop a process and wait for it, even when cancelled meanwhile (re-raised after).

    Its children go first and it gets a moment to exit by itself; then its whole group is killed.
    """
    kill_children(process.pid)
    waiting = asyncio.ensure_future(process.wait())
    cancelled = False
    for grace in (CHILDREN_GRACE_SECONDS, REAP_SECONDS):
        deadline = time.monotonic() + grace
        while not waiting.done() and time.monotonic() < deadline:
            try:
                await asyncio.wait_for(asyncio.shield(waiting), deadline - time.monotonic())
            except asyncio.CancelledError:
                cancelled = True
            except asyncio.TimeoutError:
                break
        if waiting.done():
            break
        kill_group(process.pid)
    if cancelled:
        raise asyncio.CancelledError
    return waiting.result() if waiting.done() else None


async def run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None = None,
    timeout: float | None = None,
    stdin: bytes | None = None,
    on_output: OutputCallback | None = None,
    running: set[asyncio.subprocess.Process] | None = None,
    pass_fds: Sequence[int] = (),
    watch: Callable[[], Awaitable[None]] | None = None,
) -> ExecResult:
    """Run `argv` in a new session; at `timeout` (or cancellation) its whole process group is killed.

    `running` (when given) holds the process while it runs, so its owner can kill it; `pass_fds`
    stay open in it. `watch` (when given) runs alongside; when it returns, the process group is
    killed too. The process is waited for on every path (done, timeout, watch, cancellation).
    """
    started = time.monotonic()
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    except OSError as exc:
        return ExecResult(exit_code=127, stderr=f"cannot run {argv[0]!r}: {exc}")
    if running is not None:
        running.add(process)
    tails = {"stdout": ByteTail(MAX_OUTPUT_BYTES), "stderr": ByteTail(MAX_OUTPUT_BYTES)}

    async def read(name: str, stream: asyncio.StreamReader | None) -> None:
        assert stream is not None
        while chunk := await stream.read(65536):
            tails[name].add(chunk)
            if on_output is not None:
                on_output(name, chunk)

    async def feed() -> None:
        if stdin is None or process.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            process.stdin.write(stdin)
            await process.stdin.drain()
        process.stdin.close()

    io = asyncio.ensure_future(asyncio.gather(read("stdout", process.stdout), read("stderr", process.stderr), feed()))
    watcher = asyncio.ensure_future(watch()) if watch is not None else None
    timed_out = False
    code: int | None
    try:
        waiting: list[asyncio.Future[Any]] = [io, *([watcher] if watcher is not None else [])]
        done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if io in done:
            io.result()
            code = await process.wait()
        else:
            timed_out = watcher is None or watcher not in done
            code = await _reap(process)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(io, 5)
    except BaseException:
        io.cancel()
        await _reap(process)
        raise
    finally:
        if watcher is not None:
            watcher.cancel()
        if running is not None:
            running.discard(process)
        kill_group(process.pid)  # children left behind in the group
    code = -signal.SIGKILL if code is None else code
    return ExecResult(
        exit_code=code if code >= 0 else 128 - code,
        stdout=tails["stdout"].text(),
        stderr=tails["stderr"].text(),
        timed_out=timed_out,
        duration=time.monotonic() - started,
    )


__all__ = ["MAX_OUTPUT_BYTES", "kill_children", "kill_group", "reap_now", "run_process"]
