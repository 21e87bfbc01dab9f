"""The `local` sandbox backend: Linux namespaces through bubblewrap (`bwrap`).

A local sandbox is a directory on the host (`$V1_SANDBOX_ROOT/local/<id>`,
default under the system temp dir) holding its workspace; every command runs in
a fresh `bwrap` with: the host's system directories read-only (`/usr`, the
libraries, a few files of `/etc`, the running Python's prefix), the workspace
read-write at `workdir`, a private size-limited `/tmp`, new user, PID, IPC, UTS
and network namespaces, and the sandbox's cgroups or rlimits (see `limits`).
The way out is the rollout's endpoint: the launcher listens on the sandbox's
own loopback at the endpoint's port and relays to a Unix socket that the host
side relays to the endpoint. Under a `NetworkPolicy` the launcher also listens
at `PROXY_PORT` and relays to the host's egress proxy (see `_egress_proxy`),
which decides each connection against the policy; `network = "all"` shares the
host's network instead. A timeout or delete kills the process
tree (process group, PID namespace and cgroup).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

from v1._util.sandbox_paths import sandbox_path_problem
from v1.config import NetworkPolicy, SandboxConfig
from v1.errors import SandboxError
from v1.sandbox._backend import EndpointTarget, ExecResult, OutputCallback
from v1.sandbox._egress_proxy import EgressSockets, proxy_env, proxy_port
from v1.sandbox._endpoint_relay import MAX_CONNECTIONS, RolloutRelays
from v1.sandbox._host_files import copy_into, copy_out, read_bytes, relative_parts, write_bytes
from v1.sandbox._limits import SandboxCgroups, cgroup_support, remove_cgroup, sandbox_cgroup_dirs
from v1.sandbox._option_file import option_file
from v1.sandbox._own_filesystem import IMAGE_NAME, mount_run_dir, mount_workspace, unmount
from v1.sandbox._process import kill_children, kill_group, reap_now, run_process
from v1.sandbox._seccomp import filter_program, seccomp_problem

INSTALL_HINT = "install it with `apt-get install -y bubblewrap` (Debian/Ubuntu) or `dnf install bubblewrap` (Fedora)"
LAUNCHER = Path(__file__).with_name("_launcher.py")
LAUNCHER_SPEC = "/run/v1-spec.json"
ENTER = Path(__file__).with_name("_enter.py")
RUN_DIR = "/run/v1"
DEFAULT_MAX_PROCESSES = 512
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = (
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/alternatives",
    "/etc/mime.types",
)
PASSWD = "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
GROUP = "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n"
"""The sandbox's own user and group databases: the host's would name its users."""
TRUST_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")
"""The host's certificate-authority settings: passed into a sandbox when they name a path it shows, so
installs behind a TLS-inspecting proxy trust what the host trusts (nothing else of the host's environment is)."""
TRUST_DIRS = ("/etc/ssl/", "/etc/ca-certificates/", "/usr/")
SANDBOX_UID = 1000
NOBODY = 65534
PROC_READ_ONLY = ("sys", "sysrq-trigger", "fs", "irq", "bus")
"""Parts of the sandbox's `/proc` that speak for the whole host: bound read-only."""
DISK_POLL_SECONDS = 0.25
SIGXFSZ_EXIT = 128 + signal.SIGXFSZ
WATCH_EXITS = {251: "memory", 252: "pids"}
"""Exit statuses of the launcher's watch (no cgroups): it killed the sandbox at a limit."""


def sandbox_root() -> Path:
    """Where local sandboxes and the ledger live (`V1_SANDBOX_ROOT`, else `<tmp>/v1-sandboxes`)."""
    return Path(os.environ.get("V1_SANDBOX_ROOT") or Path(tempfile.gettempdir()) / "v1-sandboxes")


def run_dir(sandbox_id: str) -> Path:
    """Where a sandbox's Unix sockets live: a short path, as socket paths are limited to 108 bytes."""
    return Path(tempfile.gettempdir()) / "v1-run" / sandbox_id


def stage_dir(sandbox_id: str) -> Path:
    """Where a root host side stages the sandbox's binds (see `_enter.py`): a path any user can enter."""
    return Path(tempfile.gettempdir()) / "v1-run" / f"{sandbox_id}.stage"


def sandbox_user() -> tuple[int, int] | None:
    """The unprivileged host (uid, gid) a root host side runs sandboxes as (`V1_SANDBOX_UID`, default nobody).

    None when the host side is not root: its own uid is unprivileged already.
    """
    if os.geteuid() != 0:
        return None
    raw = os.environ.get("V1_SANDBOX_UID") or str(NOBODY)
    if not raw.isdigit() or int(raw) == 0:
        raise SandboxError(f"V1_SANDBOX_UID must be a non-zero uid, got {raw!r}")
    return int(raw), int(raw)


def _python_prefixes() -> list[str]:
    prefixes = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent.parent)}
    return sorted(p for p in prefixes if not p.startswith("/usr/"))


