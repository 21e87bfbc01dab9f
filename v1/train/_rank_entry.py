"""One rank of ``v1 train --nproc N``: torchrun runs this file (not ``-m v1.train``), whose first instructions tie the
rank to its launcher, before ``import v1`` and torch (seconds to minutes on a loaded machine).

The kernel sends the rank SIGTERM when the launcher exits (``PR_SET_PDEATHSIG``), whatever the rank is doing then;
a launcher already gone before that call (its pid, ``V1_LAUNCHER_PID``, is no longer the parent's) ends the rank at
once. Nothing polls for a parent of 1: in a container the launcher may be pid 1, and an orphan's new parent may be a
subreaper. Later, `v1._util.lifeline.exit_on_sigterm` turns that SIGTERM into one line and the rank's clean-ups.
The same steps are `v1._util.lifeline.die_with_parent`, which cannot be imported this early: ``import v1`` comes first.
"""

import ctypes
import os
import signal
import sys

LAUNCHER_PID_ENV = "V1_LAUNCHER_PID"
PR_SET_PDEATHSIG = 1


def die_with_launcher() -> None:
    """SIGTERM to this process when its parent exits; at once when the parent is no longer the launcher."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    launcher = os.environ.get(LAUNCHER_PID_ENV, "")
    if launcher.isdigit() and os.getppid() != int(launcher):
        os.kill(os.getpid(), signal.SIGTERM)


def started_by_torchrun() -> bool:
    """Whether torchrun started this process (its rank variables are set): a one-process run outlives its shell."""
    return all(name in os.environ for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"))


if __name__ == "__main__":
    die_with_launcher()
    del sys.path[0]  # this file's folder: v1/train's modules are not top-level names
    import runpy

    runpy.run_module("v1.train", run_name="__main__", alter_sys=True)  # `python -m v1.train`, now tied to the launcher
