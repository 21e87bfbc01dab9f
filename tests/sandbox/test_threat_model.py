"""The local backend's threat model (docs/sandbox.md, "Threat model"), one test per line of that list.

Each test runs the attack for real (as root where the host side is root, as CI runs) and checks
that it no longer breaks anything. The test names carry the list's numbers (T1, T2, ...).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import v1 as vf
from tests.tools.patience import HANG_S, arrives
from tests.tools.venvs import venv_seeing_these_packages
from v1.config import ArtifactConfig
from v1.programs._artifacts import collect_artifacts
from v1.programs._install import build_requirements, project_dependencies
from v1.programs._sandboxed import _read_host_file, install_package
from v1.sandbox import EndpointTarget, ExecResult, Sandbox, get_manager, list_sandboxes
from v1.sandbox import _seccomp as seccomp
from v1.sandbox._limits import cgroup_support
from v1.sandbox._local import RUN_DIR
from v1.testing import MockModelServer

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def private_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "sandboxes"
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(root))
    return root


async def _run(sandbox: Sandbox, script: str) -> ExecResult:
    return await sandbox.exec(["python", "-c", textwrap.dedent(script)], timeout=HANG_S)


async def test_t1_runs_unprivileged_with_no_capabilities_and_host_wide_proc_read_only() -> None:
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig())
    try:
        result = await _run(
            sandbox,
            """
            import os
            status = dict(line.split(":", 1) for line in open("/proc/self/status"))
            print("caps", status["CapEff"].strip(), status["CapBnd"].strip())
            swappiness = open("/proc/sys/vm/swappiness").read()
            for path, data in [("/proc/sys/vm/swappiness", swappiness), ("/proc/sys/kernel/core_pattern", None),
                               ("/proc/sysrq-trigger", None)]:
                try:
                    with open(path, "w") as file:  # writes back the same value: harmless if it ever succeeded
                        if data is not None:
                            file.write(data)
                    print("WRITABLE", path)
                except OSError:
                    print("refused", path)
            open("made-inside", "w").close()
            environ = open("/proc/1/environ", "rb").read().decode()
            print("environ", environ.replace("\\0", " "))
            """,
        )
        assert result.exit_code == 0, result.stderr
        assert "caps 0000000000000000 0000000000000000" in result.stdout
        assert "WRITABLE" not in result.stdout and result.stdout.count("refused") == 3
        owner = os.stat(sandbox.workspace / "made-inside").st_uid  # type: ignore[attr-defined]
        assert owner != 0, "a process in the sandbox acts as host root"
        if os.geteuid() == 0:
            assert owner == 65534
        environ = result.stdout.split("environ", 1)[1]
        assert str(REPO) not in environ and os.environ.get("HOME", "/root") not in environ
    finally:
        await manager.delete(sandbox)


async def test_t2_root_dev_and_etc_are_read_only_and_tmpfs_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_LIMITS", "rlimit")  # no cgroup to charge tmpfs pages to
    cgroup_support.cache_clear()
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig(memory_gb=0.1, disk_size_gb=1))
    try:
        result = await _run(
            sandbox,
            """
            chunk = b"x" * (1 << 20)
            for path in ["/etc/filler", "/filler", "/dev/filler", "/tmp/filler", "/dev/shm/filler"]:
                written = 0
                try:
                    with open(path, "wb") as file:
                        while written < 3000:
                            file.write(chunk)
                            written += 1
                except OSError:
                    pass
                print(path, written)
            """,
        )
    finally:
        await manager.delete(sandbox)
        cgroup_support.cache_clear()
    written = dict(line.split() for line in result.stdout.splitlines())
    assert written["/etc/filler"] == written["/filler"] == written["/dev/filler"] == "0"
    assert int(written["/tmp/filler"]) <= 103 and int(written["/dev/shm/filler"]) <= 103  # memory_gb=0.1


async def test_t3_disk_limit_is_enforced_while_the_program_runs() -> None:
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig(disk_size_gb=0.05))
    try:
        result = await sandbox.exec(
            ["sh", "-c", "for i in $(seq 1 200); do head -c 10000000 /dev/zero > f$i || exit 3; done; echo done"],
            timeout=HANG_S,
        )
        usage = sum(path.stat().st_size for path in sandbox.workspace.iterdir())  # type: ignore[attr-defined]
    finally:
        await manager.delete(sandbox)
    assert result.limit == "disk" and "done" not in result.stdout
    assert usage < 600 * 10**6, f"{usage} bytes reached the host disk with disk_size_gb=0.05"


SWAPPER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
os.symlink(sys.argv[1], "swap-link")
open("note.txt", "w").write("note")
end = time.time() + float(sys.argv[2])
swaps = 0
while time.time() < end:
    libc.renameat2(-100, b"note.txt", -100, b"swap-link", 2)  # RENAME_EXCHANGE
    swaps += 1
print(swaps)
"""


