"""Getting the trainer's new weights to the inference server after each step.

One protocol, three ways: `InProcessWeightSync` copies tensors into the built-in server
running in this process; `HTTPWeightSync` writes a safetensors folder and calls the
built-in server's ``POST /update_weights {"path"}`` (``v1 serve``); `VLLMWeightSync`
writes the same folder and asks a vLLM server started with ``VLLM_SERVER_DEV_MODE=1``
to reload it through ``POST /collective_rpc`` (the workers' ``reload_weights``), then
resets its prefix cache, preempting running requests so none continues on KV computed
by the old weights (verified on CPU with vLLM 0.32.0: tests/inference/test_vllm.py).
The folder's file is written one tensor at a time, in the serving dtype (`SafetensorsWriter`):
under FSDP2 the ranks gather each tensor in turn and rank 0 writes it before the next
(`receiving`), so no host ever holds a whole copy of the weights. It still costs a full copy of
the weights on disk per step; on GPUs the NCCL broadcast avoids it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, cast

import httpx
import torch

from v1.errors import ModelError
from v1.inference._weights import SafetensorsWriter, write_safetensors


class WeightSync(Protocol):
    async def push(self, state_dict: dict[str, torch.Tensor], step: int) -> None:
        """Make the server serve `state_dict` (the weights after `step` optimizer steps)."""
        ...


WeightCopy = Callable[[str, torch.Tensor], None]
"""Takes one tensor of a streamed weight update: ``copy(name, tensor)``."""

WeightReceiver = Callable[[], contextlib.AbstractContextManager[WeightCopy]]
"""Opens a streamed weight update (`InProcessWeightSync.receiving`): the version changes once, when it closes."""


class Streamed(dict[str, torch.Tensor]):
    """The empty state dict a command hands `WeightSync.push` when the weights were already streamed into the engine."""


class InProcessWeightSync:
    """Copies the weights into an in-process `InferenceServer` (between two of its decoding steps).

    Under FSDP2 the ranks stream them in as they gather each tensor (`receiving`, the engine's
    `updating_weights`) and `push` gets an empty `Streamed` dict: nothing is left to copy.
    """

    def __init__(self, server: Any) -> None:
        self.server = server

    def receiving(self) -> contextlib.AbstractContextManager[WeightCopy]:
        """A streamed update of the engine's weights: ``copy(name, tensor)`` per tensor, one new version at the end."""
        return cast(contextlib.AbstractContextManager[WeightCopy], self.server.engine.updating_weights())

    async def push(self, state_dict: dict[str, torch.Tensor], step: int) -> None:
        if isinstance(state_dict, Streamed):
            return
        await asyncio.to_thread(self.server.load_weights, state_dict)


WEIGHTS_FILE = "model.safetensors"


def save_weights(state_dict: dict[str, torch.Tensor], folder: Path, dtype: torch.dtype | None = None) -> Path:
    """`state_dict` as ``folder/model.safetensors``, one tensor at a time (cast to `dtype` when given), never copied whole."""
    write_safetensors(folder / WEIGHTS_FILE, state_dict.items(), dtype)
    return folder


class HTTPWeightSync:
    """Writes the weights to `folder` and calls ``POST {server}/update_weights {"path": folder}``.

    Args:
        base_url: the server's OpenAI base URL (ending in ``/v1``); the route is at its root.
        folder: where the weights are written (overwritten each step).
        dtype: the dtype the server serves in (tensors are cast one at a time as they are written); None: as trained.
    """

    route = "/update_weights"

    def __init__(self, base_url: str, folder: Path, dtype: torch.dtype | None = None) -> None:
        self.root = base_url.rstrip("/").removesuffix("/v1")
        self.folder = folder
        self.dtype = dtype

    def request_body(self) -> dict[str, Any]:
        return {"path": str(self.folder.resolve())}

    @contextlib.contextmanager
    def receiving(self) -> Iterator[WeightCopy]:
        """A streamed write of the folder's weights: ``copy(name, tensor)`` per tensor as the ranks gather it
        (the `push` that follows sends the request only)."""
        with SafetensorsWriter(self.folder / WEIGHTS_FILE, self.dtype) as writer:
            yield writer.add

    async def push(self, state_dict: dict[str, torch.Tensor], step: int) -> None:
        if not isinstance(state_dict, Streamed):
            await asyncio.to_thread(save_weights, state_dict, self.folder, self.dtype)
        async with httpx.AsyncClient(timeout=600) as client:
            response = await client.post(self.root + self.route, json=self.request_body())
        if response.status_code != 200:
            raise ModelError(f"weight update at step {step} failed: {response.status_code} {response.text[:300]}")


class VLLMWeightSync(HTTPWeightSync):
    """vLLM: ``POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": folder}}``, then
    ``POST /reset_prefix_cache?reset_running_requests=true``."""

    route = "/collective_rpc"

    def request_body(self) -> dict[str, Any]:
        return {"method": "reload_weights", "kwargs": {"weights_path": str(self.folder.resolve())}}

    async def push(self, state_dict: dict[str, torch.Tensor], step: int) -> None:
        await super().push(state_dict, step)
        async with httpx.AsyncClient(timeout=600) as client:
            response = await client.post(self.root + "/reset_prefix_cache", params={"reset_running_requests": "true"})
        if response.status_code != 200 or not response.json().get("success"):
            raise ModelError(f"prefix cache reset after step {step} failed: {response.status_code} {response.text[:300]}")


__all__ = [
    "HTTPWeightSync",
    "InProcessWeightSync",
    "Streamed",
    "VLLMWeightSync",
    "WEIGHTS_FILE",
    "WeightCopy",
    "WeightReceiver",
    "WeightSync",
    "save_weights",
]
