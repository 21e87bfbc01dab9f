"""The GPU weight sync: the trainer broadcasts its weights to vLLM's workers over NCCL (``weight_sync = "vllm_nccl"``).

Built on vLLM 0.32.0's trainer API: `WeightTransferTrainerFactory.trainer_init` with an
`NCCLTrainerInitInfo` joins the NCCL group as rank 0 while vLLM's workers join through
``POST /init_weight_transfer_engine`` (vLLM's `HTTPVLLMWeightSyncClient` drives that and the
per-update routes), and `send_weights()` broadcasts every tensor, packed into buckets. The
tensors are the gathered state dict the trainer pushes (FSDP2 shards already made whole with
``full_tensor()`` by the ranks' gather), cast to the wire dtype (bf16 by default) on the GPU.
After each update the prefix cache is reset, preempting running requests.

vLLM must be started with ``VLLM_SERVER_DEV_MODE=1`` and
``--weight-transfer-config '{"backend": "nccl"}'`` (``engine = "vllm"`` does both), and vllm
must be importable in the trainer's environment (the ``[vllm]`` extra). NOT run: written
against the installed vLLM 0.32.0 source, on a machine without a GPU.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from typing import Any, Literal

import httpx
import torch

from v1.errors import ConfigError, ModelError

WIRE_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def state_dict_source(dtype: torch.dtype, device: str) -> Any:
    """A vLLM `WeightSource` over the state dict set on it (`source.weights`) before each send, cast to `dtype` on `device`."""
    from vllm.distributed.weight_transfer import ParamMeta, WeightSource

    class StateDictSource(WeightSource):
        weights: dict[str, torch.Tensor] = {}  # noqa: RUF012 (set per update)

        def metadata(self) -> list[Any]:
            return [ParamMeta(name, dtype, tuple(tensor.shape)) for name, tensor in self.weights.items()]

        def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
            for name, tensor in self.weights.items():
                yield name, tensor.detach().to(device=device, dtype=dtype, non_blocking=True).contiguous()

    return StateDictSource()


class VLLMNCCLWeightSync:
    """Pushes the trainer's weights to a vLLM server over NCCL.

    Args:
        base_url: the server's OpenAI base URL (``.../v1``); the RLHF routes are at its root.
        master_address, master_port: where vLLM's workers reach the trainer's NCCL rendezvous.
        dtype: the wire dtype (vLLM casts into its own parameters' dtype).
        packed: bucket tensors into packed buffers (vLLM's default) instead of one broadcast each.
    """

    def __init__(
        self,
        base_url: str,
        master_address: str = "127.0.0.1",
        master_port: int = 29600,
        dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16",
        packed: bool = True,
    ) -> None:
        self.root = base_url.rstrip("/").removesuffix("/v1")
        self.master_address, self.master_port = master_address, master_port
        self.dtype, self.packed = WIRE_DTYPES[dtype], packed
        self._engine: Any = None
        self._source: Any = None

    def _connect(self) -> None:
        try:
            from vllm.distributed.weight_transfer import HTTPVLLMWeightSyncClient, WeightTransferTrainerFactory
            from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo
        except ImportError:
            raise ConfigError("weight_sync 'vllm_nccl' needs vllm in the trainer's environment: pip install 'v1[vllm]'") from None
        if not torch.cuda.is_available():
            raise ConfigError("weight_sync 'vllm_nccl' needs a CUDA GPU in the trainer; on CPU use weight_sync = 'vllm'")
        with urllib.request.urlopen(f"{self.root}/get_world_size", timeout=30) as response:
            inference_world_size = int(json.loads(response.read())["world_size"])
        self._source = state_dict_source(self.dtype, "cuda")
        init_info = NCCLTrainerInitInfo(
            master_address=self.master_address,
            master_port=self.master_port,
            world_size=inference_world_size + 1,
            packed=self.packed,
            rank=0,  # rank 0 pushes the weights its ranks gathered; no other trainer rank joins
        )
        client = HTTPVLLMWeightSyncClient(self.root)
        self._engine = WeightTransferTrainerFactory.trainer_init(init_info, client=client, source=self._source)

    def _send(self, state_dict: dict[str, torch.Tensor]) -> None:
        if self._engine is None:
            self._connect()
        self._source.weights = state_dict
        self._engine.send_weights()

    async def push(self, state_dict: dict[str, torch.Tensor], step: int) -> None:
        await asyncio.to_thread(self._send, state_dict)
        async with httpx.AsyncClient(timeout=600) as client:
            response = await client.post(self.root + "/reset_prefix_cache", params={"reset_running_requests": "true"})
        if response.status_code != 200 or not response.json().get("success"):
            raise ModelError(f"prefix cache reset after step {step} failed: {response.status_code} {response.text[:300]}")


__all__ = ["VLLMNCCLWeightSync", "state_dict_source"]