@contextlib.contextmanager
def _memory_file(content: bytes) -> Iterator[int]:
    """An anonymous in-memory file holding `content`, read from the start; closed after."""
    memfd = os.memfd_create("v1-sandbox", os.MFD_CLOEXEC)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(memfd, view) :]
        os.lseek(memfd, 0, os.SEEK_SET)
        yield memfd
    finally:
        os.close(memfd)


@functools.cache
def data_files() -> dict[str, bytes]:
    """Files every sandbox shows, by path inside: the launcher and the user and group databases."""
    return {"/run/v1-launcher.py": LAUNCHER.read_bytes(), "/etc/passwd": PASSWD.encode(), "/etc/group": GROUP.encode()}


@contextlib.contextmanager
def command_files(launcher_spec: bytes) -> Iterator[dict[str, int]]:
    """One command's memory files, by name: "seccomp" (its filter), `LAUNCHER_SPEC` and `data_files`.

    The launcher's spec (the command's argv) is a file, not an argument: one argument holds at most
    128 KiB, and a command's arguments may hold more.
    """
    with contextlib.ExitStack() as stack:
        contents = {"seccomp": filter_program(), LAUNCHER_SPEC: launcher_spec, **data_files()}
        yield {name: stack.enter_context(_memory_file(content)) for name, content in contents.items()}


def _user_processes(uid: int) -> int:
    """Tasks (threads included, as RLIMIT_NPROC counts them) of the user `uid` on the host."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
    return count


def _usage_bytes(path: Path) -> int:
    total = 0
    stack = [path]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    else:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
    return total


class DiskWatch:
    """Polls a workspace's usage while a command runs; over the limit, the command is killed."""

    def __init__(self, workspace: Path, limit_bytes: int) -> None:
        self.workspace = workspace
        self.limit_bytes = limit_bytes
        self.exceeded = False

    async def watch(self) -> None:
        """Returns (so the caller kills the command) once the workspace holds more than the limit.

        A workspace over the limit already when the command starts may run it (to clean up), not grow it.
        """
        allowed = max(self.limit_bytes, await asyncio.to_thread(_usage_bytes, self.workspace))
        while True:
            started = time.monotonic()
            if await asyncio.to_thread(_usage_bytes, self.workspace) > allowed:
                self.exceeded = True
                return
            # A large workspace (installed packages) takes longer to walk: poll it less often,
            # so the watch costs at most about a tenth of a core.
            await asyncio.sleep(max(DISK_POLL_SECONDS, 10 * (time.monotonic() - started)))


def host_trust_env() -> dict[str, str]:
    """`TRUST_VARIABLES` set on the host whose path lies in the system directories a sandbox shows read-only."""
    trusted: dict[str, str] = {}
    for name in TRUST_VARIABLES:
        value = os.environ.get(name, "")
        if value.startswith(TRUST_DIRS) and ".." not in value.split("/") and os.path.realpath(value).startswith(TRUST_DIRS):
            trusted[name] = value
    return trusted