async def _swapping(sandbox: Sandbox, swapper: asyncio.Future[ExecResult]) -> None:
    """Wait until the swapper has made its link (its start can take a minute on a loaded machine) or has ended."""
    link = sandbox.workspace / "swap-link"  # type: ignore[attr-defined]
    await arrives(lambda: link.is_symlink() or swapper.done(), "the swapper's link")


async def test_t4_symlink_swap_race_never_writes_outside_the_workspace(tmp_path: Path) -> None:
    victim = tmp_path / "host-victim.txt"
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig(scope="group"))
    try:
        await sandbox.write_file("swapper.py", SWAPPER.encode())
        swapper = asyncio.ensure_future(sandbox.exec(["python", "swapper.py", str(victim), "4"], timeout=HANG_S))
        await _swapping(sandbox, swapper)
        refused = writes = 0
        while not swapper.done() and (writes < 300 or refused == 0):  # while it swaps: until a write has met the link
            try:
                await sandbox.write_file("note.txt", b"other rollout's content")
            except vf.SandboxError:
                refused += 1
            writes += 1
        result = await swapper
    finally:
        await manager.delete(sandbox)
    assert int(result.stdout) > 1000, result.stderr  # the race really ran
    assert not victim.exists(), "the host followed a swapped-in symlink and wrote outside the workspace"
    assert refused > 0  # some writes met the symlink, and were refused


async def test_t5_symlink_swap_race_never_reads_host_files_into_artifacts() -> None:
    shadow = Path("/etc/shadow")
    secret = await asyncio.to_thread(shadow.read_bytes) if os.access(shadow, os.R_OK) else None
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig(scope="group"))
    try:
        await sandbox.write_file("swapper.py", SWAPPER.encode())
        swapper = asyncio.ensure_future(sandbox.exec(["python", "swapper.py", str(shadow), "4"], timeout=HANG_S))
        await _swapping(sandbox, swapper)
        seen: set[bytes] = set()
        for _ in range(100):
            state = vf.State()
            await collect_artifacts(state, [ArtifactConfig(path="note.txt", optional=True)], sandbox.read_file)
            seen.add(str((state.get("artifacts") or {}).get("note.txt", "")).encode())
        await swapper
    finally:
        await manager.delete(sandbox)
    assert seen <= {b"note", b""}, f"host file content reached the artifacts: {seen}"
    if secret is not None:
        assert secret not in seen


async def test_t6_fifo_and_symlink_loop_artifacts_are_refused_and_the_others_kept() -> None:
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig())
    try:
        setup = "mkfifo answer.txt && ln -s loop-a loop-b && ln -s loop-b loop-a && echo kept > good.txt"
        assert (await sandbox.exec(["sh", "-c", setup])).ok
        state = vf.State()
        specs = [
            ArtifactConfig(path="answer.txt", optional=True),
            ArtifactConfig(path="loop-a", optional=True),
            ArtifactConfig(path="good.txt"),
        ]
        await asyncio.wait_for(collect_artifacts(state, specs, sandbox.read_file), HANG_S)
    finally:
        await manager.delete(sandbox)
    assert state["artifacts"] == {"good.txt": "kept\n"}
    assert "answer.txt" in state["error"]["message"] and "loop-a" in state["error"]["message"]


def _python_script(body: str) -> str:
    return textwrap.dedent(
        f"""
        import asyncio, os, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        import v1 as vf
        from v1.sandbox import get_manager
        {textwrap.indent(textwrap.dedent(body), "        ").strip()}
        """
    )


