"""Runs an unsandboxed command so that it dies with v1 (standard library only, `python -I -S`).

It asks the kernel for SIGTERM when its parent (v1) dies (`PR_SET_PDEATHSIG`) and adopts every
orphaned descendant (`PR_SET_CHILD_SUBREAPER`), runs the command, and when the command exits
or v1 dies, kills every process left under it, one that called `setsid` too. It exits with the command's status (128+N when signal N killed it).

The command runs in a PID namespace of its own under a small init: the reaper's pid means nothing
there, so the command cannot signal it away and outlive it (it could when they shared a namespace),
the init takes no signal from inside, and when the init ends, with the command or killed from
outside, the kernel kills every process left in the namespace. As root the namespace is made
directly; otherwise inside a user namespace that maps only the user's own uid and gid to
themselves (files keep their owner; setuid programs such as `sudo` don't work there). Where the
kernel allows neither, the command at least dies with the reaper (its own `PR_SET_PDEATHSIG`).

Usage: `_host_reaper.py PARENT_PID -- ARGV...`
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
EXIT_NOT_RUN = 127


def _descendants() -> list[int]:
    found: list[int] = []
    pending = [os.getpid()]
    while pending:
        pid = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as file:
                    children = [int(child) for child in file.read().split()]
            except OSError:
                continue
            found += children
            pending += children
    return found


def _kill_all() -> None:
    """SIGKILL every descendant (its process group's members are among them)."""
    for _ in range(3):  # a fork between the walk and the kill is caught on the next pass
        left = _descendants()
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _on_parent_death(signum: int, frame: object) -> None:
    _kill_all()
    os._exit(128 + signal.SIGKILL)


def _exec(argv: list[str]) -> None:
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"cannot run {argv[0]!r}: {exc}\n")
    os._exit(EXIT_NOT_RUN)


def _exit_code(status: int) -> int:
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _wait_for(child: int) -> int:
    """Reap every child (adopted orphans too) until `child` ends; its exit code."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return EXIT_NOT_RUN
        except InterruptedError:
            continue
        if pid == child:
            return _exit_code(status)


def _namespace_init(libc: ctypes.CDLL, argv: list[str]) -> int:
    """PID 1 of the command's namespace: default dispositions only, so nothing inside can signal it."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.setsid()  # the command's process group holds no process outside the namespace
    command = os.fork()
    if command == 0:
        _exec(argv)
    return _wait_for(command)


def _write(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


def _own_pid_namespace(libc: ctypes.CDLL) -> bool:
    """Whether the next child starts a PID namespace: made directly (root), else inside a user namespace of our own."""
    if libc.unshare(CLONE_NEWPID) == 0:
        return True
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0:
        return False
    try:
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/setgroups", "deny\n")
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    except OSError:
        pass  # unmapped ids show as the overflow ids; the host still checks access as the real ones
    return True


def main() -> int:
    parent, argv = int(sys.argv[1]), sys.argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    signal.signal(signal.SIGTERM, _on_parent_death)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # v1 died before the request took effect
        return 128 + signal.SIGKILL
    own_namespace = _own_pid_namespace(libc)
    child = os.fork()
    if child == 0:
        if own_namespace:
            os._exit(_namespace_init(libc, argv))
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        _exec(argv)
    code = _wait_for(child)
    _kill_all()
    return code


if __name__ == "__main__":
    sys.exit(main())
