"""Trainer steps on a GPU: bf16 autocast, flash-attn when installed, optional FSDP2 under torchrun.

    python benchmarks/train_gpu.py                                # one process, bf16 on CUDA
    torchrun --nproc_per_node=1 benchmarks/train_gpu.py --fsdp    # FSDP2 (fully_shard per layer), bf16 mixed precision

Builds a Llama-shaped model from a config (no download; `--hidden`, `--layers`), runs
`PolicyTrainer.train_step` (GRPO loss) on synthetic samples, and prints tokens/s per
step and peak GPU memory. Checks that the loss is finite, that weights changed, and
(with --fsdp) that `full_state_dict` gathers every weight unsharded. Nothing here
asserts on timing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from v1.train import LossConfig, ModelConfig, OptimConfig, Sample
from v1.train._logprobs import is_distributed
from v1.train._model import attention_implementation, autocast_dtype
from v1.train._trainer import PolicyTrainer, shard_with_fsdp2


def samples(count: int, prompt: int, completion: int, vocab: int, seed: int) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        ids = [rng.randrange(vocab) for _ in range(prompt + completion)]
        mask = [0] * prompt + [1] * completion
        out.append(Sample(ids, mask, [-2.0 * m for m in mask], [rng.choice((-1.0, 1.0)) * m for m in mask]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fsdp", action="store_true", help="shard with FSDP2 (run under torchrun)")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--micro", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--completion", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument(
        "--attention", default="auto", help="attn_implementation (auto: flash_attention_2 when installed on a GPU)"
    )
    args = parser.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    if args.fsdp:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    rank = dist.get_rank() if dist.is_initialized() else 0
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    model_config = ModelConfig(gradient_checkpointing=args.gradient_checkpointing, attn_implementation=args.attention)
    attention = attention_implementation(model_config, device)
    dtype = autocast_dtype(model_config, device)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 3,
        num_hidden_layers=args.layers,
        num_attention_heads=max(1, args.hidden // 128),
        num_key_value_heads=max(1, args.hidden // 256),
        max_position_embeddings=args.prompt + args.completion,
    )
    config._attn_implementation = attention
    model = LlamaForCausalLM(config).to(device)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    before = {name: p.detach().float().clone().cpu() for name, p in model.state_dict().items()} if not args.fsdp else None
    if args.fsdp:
        model = shard_with_fsdp2(model, bf16=dtype is torch.bfloat16)
    trainer = PolicyTrainer(
        model, LossConfig(kind="dapo"), OptimConfig(lr=1e-5), max_steps=args.steps + 1, micro_batch_size=args.micro,
        autocast_dtype=None if args.fsdp else dtype,
    )  # fmt: skip
    world = dist.get_world_size() if dist.is_initialized() else 1
    batch = samples(args.samples, args.prompt, args.completion, args.vocab, seed=rank)
    params = sum(p.numel() for p in model.parameters())  # a DTensor counts its whole shape
    if rank == 0:
        print(
            f"torch {torch.__version__}, device {device} ({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}), "
            f"world {world}, fsdp2 {args.fsdp}, attention {attention}, autocast {dtype}, "
            f"~{params / 1e6:.0f}M params, flash_attn installed: {importlib.util.find_spec('flash_attn') is not None}"
        )
    stats = trainer.train_step(batch)  # warm-up (kernels, allocator)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    rates = []
    for _ in range(args.steps):
        started = time.perf_counter()
        stats = trainer.train_step(batch)
        if device.type == "cuda":
            torch.cuda.synchronize()
        rates.append(stats["trainer_tokens"] / (time.perf_counter() - started))
    assert torch.isfinite(torch.tensor(stats["loss"])), "the loss is not finite"
    full = trainer.full_state_dict()
    if rank == 0:
        if before is not None:
            changed = sum(not torch.equal(before[name], tensor.float().cpu()) for name, tensor in full.items())
            print(f"weights changed: {changed} of {len(full)} tensors")
        else:
            print(
                f"full_state_dict gathered {len(full)} tensors, e.g. {next(iter(full))} {tuple(next(iter(full.values())).shape)}"
            )
        peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0.0
        print(
            f"tokens/s (all ranks): median {statistics.median(rates) * (world if is_distributed() else 1):.0f} "
            f"over {args.steps} steps of {args.samples * (args.prompt + args.completion)} tokens per rank; "
            f"loss {stats['loss']:+.4f}, grad_norm {stats['grad_norm']:.3f}, peak GPU memory {peak:.1f} GiB"
        )
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
