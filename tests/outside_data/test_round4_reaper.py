"""Round 4: finding 13 where v1 is not root. A command that kills its reaper leaves nothing behind.

Round 3 put the command in a PID namespace of its own, but only as root; run as another user, the
command still found its reaper in /proc, killed it, and a process it had started in a new session
outlived the rollout (reproduced as uid 65534). Now the namespace is made inside a user namespace
that maps only the user's own ids. The reaper is run as uid 65534 by the system's Python, as v1
runs it (`python -I -S _host_reaper.py PARENT -- ARGV...`), with the round-3 attack as its command.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

import v1.programs
from tests.outside_data.test_host_commands import KILL_THE_REAPER, _marked
from tests.tools.patience import HANG_S

SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]


@pytest.mark.skipif(
    os.geteuid() != 0 or SYSTEM_PYTHON is None or shutil.which("setpriv") is None,
    reason="runs the reaper as uid 65534: needs root to drop to it (CI runs as root), setpriv and a system python3",
)
def test_r13_without_root_a_command_that_kills_its_reaper_leaves_nothing_behind() -> None:
    assert SYSTEM_PYTHON is not None
    folder = Path(tempfile.mkdtemp(prefix="v1-r13-", dir="/tmp"))  # readable by uid 65534, unlike pytest's tmp_path
    marker = f"v1-r13-nobody-{os.getpid()}-{folder.name}"
    try:
        folder.chmod(0o755)
        reaper = folder / "_host_reaper.py"
        shutil.copy(Path(v1.programs.__file__).parent / "_host_reaper.py", reaper)
        attack = folder / "attack.py"
        attack.write_text(KILL_THE_REAPER)
        for file in (reaper, attack):
            file.chmod(0o644)
        command = [SYSTEM_PYTHON, "-I", "-S", str(reaper), str(os.getpid()), "--", SYSTEM_PYTHON, str(attack), marker]
        subprocess.run([*NOBODY, *command], timeout=HANG_S, check=False)
        # the reaper returns once the namespace's init is reaped, which the kernel allows only after
        # every process of the namespace is gone: nothing of the command's may be alive now
        assert _marked(marker + "-left") == []
    finally:
        for pid in _marked(marker + "-left"):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder)


@pytest.mark.skipif(
    os.geteuid() != 0 or SYSTEM_PYTHON is None or shutil.which("setpriv") is None,
    reason="runs the reaper as uid 65534: needs root to drop to it (CI runs as root), setpriv and a system python3",
)
def test_without_root_the_command_keeps_the_users_ids_and_its_files_their_owner() -> None:
    assert SYSTEM_PYTHON is not None
    folder = Path(tempfile.mkdtemp(prefix="v1-r13-", dir="/tmp"))
    try:
        folder.chmod(0o777)
        reaper = folder / "_host_reaper.py"
        shutil.copy(Path(v1.programs.__file__).parent / "_host_reaper.py", reaper)
        reaper.chmod(0o644)
        made = folder / "made"
        script = f"import os; open({str(made)!r}, 'w').close(); print(os.getuid(), os.getgid(), os.getpid())"
        command = [SYSTEM_PYTHON, "-I", "-S", str(reaper), str(os.getpid()), "--", SYSTEM_PYTHON, "-c", script]
        result = subprocess.run([*NOBODY, *command], timeout=HANG_S, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        uid, gid, pid = result.stdout.split()
        assert (uid, gid) == ("65534", "65534")
        assert pid == "2"  # under the namespace's init: its own PID namespace
        assert (made.stat().st_uid, made.stat().st_gid) == (65534, 65534)
    finally:
        shutil.rmtree(folder)