def test_t7_a_python_under_tmp_runs_sandboxed_programs(tmp_path: Path) -> None:
    venv = Path("/tmp") / f"v1-venv-test-{os.getpid()}"
    try:
        venv_seeing_these_packages(venv)  # not --system-site-packages: from inside a venv, that sees the base Python's
        body = """
        async def main():
            sandbox = await get_manager().create(vf.SandboxConfig())
            result = await sandbox.exec(["python", "-c", "import sys; print(sys.prefix)"])
            print(result.exit_code, result.stdout.strip(), result.stderr.strip())
        asyncio.run(main())
        """
        env = os.environ | {"PYTHONPATH": str(REPO)}
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-c", _python_script(body)], capture_output=True, text=True, env=env, timeout=HANG_S
        )
    finally:
        subprocess.run(["rm", "-rf", str(venv)], check=True)
    assert done.stdout.strip() == f"0 {venv}", done.stderr


ZOMBIE_CHECK = """
import ctypes, os, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans of the scenario come here
scenario = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
scenario.stdout.readline()  # "ready": its sandbox exists (its start can take a minute on a loaded machine)
if sys.argv[2] == "sigterm":
    time.sleep(float(sys.argv[3]))
    scenario.terminate()
scenario.communicate()
time.sleep(1.0)
left = []
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            left.append((entry, fields[0], open(f"/proc/{entry}/comm").read().strip()))
print(left)
"""


@pytest.mark.parametrize("path", ["cancel", "timeout", "sigterm"])
def test_t8_every_process_the_backend_starts_is_waited_for(path: str) -> None:
    body = f"""
    async def main():
        sandbox = await get_manager().create(vf.SandboxConfig())
        print("ready", flush=True)
        if {path!r} == "timeout":
            await sandbox.exec(["sh", "-c", "sleep 300 & sleep 300"], timeout=1)
        elif {path!r} == "cancel":
            task = asyncio.ensure_future(sandbox.exec(["sh", "-c", "sleep 300 & sleep 300"]))
            await asyncio.sleep(2)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        else:
            await sandbox.exec(["sh", "-c", "sleep 300 & sleep 300"])
    asyncio.run(main())
    """
    done = subprocess.run(
        [sys.executable, "-c", ZOMBIE_CHECK, _python_script(body), path, "4"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env=os.environ | {"PYTHONPATH": str(REPO)},
    )
    assert done.stdout.strip().endswith("[]"), done.stdout + done.stderr


def test_t9_sandboxes_are_deleted_at_a_normal_interpreter_exit(private_root: Path) -> None:
    body = """
    async def main():
        sandbox = await get_manager().create(vf.SandboxConfig(scope="global"))
        await sandbox.exec(["sh", "-c", "echo x > kept.txt"])
        print(sandbox.id)
    asyncio.run(main())
    """
    done = subprocess.run(
        [sys.executable, "-c", _python_script(body)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env=os.environ | {"PYTHONPATH": str(REPO), "V1_SANDBOX_ROOT": str(private_root)},
    )
    sandbox_id = done.stdout.strip()
    assert sandbox_id.startswith("v1-"), done.stderr
    assert not (private_root / "local" / sandbox_id).exists()
    assert list((private_root / "ledger").glob("*.json")) == []
    assert not (Path("/tmp/v1-run") / sandbox_id).exists()
    support = cgroup_support()
    if support is not None:
        assert not any((parent / sandbox_id).exists() for parent in support.parents.values())


SETUP_PY = """
import socket
from setuptools import setup
for _ in range(2):
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
    except OSError:
        pass
setup()
"""


async def test_t10_a_package_build_gets_no_host_loopback(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    project = tmp_path / "loopback_probe"
    project.mkdir()
    (project / "loopback_probe.py").write_text("VALUE = 7\n")
    (project / "setup.py").write_text(SETUP_PY.format(port=listener.getsockname()[1]))
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "loopback-probe"\nversion = "0"\n[tool.setuptools]\npy-modules = ["loopback_probe"]\n'
    )
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig())
    try:
        await install_package(sandbox, project, HANG_S)
        imported = await sandbox.exec(["python", "-c", "import loopback_probe; print(loopback_probe.VALUE)"])
    finally:
        await manager.delete(sandbox)
    assert imported.stdout == "7\n", imported.stderr
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing connected during the install
    listener.close()


@pytest.mark.parametrize(
    "dependency", ["probe @ http://127.0.0.1:9/probe.whl", "--index-url=http://127.0.0.1:9/", "-r/etc/passwd", 7]
)
def test_t10_direct_references_and_options_are_refused_as_dependencies(tmp_path: Path, dependency: object) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'x'\ndependencies = [{dependency!r}]\n".replace("'", '"'))
    with pytest.raises(vf.SandboxError, match="not a plain requirement"):
        project_dependencies(tmp_path)
    (tmp_path / "pyproject.toml").write_text(f"[build-system]\nrequires = [{dependency!r}]\n".replace("'", '"'))
    with pytest.raises(vf.SandboxError, match=r"\[build-system\]\.requires: .* is not a plain requirement"):
        build_requirements(tmp_path)


@pytest.mark.parametrize("value", ["0", "-1", "nobody", "1.5"])
async def test_a_bad_sandbox_uid_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("V1_SANDBOX_UID", value)
    with pytest.raises(vf.SandboxError, match="V1_SANDBOX_UID must be a non-zero uid"):
        await get_manager().create(vf.SandboxConfig())


@pytest.mark.parametrize("path", ["../escape.txt", "sub/../../escape.txt", "/etc/passwd", "/workspace/../etc/passwd", ""])
async def test_paths_out_of_the_workspace_are_refused(path: str) -> None:
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig())
    try:
        with pytest.raises(vf.SandboxError):
            await sandbox.write_file(path, b"x")
        with pytest.raises(vf.SandboxError):
            await sandbox.read_file(path, 10)
    finally:
        await manager.delete(sandbox)
    assert list_sandboxes() == []


