"""How `v1 eval` stops on Ctrl-C or SIGTERM: the run is cancelled, within a bound, and a second signal ends it at once.

The first signal cancels the run's main task: the rollouts in flight are cancelled, their cleanups
run (they may still call the model), and the finished groups stay saved. That shutdown has a bound
(``--stop-grace``): past it, or at a second Ctrl-C, the process exits with status 130 and one line
naming what it stopped waiting for. A signal before the event loop runs (while the run is being
planned) interrupts the planning as `KeyboardInterrupt`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from v1._util.calling import calls_running
from v1._util.lifeline import exit_now, write_line

INTERRUPTED = 130
DEFAULT_STOP_GRACE_S = 60.0
"""How long the rollouts in flight get, after Ctrl-C, to stop and run their cleanups."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopping:
    """The stop of one `v1 eval` run: installed (`installed`) around planning and the run.

    Args:
        grace_s: the most the stop waits for, from the first signal on.
        resume_hint: appended to the line printed on the way out (where the saved rollouts are).
    """

    def __init__(self, grace_s: float, resume_hint: str = "") -> None:
        self.grace_s = grace_s
        self.resume_hint = resume_hint
        self.waiting_for = "the rollouts in flight to stop and run their cleanups"
        self._requested_at: float | None = None
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._disarmed = threading.Event()

    @property
    def requested(self) -> bool:
        return self._requested_at is not None

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Handle SIGINT and SIGTERM while inside (main thread only: elsewhere signals keep their handlers).

        A SIGINT the process was started ignoring stays ignored, as for any program (and as asyncio's runner leaves
        it): a shell without job control starts background commands so, and a Ctrl-C in its terminal is not for them.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = [n for n in STOP_SIGNALS if not (n == signal.SIGINT and signal.getsignal(n) == signal.SIG_IGN)]
        previous = {signum: signal.signal(signum, self._on_signal) for signum in handled}
        try:
            yield
        finally:
            self._disarmed.set()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def attach(self) -> None:
        """From the run's main task: a signal from now on cancels it (one that came already does so now)."""
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        if self._task is not None:
            self._task.add_done_callback(self._run_ended)
            if self.requested:
                self._task.cancel()

    def _run_ended(self, task: asyncio.Task[Any]) -> None:
        self.waiting_for = "the event loop to close (the endpoint, the model clients, worker threads of the loop)"

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            self._exit(f"{signal.Signals(signum).name} again: exiting now without waiting for {self.waiting_for}")
        if self._loop is None:  # still planning: nothing runs that needs stopping
            raise KeyboardInterrupt
        self._requested_at = time.monotonic()
        write_line(
            f"v1 eval: stopping: cancelling the rollouts in flight and running their cleanups "
            f"(at most {self.grace_s:g} s; Ctrl-C again to exit now)"
        )
        task = self._task
        if task is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing left to cancel
                self._loop.call_soon_threadsafe(task.cancel)  # also wakes a loop asleep in its poll
        threading.Thread(target=self._watch, name="v1-eval-stop-grace", daemon=True).start()

    def _watch(self) -> None:
        assert self._requested_at is not None
        if not self._disarmed.wait(self._requested_at + self.grace_s - time.monotonic()):
            self._exit(f"gave up after {self.grace_s:g} s waiting for {self.waiting_for}")

    def wait_for_worker_threads(self) -> None:
        """After an interrupted run's loop closed: wait (within the grace) for sync user code still running in threads."""
        if self._requested_at is None:
            return
        self.waiting_for = f"{calls_running()} call(s) of sync user code in worker threads"  # the watchdog's line too
        deadline = self._requested_at + self.grace_s
        while calls_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if calls_running():
            self._exit(f"gave up after {self.grace_s:g} s waiting for {self.waiting_for}")

    def _exit(self, why: str) -> None:
        with contextlib.suppress(Exception):  # a signal can arrive mid-write: stdout's buffer is then busy
            sys.stdout.flush()
        exit_now(f"interrupted; {why}{self.resume_hint}", INTERRUPTED, program="v1 eval")


__all__ = ["DEFAULT_STOP_GRACE_S", "INTERRUPTED", "Stopping"]
