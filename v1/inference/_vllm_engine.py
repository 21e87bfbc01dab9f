"""The trainer's vLLM engine: ``[inference] engine = "vllm"`` without a `base_url`.

The policy is saved (``save_pretrained``) to ``output_dir/vllm_model``, a `VLLMServer` is
started over it in dev mode (its own venv on CPU: `vllm_python`), and after every optimizer
step `VLLMWeightSync` rewrites that folder's safetensors and asks vLLM to reload them
through ``/collective_rpc``, then resets its prefix cache (``weight_sync = "vllm_nccl"``:
`VLLMNCCLWeightSync` broadcasts them over NCCL instead, GPU only). A watchdog turns vLLM dying
mid-run into a `ModelError` that stops the run; the checkpoints already written stay, and
``--resume`` continues from the last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import sys
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from transformers import PreTrainedModel

from v1._util.lifeline import cleanup_on_exit
from v1.errors import ConfigError, ModelError
from v1.inference._vllm_env import PYTHON_ENV, vllm_python
from v1.inference._vllm_nccl import VLLMNCCLWeightSync
from v1.inference._vllm_server import VLLMServer
from v1.inference._weight_sync import HTTPWeightSync, VLLMWeightSync, WeightSync


class VLLMSettings(Protocol):
    """What the vLLM wiring reads of a run's ``[inference]`` section (`v1.train._config.InferenceConfig` is one)."""

    @property
    def model_name(self) -> str: ...
    @property
    def weight_sync(self) -> str: ...
    @property
    def vllm_args(self) -> Sequence[str]: ...
    @property
    def vllm_startup_timeout(self) -> float: ...
    @property
    def gpus(self) -> Sequence[int] | None: ...
    @property
    def nccl_master_address(self) -> str: ...
    @property
    def nccl_master_port(self) -> int: ...
    @property
    def nccl_dtype(self) -> Literal["bfloat16", "float16", "float32"]: ...


class VLLMRun(Protocol):
    """A training run as the vLLM wiring sees it: its ``[inference]`` section (`v1.train.TrainConfig` is one;
    this package does not import the trainer's)."""

    @property
    def inference(self) -> VLLMSettings: ...


VLLM_CPU_THREADS = 1
"""OpenMP threads of vLLM's CPU engine beside the trainer (`v1.train._run.trainer_cpu_threads` counts them)."""


def vllm_version(root: str) -> str:
    """The version a running vLLM reports (``GET /version``)."""
    with urllib.request.urlopen(f"{root}/version", timeout=10) as response:
        return str(json.loads(response.read())["version"])


TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""vLLM's ``--dtype`` names (`serving_dtype`) as torch dtypes."""


