"""Processes that end with the process that started them: a run's ranks and its inference engine.

`die_with_parent` asks Linux to signal this process when its parent exits (``PR_SET_PDEATHSIG``),
for a child started with ``preexec_fn`` (the vLLM server a run starts). `ParentWatch` does it
from inside a process whose start it does not control (a torchrun worker, which torch elastic
puts in a session of its own, so nothing else ends it when torchrun is killed): a daemon thread
polls the parent's id, and when the parent is gone it prints one line saying so, runs the
registered clean-ups (`cleanup_on_exit`: stopping the engine this process started) and exits;
`exit_on_sigterm` does the same on SIGTERM. A run's
checkpoints are complete or ignored (``run.json`` is written last), so exiting is safe.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

PR_SET_PDEATHSIG = 1
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
"""Resolved once here, not in a forked child (``preexec_fn`` should do no more than call it)."""
EXIT_PARENT_GONE = 1
"""The exit status of a process whose parent died."""


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Have the kernel send `signum` to this process when the thread that started it exits (Linux; elsewhere nothing).

    For ``subprocess.Popen(preexec_fn=die_with_parent)``, started from a thread that lives as long as the parent
    (its main thread). A parent already gone by now (this process was adopted) gets the signal at once.
    """
    if _PRCTL is None:
        return
    parent = os.getppid()
    _PRCTL(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signum)


class ParentWatch:
    """Exit this process (`exit_now`: one line, the clean-ups) once its parent has exited; `stop` ends the watch.

    Args:
        who: this process in the line printed on the way out (``"rank 1"``).
        parent_name: the parent in that line (``"torchrun"``).
        interval_s: how often the parent's id is checked.
    """

    def __init__(self, who: str, parent_name: str, interval_s: float = 0.5) -> None:
        self.who = who
        self.parent_name = parent_name
        self.parent = os.getppid()
        self.interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="v1-parent-watch", daemon=True)

    def start(self) -> ParentWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        while not self._stopped.wait(self.interval_s):
            self.exit_if_parent_gone()

    def exit_if_parent_gone(self) -> None:
        """Exit (one line) when the parent has exited: also where an error came from its exit before the watch
        saw it (a collective failing because another rank of the dead launcher left first)."""
        if os.getppid() != self.parent:
            self.exit(f"{self.who}: {self.parent_name} (pid {self.parent}) exited; stopping this process too")

    def exit(self, line: str) -> None:
        exit_now(line, EXIT_PARENT_GONE)


_cleanups: list[Callable[[], None]] = []
PARENT_EXIT_POLLS = 40
"""How many times (50 ms apart) a SIGTERM's handler checks whether the parent is exiting, before it blames torchrun."""


@contextlib.contextmanager
def cleanup_on_exit(cleanup: Callable[[], None]) -> Iterator[None]:
    """While inside, `exit_now` runs `cleanup` (stopping a child process group, say) before the process ends."""
    _cleanups.append(cleanup)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            _cleanups.remove(cleanup)


def write_line(line: str) -> None:
    """`line` on stderr in one unbuffered write: whole even from a signal handler or beside other processes' lines."""
    message = f"{line}\n"
    try:  # one write: ranks ending together share the launcher's stderr, and an unbuffered print writes the newline apart
        with contextlib.suppress(RuntimeError):  # a signal handler's write while the main thread is mid-write
            sys.stderr.flush()
        os.write(sys.stderr.fileno(), message.encode(errors="replace"))
    except (AttributeError, OSError, ValueError):  # a stderr with no descriptor of its own
        print(message, end="", file=sys.stderr, flush=True)


def exit_now(line: str, status: int, *, program: str = "v1 train") -> None:
    """Print ``program: line`` (one line on stderr), run the registered clean-ups (failures ignored) and end the process
    with `status`."""
    write_line(f"{program}: {line}")
    for cleanup in reversed(list(_cleanups)):
        with contextlib.suppress(Exception):
            cleanup()
    os._exit(status)


def exit_on_sigterm(who: str, parent: ParentWatch | None = None) -> None:
    """Make SIGTERM (torchrun's way of ending the other ranks when one fails) print one line, clean up and exit 143.

    With `parent`, a SIGTERM that came from the parent's exit (the kernel's `PR_SET_PDEATHSIG`) says so instead.
    Call from the main thread.
    """

    def handle(signum: int, frame: object) -> None:
        # The kernel signals when the parent's forking thread exits: the rest of a killed parent may still be leaving.
        for _ in range(PARENT_EXIT_POLLS if parent is not None else 0):
            parent.exit_if_parent_gone()  # type: ignore[union-attr]
            time.sleep(0.05)
        exit_now(f"{who}: stopped by SIGTERM (torchrun stops every rank when one fails)", 128 + signum)

    signal.signal(signal.SIGTERM, handle)


__all__ = [
    "EXIT_PARENT_GONE",
    "ParentWatch",
    "cleanup_on_exit",
    "die_with_parent",
    "exit_now",
    "exit_on_sigterm",
    "write_line",
]