class LocalSandbox:
    """One local sandbox: a workspace on the host and the settings each `bwrap` runs with."""

    def __init__(self, sandbox_id: str, root: Path, config: SandboxConfig, endpoint: EndpointTarget | None) -> None:
        self.id = sandbox_id
        self.root = root
        self.config = config
        self.workdir = config.workdir
        self.workspace = root / "workspace"
        self.run_dir = run_dir(sandbox_id)
        self.stage_dir = stage_dir(sandbox_id)
        self.endpoint = endpoint
        self.user = sandbox_user()
        self.cgroups: SandboxCgroups | None = None
        self.processes: set[asyncio.subprocess.Process] = set()
        self.relays: RolloutRelays | None = None
        self.egress: EgressSockets | None = None
        self.channels: dict[str, Path] = {}  # inside path -> host path of each rollout's control socket
        self.disk_bytes = int(config.disk_size_gb * 1024**3)
        self.memory_bytes = int(config.memory_gb * 1024**3)
        self.binds = self._binds()
        self.staged: dict[str, str] = {}

    def _binds(self) -> list[tuple[str, str, bool]]:
        """(host path, path inside, writable) of every host path bound into the sandbox, parents first:
        a later bind covers an earlier one, so a mount or the Python below the workdir stays visible."""
        prefixes = _python_prefixes()
        for prefix in prefixes:
            if PurePosixPath(self.workdir).is_relative_to(prefix):
                raise SandboxError(f"workdir {self.workdir!r} would hide the Python at {prefix!r}: choose another workdir")
        binds = [(prefix, prefix, False) for prefix in prefixes]
        binds += [(host, inside, False) for inside, host in self.config.mounts.items()]
        binds.append((str(self.workspace), self.workdir, True))
        return sorted(binds, key=lambda bind: len(PurePosixPath(bind[1]).parts))

    async def start(self) -> None:
        self.workspace.mkdir(parents=True)
        self.run_dir.mkdir(parents=True)
        if self.user is not None:
            await asyncio.to_thread(mount_workspace, self.workspace, self.root / IMAGE_NAME, self.disk_bytes, self.user)
            await asyncio.to_thread(mount_run_dir, self.run_dir, self.user)
            await asyncio.to_thread(self._prepare_unprivileged, self.user)
        support = cgroup_support()
        if support is not None:
            self.cgroups = await asyncio.to_thread(
                SandboxCgroups.create, support, self.id, self.memory_bytes, DEFAULT_MAX_PROCESSES
            )
        if self.endpoint is not None and not self.config.network_access:
            self.relays = RolloutRelays(self.endpoint, self.run_dir)
        if isinstance(self.config.network, NetworkPolicy):
            self.egress = EgressSockets(self.config.network, self.endpoint, self.run_dir)

    def _prepare_unprivileged(self, user: tuple[int, int]) -> None:
        """Hand the workspace and run dir to the sandbox user and make a staging path for each bind
        (and for the run dir, whose sockets are bound one by one)."""
        os.chown(self.workspace, *user)
        os.chown(self.run_dir, *user)
        self.run_dir.chmod(0o700)
        self.stage_dir.mkdir(parents=True)
        self.stage_dir.chmod(0o755)
        for index, host in enumerate([*(host for host, _, _ in self.binds), str(self.run_dir)]):
            staged = self.stage_dir / str(index)
            if os.path.isdir(host):
                staged.mkdir()
            else:
                staged.touch()
            self.staged[host] = str(staged)

    def _grant_run_dir(self) -> None:
        """Sockets the host made in the run dir (endpoint relay, control sockets) become the sandbox user's."""
        if self.user is None:
            return
        with contextlib.suppress(OSError), os.scandir(self.run_dir) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if not entry.is_symlink():
                        os.chown(entry.path, *self.user, follow_symlinks=False)

    # -- paths ---------------------------------------------------------------------------

    def workspace_path(self, path: str) -> str:
        """A path inside the sandbox's workspace (absolute, or relative to `workdir`) relative to the workspace.

        Raises:
            SandboxError: the path is outside the workspace, or has a `..`.
        """
        inside = PurePosixPath(path if path.startswith("/") else f"{self.workdir}/{path}")
        try:
            relative = inside.relative_to(self.workdir)
        except ValueError:
            raise SandboxError(f"{path!r} is outside the sandbox workspace {self.workdir!r}") from None
        relative_parts(str(relative))
        return str(relative)

    def endpoint_url(self, url: str) -> str:
        return url

    def control_socket_path(self, name: str) -> tuple[Path, str] | None:
        """A rollout's own socket: bound only into the commands whose environment names it (its rollout's)."""
        host, inside = self.run_dir / name, f"{RUN_DIR}/{name}"
        self.channels[inside] = host
        return host, inside

    # -- files ---------------------------------------------------------------------------

    async def upload(self, source: Path, destination: str) -> None:
        # The sandboxes' own folder is never copied in: a project folder holding `V1_SANDBOX_ROOT` would
        # copy other sandboxes' workspaces, and this one's into itself without end.
        await copy_into(source, self.workspace, self.workspace_path(destination), self.user, skip=sandbox_root())

    async def write_file(self, destination: str, content: bytes) -> None:
        await write_bytes(self.workspace, self.workspace_path(destination), content, self.user)

    async def read_file(self, path: str, max_bytes: int) -> bytes:
        return await read_bytes(self.workspace, self.workspace_path(path), max_bytes)

    async def download(self, path: str, destination: Path) -> None:
        await copy_out(self.workspace, self.workspace_path(path), destination)

    # -- commands ------------------------------------------------------------------------

    def bwrap_options(
        self,
        env: Mapping[str, str],
        cwd: str,
        network: bool,
        fds: Mapping[str, int],
        endpoint_socket: Path | None = None,
        egress_socket: Path | None = None,
    ) -> bytes:
        """The `bwrap` options of one command, as the NUL-separated file `bwrap --args FD` reads (see `option_file`).

        They never reach argv: the sandbox's pid 1 is `bwrap`, and `/proc/1/cmdline` would show the
        staging paths and the sandbox's id, and `ps` on the host the keys of its environment. `fds` are memory files (see `command_files`): its system-call filter
        (see `seccomp`) and the files of `data_files`. `endpoint_socket` (its rollout's, in the run
        dir) is bound at `/run/v1/endpoint.sock`, `egress_socket` (its rollout's proxy) at `/run/v1/egress.sock`.
        """
        args = ["--die-with-parent", "--new-session", "--unshare-all", "--unshare-user"]
        args += ["--seccomp", str(fds["seccomp"])]
        args += ["--cap-drop", "ALL", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
        if network:
            args += ["--share-net", "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]
        # Host binds come after the tmpfs mounts, so a bind under /tmp is not hidden by them.
        args += ["--proc", "/proc"]
        for name in PROC_READ_ONLY:
            args += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
        args += ["--dev", "/dev", "--size", str(self._tmpfs_bytes()), "--tmpfs", "/dev/shm"]
        args += ["--size", str(self._tmpfs_bytes()), "--tmpfs", "/tmp", "--ro-bind", "/usr", "/usr"]
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        for path in ETC_FILES:
            args += ["--ro-bind-try", path, path]
        for inside in [LAUNCHER_SPEC, *data_files()]:  # copied into bwrap's own tmpfs: no host path behind them
            args += ["--ro-bind-data", str(fds[inside]), inside]
        for host, inside, writable in self.binds:
            args += ["--bind" if writable else "--ro-bind", self.staged.get(host, host), inside]
        run = self.staged.get(str(self.run_dir), str(self.run_dir))
        if endpoint_socket is not None:
            args += ["--ro-bind", f"{run}/{endpoint_socket.name}", f"{RUN_DIR}/endpoint.sock"]
        if egress_socket is not None:
            args += ["--ro-bind", f"{run}/{egress_socket.name}", f"{RUN_DIR}/egress.sock"]
        for inside in sorted(set(env.values()) & set(self.channels)):  # never a sibling rollout's socket
            args += ["--ro-bind", f"{run}/{self.channels[inside].name}", inside]
        args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", cwd, "--clearenv"]
        return option_file(args, env)

    def launcher_spec(
        self, argv: Sequence[str], network: bool, endpoint_socket: Path | None = None, egress_socket: Path | None = None
    ) -> bytes:
        """What the launcher runs (`argv`), with its rlimits, watch, endpoint relay and egress relay: JSON at `LAUNCHER_SPEC`."""
        spec: dict[str, object] = {"argv": list(argv), "rlimits": self._rlimits()}
        if self.cgroups is None:
            spec["watch"] = {"memory_bytes": self.memory_bytes, "max_processes": DEFAULT_MAX_PROCESSES}
        if endpoint_socket is not None and self.endpoint is not None and not network:
            spec["forward"] = [[self.endpoint.port, f"{RUN_DIR}/endpoint.sock", MAX_CONNECTIONS]]
        if egress_socket is not None:
            forward = spec.setdefault("forward", [])
            assert isinstance(forward, list)
            forward.append([proxy_port(self.endpoint), f"{RUN_DIR}/egress.sock", MAX_CONNECTIONS])
        return json.dumps(spec).encode()

    def bwrap_argv(self, options_fd: int) -> list[str]:
        """The command line of one command: `bwrap`, its options file (see `bwrap_options`) and the launcher."""
        args = [shutil.which("bwrap") or "bwrap", "--args", str(options_fd)]
        args += ["--", sys.executable, "-I", "-S", "/run/v1-launcher.py", LAUNCHER_SPEC]
        if self.cgroups is not None or self.user is not None:
            enter = {
                "cgroups": [str(path) for path in self.cgroups.join_paths] if self.cgroups is not None else [],
                "user": list(self.user) if self.user is not None else None,
                "stage": [[host, staged] for host, staged in self.staged.items()],
            }
            args = [sys.executable, "-I", "-S", str(ENTER), json.dumps(enter), "--", *args]
        return args

    def _tmpfs_bytes(self) -> int:
        """A private tmpfs holds at most the disk size, and no more than the memory limit (its pages are memory)."""
        return min(self.disk_bytes, self.memory_bytes)

    def _rlimits(self) -> dict[str, int]:
        limits = {"FSIZE": self.disk_bytes, "CORE": 0}
        if self.cgroups is None:
            # Forks faster than the launcher's watch stop here. RLIMIT_NPROC counts all of the
            # sandbox user's tasks on the host, so it sits above them by the sandbox's limit.
            uid = self.user[0] if self.user is not None else os.getuid()
            limits["NPROC"] = _user_processes(uid) + DEFAULT_MAX_PROCESSES
        return limits

    def base_env(self) -> dict[str, str]:
        local = f"{self.workdir}/.v1"
        path = [f"{local}/python/bin", f"{local}/node/node_modules/.bin", str(Path(sys.executable).parent)]
        path += ["/usr/local/bin", "/usr/bin", "/bin"]
        return {
            "PATH": ":".join(path),
            "HOME": self.workdir,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONPATH": f"{local}/python",
            "NODE_PATH": f"{local}/node/node_modules",
            **host_trust_env(),
        }

    async def exec(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
        on_output: OutputCallback | None = None,
        network: bool | None = None,
    ) -> ExecResult:
        if not command:
            raise SandboxError("exec: empty command")
        mode = self.config.network if network is None else ("all" if network else "none")
        egress = self.egress if isinstance(mode, NetworkPolicy) else None
        through_proxy = proxy_env(proxy_port(self.endpoint), self.endpoint) if egress is not None else {}
        full_env = self.base_env() | through_proxy | dict(self.config.env) | dict(env or {})
        rollout = self.rollout_of(full_env)
        async with contextlib.AsyncExitStack() as sockets:
            endpoint_socket = egress_socket = None
            if self.relays is not None and rollout is not None:
                endpoint_socket = await self.relays.acquire(rollout)
                sockets.push_async_callback(self.relays.release, rollout)
            if egress is not None:
                egress_socket = await egress.acquire(rollout)
                sockets.push_async_callback(egress.release, rollout)
            await asyncio.to_thread(self._grant_run_dir)
            return await self._run(
                command,
                full_env,
                self.working_directory(cwd),
                mode == "all",
                (endpoint_socket, egress_socket),
                timeout,
                stdin,
                on_output,
            )

    def working_directory(self, cwd: str | None) -> str:
        """Where a command runs: `cwd` (absolute, or relative to `workdir`), `workdir` when None.

        Raises:
            SandboxError: the path holds a control character or is not normalised (a `..`, `//`, trailing `/`).
        """
        if cwd is None:
            return self.workdir
        path = cwd if cwd.startswith("/") else f"{self.workdir}/{cwd}"
        problem = sandbox_path_problem(path)
        if problem is not None:
            raise SandboxError(f"exec: working directory {cwd[:120]!r} {problem}")
        return path

    def rollout_of(self, env: Mapping[str, str]) -> str | None:
        """The rollout whose endpoint URL the environment holds (its commands get that rollout's socket only).

        Raises:
            SandboxError: the environment names more than one rollout.
        """
        if self.endpoint is None:
            return None
        prefix = re.escape(f"http://{self.endpoint.host}:{self.endpoint.port}/r/")
        found = {match.group(1) for value in env.values() if (match := re.match(prefix + r"([^/?#]+)(?:[/?#]|$)", value))}
        if len(found) > 1:
            raise SandboxError("a command's environment names the endpoint URLs of more than one rollout")
        return found.pop() if found else None

    async def _run(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        network: bool,
        sockets: tuple[Path | None, Path | None],
        timeout: float | None,
        stdin: bytes | None,
        on_output: OutputCallback | None,
    ) -> ExecResult:
        """`command` in a fresh `bwrap`; `sockets`: its rollout's (endpoint, egress proxy) sockets, each when it has one."""
        before = self.cgroups.counters() if self.cgroups is not None else {}
        disk = DiskWatch(self.workspace, self.disk_bytes)
        with (
            command_files(self.launcher_spec(command, network, *sockets)) as fds,
            _memory_file(self.bwrap_options(env, cwd, network, fds, *sockets)) as options_fd,
        ):
            argv = self.bwrap_argv(options_fd)
            result = await run_process(
                argv,
                env={"PATH": "/usr/bin:/bin"},  # all that bwrap (the sandbox's pid 1) shows in /proc/1/environ
                cwd="/",
                timeout=timeout,
                stdin=stdin,
                on_output=on_output,
                running=self.processes,
                pass_fds=(*fds.values(), options_fd),
                watch=disk.watch,
            )
        result.limit = "disk" if disk.exceeded else await self._limit_hit(before, result.exit_code)
        return result

    async def _limit_hit(self, before: dict[str, int], code: int | None) -> str | None:
        if self.cgroups is not None:
            after = self.cgroups.counters()
            for name in ("memory", "pids"):
                if after.get(name, 0) > before.get(name, 0):
                    return name
        elif code is not None and code in WATCH_EXITS:
            return WATCH_EXITS[code]
        if code == SIGXFSZ_EXIT:
            return "disk"
        if await asyncio.to_thread(_usage_bytes, self.workspace) > self.disk_bytes:
            return "disk"
        return None

    async def close(self) -> None:
        for process in list(self.processes):
            kill_children(process.pid)
        for _ in range(50):  # their `run_process` waits for them while its loop runs
            if not self.processes:
                break
            await asyncio.sleep(0.02)
        for process in list(self.processes):  # its loop is gone (interpreter exit): reap here, leave no zombie
            kill_group(process.pid)
            await asyncio.to_thread(reap_now, process.pid)
        for sockets in (self.relays, self.egress):
            if sockets is not None:
                with contextlib.suppress(Exception):  # at interpreter exit its loop may be gone
                    await sockets.close()


class LocalBackend:
    """Creates `LocalSandbox`es; see the module docs."""

    name = "local"

    def __init__(self) -> None:
        self.live: dict[str, LocalSandbox] = {}

    def available(self) -> str | None:
        if shutil.which("bwrap") is None:
            return f"the local sandbox backend needs bubblewrap (`bwrap`), which is not installed; {INSTALL_HINT}"
        return seccomp_problem()

    async def create(self, config: SandboxConfig, *, endpoint: EndpointTarget | None, labels: Sequence[str]) -> LocalSandbox:
        problem = self.available()
        if problem is not None:
            raise SandboxError(problem)
        if config.image is not None:
            raise SandboxError(
                f"the local sandbox backend runs the host's system read-only and has no images (image={config.image!r}); "
                "use a container backend such as backend='prime'"
            )
        if config.start_command is not None:
            raise SandboxError(
                "the local sandbox backend runs each command in fresh namespaces and keeps no start_command running; "
                "leave start_command unset (or use a container backend such as backend='prime')"
            )
        if config.gpu_count:
            raise SandboxError("the local sandbox backend has no GPUs to give (gpu_count > 0); use backend='prime'")
        missing = [host for host in config.mounts.values() if not await asyncio.to_thread(os.path.isdir, host)]
        if missing:
            raise SandboxError(f"mounts: host directory {missing[0]!r} does not exist")
        sandbox_id = f"v1-{uuid.uuid4().hex[:16]}"
        root = sandbox_root() / "local" / sandbox_id
        sandbox = LocalSandbox(sandbox_id, root, config, endpoint)
        self.live[sandbox_id] = sandbox
        try:
            root.mkdir(parents=True)
            await sandbox.start()
        except BaseException:
            await self.delete(sandbox_id)
            raise
        return sandbox

    async def delete(self, sandbox_id: str) -> None:
        sandbox = self.live.pop(sandbox_id, None)
        if sandbox is not None:
            await sandbox.close()
        root = sandbox_root() / "local" / sandbox_id
        await asyncio.to_thread(self._remove, sandbox_id, root)

    def _remove(self, sandbox_id: str, root: Path) -> None:
        for path in sandbox_cgroup_dirs(sandbox_id):
            remove_cgroup(path)
        unmount(root / "workspace")
        unmount(run_dir(sandbox_id))
        for path in (root, run_dir(sandbox_id), stage_dir(sandbox_id)):
            if path.exists():
                shutil.rmtree(path)


__all__ = ["INSTALL_HINT", "TRUST_VARIABLES", "LocalBackend", "LocalSandbox", "host_trust_env", "sandbox_root"]