async def test_t6_an_unsandboxed_programs_fifo_artifact_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "answer.txt"
    os.mkfifo(fifo)
    (tmp_path / "good.txt").write_text("kept")
    state = vf.State()
    specs = [ArtifactConfig(path=str(fifo)), ArtifactConfig(path=str(tmp_path / "good.txt"))]
    await asyncio.wait_for(collect_artifacts(state, specs, _read_host_file), HANG_S)
    assert state["artifacts"] == {str(tmp_path / "good.txt"): "kept"}
    assert "not a regular file" in state["error"]["message"]


SYSCALL_PROBE = """
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
buffer = ctypes.create_string_buffer(256)
args = {  # arguments that succeed, or fail with something other than EPERM, when the call is not filtered
    "keyctl": (0, -3, 1), "add_key": (b"user", b"v1-probe", b"x", 1, -2), "request_key": (b"user", b"v1-none", None, 0),
    "bpf": (0, None, 0), "perf_event_open": (None, 0, -1, -1, 0), "userfaultfd": (0,), "io_uring_setup": (1, buffer),
    "unshare": (0x10000000,), "setns": (-1, 0), "open_by_handle_at": (-1, None, 0),
    "name_to_handle_at": (-100, b".", None, None, 0), "mount": (b"none", b"/tmp", b"tmpfs", 0, None),
    "init_module": (None, 0, b""), "kexec_load": (0, 0, None, 0), "swapon": (b"/tmp/x", 0), "reboot": (0, 0, 0, None),
    "iopl": (3,), "ioperm": (0, 1, 1), "clone": (0x10000000 | 17, 0, 0, 0, 0), "clone3": (None, 0),
}
for name, number in zip(sys.argv[1::2], sys.argv[2::2]):
    ctypes.set_errno(0)
    result = libc.syscall(int(number), *args[name])
    if name == "clone" and result == 0:
        os._exit(0)  # the child of an unfiltered clone
    print(name, result, errno.errorcode.get(ctypes.get_errno(), "none"))
"""


async def test_t11_a_seccomp_filter_denies_calls_that_widen_the_kernels_attack_surface() -> None:
    names = ["keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "unshare"]
    names += ["setns", "open_by_handle_at", "name_to_handle_at", "mount", "init_module", "kexec_load", "swapon", "reboot"]
    names += ["clone", "clone3"] + (["iopl", "ioperm"] if os.uname().machine == "x86_64" else [])
    numbers = [str(seccomp._library().seccomp_syscall_resolve_name(name.encode())) for name in names]
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig())
    try:
        await sandbox.write_file("probe.py", SYSCALL_PROBE.encode())
        result = await sandbox.exec(["python", "probe.py", *(x for pair in zip(names, numbers) for x in pair)])
    finally:
        await manager.delete(sandbox)
    assert result.exit_code == 0, result.stderr
    seen = {name: (int(code), error) for name, code, error in (line.split() for line in result.stdout.splitlines())}
    assert seen.pop("clone3") == (-1, "ENOSYS")  # the C library falls back to clone, whose flags the filter sees
    assert seen == {name: (-1, "EPERM") for name in names if name != "clone3"}


