"""Creating and deleting sandboxes safely, whatever the backend.

- A hard host-wide cap: each live sandbox holds one of `V1_MAX_SANDBOXES`
  (default 64) slot locks (`flock` on files under the sandbox root), so all v1
  processes of a machine together stay under it; a creator waits for a slot.
- A per-process creation rate limit (`V1_SANDBOX_CREATES_PER_SECOND`, default unlimited).
- Create is retried with backoff; a sandbox whose packages or setup commands
  fail is deleted before the error is raised.
- Every create writes a ledger entry (`<root>/ledger/<backend>--<id>.json`)
  that only a successful delete removes; deletes are retried, and what still
  fails stays listed for `v1 sandbox list` / `v1 sandbox reap`.
- At interpreter exit the sandboxes this process still holds are deleted.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import fcntl
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from v1.config import SandboxConfig
from v1.errors import ConfigError, SandboxError
from v1.sandbox._backend import EndpointTarget, Sandbox, SandboxRecord, get_backend
from v1.sandbox._local import sandbox_root

logger = logging.getLogger(__name__)

CREATE_ATTEMPTS = 3
DELETE_ATTEMPTS = 5
PACKAGE_DIR = ".v1"


def max_sandboxes() -> int:
    """The host-wide cap on live sandboxes (`V1_MAX_SANDBOXES`, default 64)."""
    try:
        value = int(os.environ.get("V1_MAX_SANDBOXES", "64"))
    except ValueError:
        raise ConfigError(f"V1_MAX_SANDBOXES must be a positive integer, got {os.environ['V1_MAX_SANDBOXES']!r}") from None
    if value < 1:
        raise ConfigError(f"V1_MAX_SANDBOXES must be a positive integer, got {value}")
    return value


def _creates_per_second() -> float | None:
    raw = os.environ.get("V1_SANDBOX_CREATES_PER_SECOND")
    return float(raw) if raw else None


_SKIPPED_PREFERENCES: set[str] = set()


def resolve_backend_name(config: SandboxConfig) -> str:
    """The first backend of `prefer` that is available here, else `config.backend`.

    A preferred name with no backend here (a plugin installed elsewhere, or a typo) is skipped,
    with one warning per name and process that says why.
    """
    for name in config.prefer:
        try:
            if get_backend(name).available() is None:
                return name
        except ConfigError as exc:
            if name not in _SKIPPED_PREFERENCES:
                _SKIPPED_PREFERENCES.add(name)
                logger.warning("sandbox prefer: skipping %r: %s", name, exc)
            continue
    return config.backend


@dataclass
class Lease:
    """A live sandbox and what must be released with it."""

    sandbox: Sandbox
    backend: str
    slot: IO[bytes]
    ledger: Path
    deleted: bool = False


def _try_slots(slots: Path, cap: int) -> IO[bytes] | None:
    """One free slot lock of `cap`, held until its file is closed; None when all are taken."""
    slots.mkdir(parents=True, exist_ok=True)
    for index in range(cap):
        handle = open(slots / f"{index}.lock", "ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            handle.close()
    return None


class SandboxManager:
    """Creates sandboxes under the cap and the rate limit and deletes them, tracked until gone."""

    def __init__(self) -> None:
        self.leases: dict[str, Lease] = {}
        self._last_create = 0.0
        self._rate_lock: asyncio.Lock | None = None

    @property
    def root(self) -> Path:
        return sandbox_root()

    async def _take_slot(self) -> IO[bytes]:
        slots = self.root / "slots"
        cap = max_sandboxes()
        while True:
            handle = await asyncio.to_thread(_try_slots, slots, cap)
            if handle is not None:
                return handle
            await asyncio.sleep(0.05)

    async def _respect_rate(self) -> None:
        rate = _creates_per_second()
        if not rate:
            return
        if self._rate_lock is None:
            self._rate_lock = asyncio.Lock()
        async with self._rate_lock:
            wait = self._last_create + 1 / rate - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._last_create = time.monotonic()

    async def create(
        self, config: SandboxConfig, *, endpoint: EndpointTarget | None = None, labels: Sequence[str] = ()
    ) -> Sandbox:
        """A ready sandbox: created (retried), packages installed, setup commands run.

        Raises:
            SandboxError: the backend is missing, creation kept failing, or setup failed.
        """
        name = resolve_backend_name(config)
        backend = get_backend(name)
        problem = backend.available()
        if problem is not None:
            raise SandboxError(problem)
        slot = await self._take_slot()
        try:
            sandbox = await self._create_with_retries(name, config, endpoint, [*config.labels, *labels])
        except BaseException:
            slot.close()
            raise
        ledger = self._write_ledger(name, sandbox.id, [*config.labels, *labels])
        self.leases[sandbox.id] = Lease(sandbox, name, slot, ledger)
        try:
            await self._prepare(sandbox, config)
        except BaseException:
            await self.delete(sandbox)
            raise
        return sandbox

    async def _create_with_retries(
        self, name: str, config: SandboxConfig, endpoint: EndpointTarget | None, labels: list[str]
    ) -> Sandbox:
        backend = get_backend(name)
        for attempt in range(1, CREATE_ATTEMPTS + 1):
            await self._respect_rate()
            try:
                return await backend.create(config, endpoint=endpoint, labels=labels)
            except SandboxError:
                raise
            except Exception as exc:
                if attempt == CREATE_ATTEMPTS:
                    raise SandboxError(f"creating a {name} sandbox failed {attempt} times: {exc}") from exc
                logger.warning("creating a %s sandbox failed (attempt %d): %s", name, attempt, exc)
                await asyncio.sleep(0.2 * 2**attempt)
        raise AssertionError("unreachable")

    async def _prepare(self, sandbox: Sandbox, config: SandboxConfig) -> None:
        python = [pkg for pkg in config.packages if not pkg.startswith("npm:")]
        node = [pkg.removeprefix("npm:") for pkg in config.packages if pkg.startswith("npm:")]
        target = f"{sandbox.workdir}/{PACKAGE_DIR}"
        steps: list[tuple[list[str], float, str]] = []
        if python:
            pip = ["python", "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target", f"{target}/python"]
            steps.append(([*pip, *python], config.install_timeout, "installing packages"))
        if node:
            steps.append(
                (["npm", "install", "--silent", "--prefix", f"{target}/node", *node], config.install_timeout, "npm install")
            )
        for command in config.setup_commands:
            steps.append((["sh", "-c", command], config.setup_timeout, f"setup command {command!r}"))
        for argv, timeout, what in steps:
            result = await sandbox.exec(argv, timeout=timeout, network=True if argv[0] != "sh" else None)
            if not result.ok:
                reason = "timed out" if result.timed_out else f"exited {result.exit_code}"
                raise SandboxError(f"sandbox {sandbox.id}: {what} {reason}: {result.stderr[-2000:] or result.stdout[-2000:]}")

    def _write_ledger(self, backend: str, sandbox_id: str, labels: list[str]) -> Path:
        ledger = self.root / "ledger"
        ledger.mkdir(parents=True, exist_ok=True)
        path = ledger / f"{backend}--{sandbox_id}.json"
        record = {"backend": backend, "id": sandbox_id, "owner_pid": os.getpid(), "created": time.time(), "labels": labels}
        path.write_text(json.dumps(record))
        return path

    async def delete(self, sandbox: Sandbox | str) -> None:
        """Delete a sandbox, retrying; it leaves the ledger only when the backend confirmed.

        Raises:
            SandboxError: every attempt failed (the sandbox stays listed for `v1 sandbox reap`).
        """
        sandbox_id = sandbox if isinstance(sandbox, str) else sandbox.id
        lease = self.leases.get(sandbox_id)
        if lease is None or lease.deleted:
            return
        backend = get_backend(lease.backend)
        for attempt in range(1, DELETE_ATTEMPTS + 1):
            try:
                await backend.delete(sandbox_id)
                break
            except Exception as exc:
                if attempt == DELETE_ATTEMPTS:
                    lease.slot.close()
                    self.leases.pop(sandbox_id, None)
                    raise SandboxError(
                        f"deleting {lease.backend} sandbox {sandbox_id} failed {attempt} times ({exc}); "
                        "it stays listed: run `v1 sandbox reap`"
                    ) from exc
                await asyncio.sleep(0.1 * 2**attempt)
        lease.deleted = True
        self.leases.pop(sandbox_id, None)
        lease.ledger.unlink(missing_ok=True)
        lease.slot.close()

    def delete_all_now(self) -> None:
        """Delete what this process still holds, synchronously (interpreter exit, signals).

        At interpreter exit no new thread may start, so the backends' `asyncio.to_thread`
        work runs inline here (it used to fail silently and leave every sandbox behind).
        """
        if not self.leases:
            return
        loop = asyncio.new_event_loop()
        loop.set_default_executor(_InlineExecutor())
        try:
            for sandbox_id in list(self.leases):
                with contextlib.suppress(Exception):
                    loop.run_until_complete(self.delete(sandbox_id))
        finally:
            loop.close()


class _InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each submitted call at once in the calling thread (for an event loop at interpreter exit)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


def list_sandboxes() -> list[SandboxRecord]:
    """Every sandbox in the ledger of this machine (`V1_SANDBOX_ROOT`), oldest first."""
    records = []
    for path in sorted((sandbox_root() / "ledger").glob("*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError):
            data = json.loads(path.read_text())
            records.append(
                SandboxRecord(
                    backend=data["backend"],
                    sandbox_id=data["id"],
                    owner_pid=int(data["owner_pid"]),
                    created=float(data["created"]),
                    labels=tuple(data.get("labels", [])),
                    owner_alive=_alive(int(data["owner_pid"])),
                )
            )
    local = sandbox_root() / "local"
    known = {record.sandbox_id for record in records}
    if local.is_dir():  # a local sandbox whose process died before its ledger entry was written
        for path in sorted(local.iterdir()):
            if path.name not in known:
                records.append(SandboxRecord("local", path.name, -1, path.stat().st_mtime, (), False))
    return sorted(records, key=lambda record: record.created)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def reap_sandboxes(include_live: bool = False) -> tuple[list[SandboxRecord], list[tuple[SandboxRecord, str]]]:
    """Delete leftover sandboxes: those whose owning process is gone (or all, with `include_live`).

    Returns:
        (reaped, failed with the reason) records.
    """
    reaped, failed = [], []
    for record in list_sandboxes():
        if record.owner_alive and not include_live:
            continue
        try:
            await get_backend(record.backend).delete(record.sandbox_id)
        except Exception as exc:
            failed.append((record, str(exc)))
            continue
        (sandbox_root() / "ledger" / f"{record.backend}--{record.sandbox_id}.json").unlink(missing_ok=True)
        reaped.append(record)
    return reaped, failed


_manager: SandboxManager | None = None


def _unwind_on_sigterm(signum: int, frame: object) -> None:
    """Cancel every task of the running loop, like Ctrl-C, so `finally` blocks delete sandboxes."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise SystemExit(128 + signum) from None
    loop.call_soon_threadsafe(_cancel_all, loop)  # wakes a loop asleep in select()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()


def get_manager() -> SandboxManager:
    """The process's sandbox manager (created on first use, deletes its sandboxes at exit).

    Where SIGTERM still has its default action (which skips all cleanup), it
    cancels the running tasks instead, so rollouts unwind and delete their sandboxes.
    """
    global _manager
    if _manager is None:
        _manager = SandboxManager()
        atexit.register(_manager.delete_all_now)
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _unwind_on_sigterm)
    return _manager


__all__ = ["SandboxManager", "get_manager", "list_sandboxes", "max_sandboxes", "reap_sandboxes", "resolve_backend_name"]