def serving_dtype(model: torch.nn.Module, mixed: torch.dtype | None = None) -> str:
    """vLLM's ``--dtype``: the trainer's forward dtype (`mixed`: bf16 on GPUs, which vLLM's attention
    kernels need), else the policy's parameters' (fp32 on CPU), so its logprobs are the trainer's own."""
    dtype = mixed or next(model.parameters()).dtype
    return {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(dtype, "auto")


def vllm_cpu_env(threads: int) -> dict[str, str]:
    """vLLM's CPU engine limited to `threads` OpenMP threads, so it and the trainer do not oversubscribe the cores."""
    return {"OMP_NUM_THREADS": str(threads), "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


@contextlib.asynccontextmanager
async def vllm_endpoint(
    config: VLLMRun,
    model: PreTrainedModel,
    tokenizer: Any,
    output_dir: Path,
    info: dict[str, Any],
    write_model: Callable[[Path], Awaitable[Any]] | None = None,
    mixed: torch.dtype | None = None,
    trainer_gpus: int = 1,
) -> AsyncIterator[tuple[str, WeightSync]]:
    """A vLLM server over the policy's current weights, and the sync that keeps it current.

    vLLM is started from this (the main) thread, so it gets SIGTERM when this process dies however it
    dies, and it is stopped by `v1._util.lifeline.exit_now` too.

    Args:
        config: the run (`inference.model_name`, `inference.vllm_args`, `inference.vllm_startup_timeout`).
        model: the policy as it is now (saved whole with `tokenizer` unless `write_model` is given).
        tokenizer: saved with it.
        output_dir: the model folder and ``vllm.log`` go here.
        info: filled with the engine, its version and its log path (for ``summary.json``).
        write_model: writes the policy's ``save_pretrained`` folder (under FSDP2: a command every rank runs).
        mixed: the trainer's forward dtype (bf16 on GPUs), which vLLM serves in.
        trainer_gpus: GPUs the trainer ranks on this host use (GPUs 0..n-1); vLLM gets others (`vllm_gpus`).

    Raises:
        ModelError: vLLM failed to start, or died while the run used it.
    """
    inference = config.inference
    folder = output_dir / "vllm_model"
    if write_model is not None:
        await write_model(folder)
    else:
        await asyncio.to_thread(model.save_pretrained, folder)
        await asyncio.to_thread(tokenizer.save_pretrained, folder)
    python = await asyncio.to_thread(vllm_python)
    nccl = inference.weight_sync == "vllm_nccl"
    dtype = serving_dtype(model, mixed)
    extra = ["--dtype", dtype, *(["--weight-transfer-config", '{"backend": "nccl"}'] if nccl else [])]
    server = VLLMServer(
        python, folder, served_name=inference.model_name, dev_mode=True, log_path=output_dir / "vllm.log",
        extra_args=[*extra, *inference.vllm_args], startup_timeout=inference.vllm_startup_timeout,
    )  # fmt: skip
    if server.on_cpu:
        server.env.update(vllm_cpu_env(VLLM_CPU_THREADS))
    else:
        gpu_env, gpu_args = vllm_gpu_env(config, trainer_gpus)
        server.env.update(gpu_env)
        server.extra_args = [*gpu_args, *server.extra_args]
    with cleanup_on_exit(server.stop):
        server.start()
        async with _serving(server, config, folder, info, TORCH_DTYPES.get(dtype)) as endpoint:
            yield endpoint


@contextlib.asynccontextmanager
async def _serving(
    server: VLLMServer, config: VLLMRun, folder: Path, info: dict[str, Any], dtype: torch.dtype | None
) -> AsyncIterator[tuple[str, WeightSync]]:
    """The started `server` once it answers, watched; stopped on the way out (its file sync writes `dtype`)."""
    nccl = config.inference.weight_sync == "vllm_nccl"
    died = asyncio.Event()
    try:
        await asyncio.to_thread(server.wait_ready)
        info.update(engine="vllm", version=await asyncio.to_thread(vllm_version, server.root), log=str(server.log_path))
        watchdog = asyncio.create_task(watch(server, asyncio.current_task(), died))
        try:
            yield server.url, (nccl_sync(config, server.url) if nccl else VLLMWeightSync(server.url, folder, dtype))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not died.is_set() or task is None:
                raise
            task.uncancel()
            assert server.process is not None
            code = server.process.returncode
            message = (
                f"vLLM (pid {server.process.pid}) exited {code} mid-run (log: {server.log_path}); "
                "the checkpoints are intact: rerun with --resume"
            )
            raise ModelError(message) from None
        finally:
            watchdog.cancel()
    finally:
        await asyncio.to_thread(server.stop)


def vllm_gpus(config: VLLMRun, trainer_gpus: int, visible: str | None, gpu_count: int) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` entries vLLM runs on: `inference.gpus`, else the first GPU after the trainer's.

    Args:
        config: the run.
        trainer_gpus: GPUs the trainer ranks on this host use (rank i: GPU i).
        visible: this process's ``CUDA_VISIBLE_DEVICES`` (None: every GPU).
        gpu_count: GPUs this process sees.

    Raises:
        ConfigError: no GPU left for vLLM, an index out of range, or a GPU a trainer rank uses without
            ``--gpu-memory-utilization`` in `inference.vllm_args` (vLLM's share of it).
    """
    ids = [item.strip() for item in visible.split(",") if item.strip()] if visible else [str(i) for i in range(gpu_count)]
    wanted = config.inference.gpus if config.inference.gpus is not None else [trainer_gpus]
    if not wanted or any(not 0 <= index < len(ids) for index in wanted):
        raise ConfigError(
            f"inference.gpus = {wanted}: vLLM needs a GPU of its own and this machine shows {len(ids)} "
            f"({trainer_gpus} for the trainer ranks): use fewer ranks (--nproc {max(1, len(ids) - 1)}) or set inference.gpus"
        )
    shared = sorted(set(wanted) & set(range(trainer_gpus)))
    if shared and not any(arg.startswith("--gpu-memory-utilization") for arg in config.inference.vllm_args):
        raise ConfigError(
            f"inference.gpus = {wanted}: GPU {shared[0]} trains (rank {shared[0]}); vLLM's default memory share (0.9) "
            "is of the whole GPU: give vLLM a GPU of its own or pass --gpu-memory-utilization in inference.vllm_args"
        )
    return [ids[index] for index in wanted]


def check_vllm_start(config: VLLMRun, trainer_ranks: int, trainer_on_gpu: bool, gpu_count: int | None = None) -> None:
    """What would refuse the vLLM a run starts, checked before any rank loads weights.

    A trainer on a GPU needs vLLM's CUDA build in its own Python (the NCCL sync imports it; the CPU build in its
    place would serve a GPU run from the CPU), unless ``$V1_VLLM_PYTHON`` names the Python to run vLLM with;
    on a GPU machine vLLM needs GPUs of its own beside the trainer's (`vllm_gpus`).

    Args:
        config: the run.
        trainer_ranks: the trainer ranks on this host (rank i trains on GPU i).
        trainer_on_gpu: whether the trainer trains on a CUDA GPU.
        gpu_count: the GPUs this process sees (None: torch's count).

    Raises:
        ConfigError: vllm does not import here on a GPU trainer, or vLLM has no GPU left.
    """
    if not trainer_on_gpu:
        return
    if not os.environ.get(PYTHON_ENV) and importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            f"this run trains on a CUDA GPU and vllm does not import in this Python ({sys.executable}): install vLLM's "
            f"CUDA build here (the README's GPU command); v1 builds vLLM's CPU build only for a run on the CPU "
            f"(model.device = 'cpu'), or set ${PYTHON_ENV} to the Python that runs vLLM"
        )
    count = torch.cuda.device_count() if gpu_count is None else gpu_count
    if count:
        vllm_gpus(config, trainer_ranks, os.environ.get("CUDA_VISIBLE_DEVICES"), count)


def vllm_gpu_env(config: VLLMRun, trainer_gpus: int) -> tuple[dict[str, str], list[str]]:
    """vLLM's environment and extra arguments on a GPU machine (its ``CUDA_VISIBLE_DEVICES``, tensor parallelism
    over several); nothing on CPU."""
    if not torch.cuda.is_available():
        return {}, []
    gpus = vllm_gpus(config, trainer_gpus, os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count())
    parallel = ["--tensor-parallel-size", str(len(gpus))] if len(gpus) > 1 else []
    return {"CUDA_VISIBLE_DEVICES": ",".join(gpus)}, parallel


def nccl_sync(config: VLLMRun, url: str) -> VLLMNCCLWeightSync:
    inference = config.inference
    return VLLMNCCLWeightSync(url, inference.nccl_master_address, inference.nccl_master_port, inference.nccl_dtype)


def server_sync(config: VLLMRun, base_url: str, folder: Path) -> WeightSync:
    """The weight sync to a running server at `base_url` that `inference.weight_sync` names: a folder of
    weights (`folder`) loaded by ``v1 serve`` (``http``) or reloaded by vLLM (``vllm``), or vLLM's NCCL broadcast."""
    weight_sync = config.inference.weight_sync
    if weight_sync == "vllm_nccl":
        return nccl_sync(config, base_url)
    return (VLLMWeightSync if weight_sync == "vllm" else HTTPWeightSync)(base_url, folder)


async def watch(server: VLLMServer, main: asyncio.Task[Any] | None, died: asyncio.Event) -> None:
    """Cancel `main` (the run) once the server's process has exited."""
    assert server.process is not None
    await asyncio.to_thread(server.process.wait)
    died.set()
    if main is not None:
        main.cancel()


__all__ = [
    "VLLM_CPU_THREADS",
    "VLLMRun",
    "VLLMSettings",
    "check_vllm_start",
    "nccl_sync",
    "server_sync",
    "serving_dtype",
    "vllm_cpu_env",
    "vllm_endpoint",
    "vllm_gpu_env",
    "vllm_gpus",
    "vllm_version",
]