TOOLCHAIN = """
set -e
python -c "import threading, subprocess; t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()"
mkdir -p probe_pkg && cd probe_pkg
printf 'VALUE = 42\\n' > probe_pkg.py
printf '[build-system]\\nrequires = ["setuptools"]\\nbuild-backend = "setuptools.build_meta"\\n[project]\\nname = "probe-pkg"\\nversion = "1"\\n[tool.setuptools]\\npy-modules = ["probe_pkg"]\\n' > pyproject.toml
cd ..
python -m pip install -q --no-index --no-build-isolation --target site ./probe_pkg
PYTHONPATH=site python -c "import probe_pkg; print('pip', probe_pkg.VALUE)"
git init -q repo && cd repo && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m first && git log --format='git %s' && cd ..
printf '#include <stdio.h>\\nint main(void) { puts("gcc ok"); return 0; }\\n' > hello.c
gcc -O1 -pthread -o hello hello.c && ./hello
"""


async def test_t11_python_pip_git_and_gcc_still_work_under_the_filter() -> None:
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig())
    try:
        result = await sandbox.exec(["sh", "-c", TOOLCHAIN], timeout=HANG_S)
    finally:
        await manager.delete(sandbox)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["thread", "pip 42", "git first", "gcc ok"]


async def test_t11_without_libseccomp_the_backend_refuses_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seccomp.ctypes.util, "find_library", lambda name: "libv1-no-such-seccomp.so.9")
    seccomp._library.cache_clear()
    seccomp.filter_program.cache_clear()
    try:
        with pytest.raises(vf.SandboxError, match=r"needs libseccomp .*apt-get install -y libseccomp2"):
            await get_manager().create(vf.SandboxConfig())
    finally:
        seccomp._library.cache_clear()
        seccomp.filter_program.cache_clear()
    assert list_sandboxes() == []


MOUNT_PROBE = """
import glob, sys
cmdlines = sorted(glob.glob("/proc/[0-9]*/cmdline"))  # pid 1 is bwrap: its argv once named every staging path
for path in [*cmdlines, "/proc/self/mountinfo", "/proc/self/mounts", "/proc/1/environ", "/etc/passwd", "/etc/group"]:
    sys.stdout.write(open(path, "rb").read().decode().replace("\\0", "\\n"))
"""


def _host_user_names() -> set[str]:
    names = {line.split(":", 1)[0] for line in Path("/etc/passwd").read_text().splitlines() if ":" in line}
    return names - {"root", "nobody", "sandbox"}


@pytest.mark.skipif(os.geteuid() != 0, reason="hidden where the host side is root (CI, containers); docs/sandbox.md")
async def test_t12_no_host_path_or_user_name_shows_in_cmdline_mountinfo_mounts_or_environ(tmp_path: Path) -> None:
    endpoint = socket.socket()
    endpoint.bind(("127.0.0.1", 0))
    manager = get_manager()
    port = endpoint.getsockname()[1]
    sandbox = await manager.create(vf.SandboxConfig(), endpoint=EndpointTarget("127.0.0.1", port))
    try:
        host_socket, inside_socket = sandbox.control_socket_path("control-probe.sock")  # type: ignore[misc]
        control = socket.socket(socket.AF_UNIX)
        control.bind(str(host_socket))
        await sandbox.write_file("probe.py", MOUNT_PROBE.encode())
        env = {"V1_CONTROL_SOCKET": inside_socket, "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/r/probe/v1"}
        result = await sandbox.exec(["python", "probe.py"], env=env)
        local = sandbox  # the local backend's paths, to look for
        host_paths = [local.root, local.workspace, local.run_dir, local.stage_dir, REPO, tmp_path, sandbox.id]  # type: ignore[attr-defined]
    finally:
        await manager.delete(sandbox)
        endpoint.close()
    assert result.exit_code == 0, result.stderr
    assert f"{RUN_DIR}/endpoint.sock" in result.stdout and inside_socket in result.stdout  # the sockets are there
    leaks = [str(path) for path in host_paths if str(path) in result.stdout]
    assert leaks == [], f"host paths show inside the sandbox: {leaks}"
    # The running Python's prefix is bound at its own path (a venv names it); no other line names the host home.
    prefixes = {sys.prefix, sys.base_prefix}
    home = os.environ.get("HOME", "/root")
    assert "/run/v1-launcher.py" in result.stdout  # the cmdlines were read
    mounts_and_environ = result.stdout.split("root:x:0:0:", 1)[0]
    lines = [line for line in mounts_and_environ.splitlines() if home in line and not any(p in line for p in prefixes)]
    assert lines == []
    databases = result.stdout[result.stdout.index("root:x:0:0:") :]
    shown_names = {line.split(":", 1)[0] for line in databases.splitlines() if line.count(":") >= 3}
    assert shown_names == {"root", "sandbox", "nobody", "nogroup"}
    assert not _host_user_names() & set(result.stdout.replace(":", " ").split())


SHARED_SANDBOX_AGENT = r"""
set -e
stat -c %i /run/v1/endpoint.sock > socket-$ROLE.txt
ls /run/v1 > run-dir-$ROLE.txt
if [ "$ROLE" = first ]; then
  printf '%s %s %s\n' "$OPENAI_BASE_URL" "$ANTHROPIC_BASE_URL" "$OPENAI_API_KEY" > /workspace/first_endpoint
  until [ -f /workspace/done ]; do sleep 0.05; done  # the harness's timeout_seconds is the hang guard
else
  until [ -f /workspace/first_endpoint ]; do sleep 0.05; done
  read url anthropic key < /workspace/first_endpoint
  body='{"model": "x", "max_tokens": 5, "messages": [{"role": "user", "content": "steal"}]}'
  curl -s -o openai.json -w '%{http_code}' "$url/chat/completions" -H "Authorization: Bearer $key" \
    -H "Content-Type: application/json" -d "$body" > openai-status.txt
  curl -s -o anthropic.json -w '%{http_code}' "$anthropic/v1/messages" -H "x-api-key: $key" \
    -H "anthropic-version: 2023-06-01" -H "Content-Type: application/json" -d "$body" > anthropic-status.txt
  curl -s -o own.json -w '%{http_code}' "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" \
    -H "Content-Type: application/json" -d '{"model": "x", "messages": [{"role": "user", "content": "own"}]}' > own-status.txt
  touch /workspace/done
fi
"""


async def test_t13_each_rollout_of_a_shared_sandbox_reaches_the_endpoint_as_itself_only(mock: MockModelServer) -> None:
    names = ["socket-first.txt", "socket-second.txt", "run-dir-first.txt", "run-dir-second.txt", "openai-status.txt"]
    names += ["openai.json", "anthropic-status.txt", "anthropic.json", "own-status.txt"]
    program = {
        "command": ["sh", "-c", SHARED_SANDBOX_AGENT],
        "bindings": {"env.ROLE": "task.info.role"},
        "artifacts": [{"path": name, "optional": True} for name in names],
    }
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    harness = vf.Harness(client=client, model="m", program=program, sandbox={"scope": "group"}, timeout_seconds=HANG_S)
    first, second = await harness.run_group(
        [{"prompt": "a", "info": {"role": "first"}}, {"prompt": "b", "info": {"role": "second"}}]
    )
    assert first["error"] is None and second["error"] is None, (first["program_result"], second["program_result"])
    seen = second["artifacts"]
    assert seen["socket-first.txt"] != seen["socket-second.txt"]  # each rollout's command has a socket of its own
    assert seen["run-dir-first.txt"] == seen["run-dir-second.txt"] == "endpoint.sock\n"
    assert seen["openai-status.txt"] == "401" and json.loads(seen["openai.json"])["error"]["code"] == "invalid_api_key"
    anthropic = json.loads(seen["anthropic.json"])
    assert seen["anthropic-status.txt"] == "401" and anthropic["type"] == "error"
    assert anthropic["error"]["type"] == "authentication_error"
    assert seen["own-status.txt"] == "200"
    assert first["trajectory"] == [] and len(second["trajectory"]) == 1  # the refused calls are recorded nowhere
    assert [request.last_user_text for request in mock.requests] == ["own"]
