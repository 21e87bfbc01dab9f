"""Per-rank peak memory of training at 1, 2 and 4 CPU ranks (FSDP2 over gloo), for a model whose weights dominate.

    python benchmarks/train_memory_ranks.py                 # 1, 2 and 4 ranks
    python benchmarks/train_memory_ranks.py --ranks 1 2     # a subset

One rank is one process without FSDP (as ``v1 train`` runs); N > 1 is ``torchrun --nproc-per-node N``,
each rank joining the group as a run does (`RankGroup.start`) and loading the model as a run does
(`load_sharded_policy`: every rank builds it on the meta device and allocates only its FSDP2
shards; rank 0 alone builds the whole model and sends each rank its shards, then frees it). The
model is a Qwen2-layout model from a config (no download; default ~106M parameters, 404 MiB in
fp32); each rank takes `--steps` GRPO steps with AdamW on its share of a small batch (weights,
gradients and Adam's two moments dominate, not activations), then pushes the weights twice:
streamed one tensor at a time (`stream_weights`, what the built-in engine gets) and as one
gathered state dict (`weights_for_sync`, what the file syncs write). Rank 0's receiver here only
checks each tensor's shape: the engine's own copy of the weights is not in these figures (the
built-in engine's is the model's size on rank 0; vLLM's is in its own process).

Each phase's peak RSS (``VmHWM``, reset before the phase through ``/proc/self/clear_refs``) and the
tensor bytes each rank holds (its parameter and Adam-state shards, counted, not sampled) are printed
per rank, with the RSS of a rank once torch, transformers and v1 are imported (before any model).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def phase_peak(run: Callable[[], Any]) -> float:
    """The peak RSS (MiB) while `run()` runs: the high-water mark is reset first (Linux ``clear_refs``)."""
    Path("/proc/self/clear_refs").write_text("5")
    run()
    return rss_mb("VmHWM")


def held_mb(tensors: Any) -> float:
    """MiB of `tensors` this rank holds (a DTensor's local shard)."""
    total = 0
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        total += local.numel() * local.element_size()
    return total / 2**20


@contextlib.contextmanager
def shape_checker(shapes: dict[str, tuple[int, ...]], largest: list[float]) -> Iterator[Callable[[str, Any], None]]:
    """A stand-in for the engine's streamed update: checks each tensor's shape and notes the largest (MiB)."""

    def copy(name: str, tensor: Any) -> None:
        assert tuple(tensor.shape) == shapes[name], name
        largest[0] = max(largest[0], tensor.numel() * tensor.element_size() / 2**20)

    yield copy


def worker(args: argparse.Namespace) -> None:
    """One rank: build, shard when distributed, train, push, report (rank 0 prints every rank's figures as JSON)."""
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as dist

    from v1.train import DistributedConfig, LossConfig, ModelConfig, OptimConfig, PolicyTrainer, Sample
    from v1.train._model import load_policy, load_sharded_policy
    from v1.train._ranks import RankGroup, share_samples, stream_weights, weights_for_sync

    imported = rss_mb("VmRSS")
    group = RankGroup.start(DistributedConfig(backend="gloo"))
    rank, world = group.rank, group.world_size
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model_config = ModelConfig(path=args.folder, device="cpu")  # loaded as `v1 train` loads [model] path
    model: Any = None

    def load() -> None:
        nonlocal model
        if group.distributed:
            model = load_sharded_policy(model_config, None, bf16=False, keep_whole=False)[0]
        else:
            model = load_policy(model_config)[0]

    figures: dict[str, Any] = {"rank": rank, "imported_mb": imported, "load_peak_mb": phase_peak(load)}
    figures["loaded_mb"] = rss_mb("VmRSS")
    shapes = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}  # a DTensor has its whole shape
    trainer = PolicyTrainer(model, LossConfig(kind="grpo"), OptimConfig(lr=1e-5), max_steps=args.steps, micro_batch_size=4)
    rng = random.Random(0)
    samples = [
        Sample([rng.randrange(args.vocab) for _ in range(32)], [0] * 16 + [1] * 16, [0.0] * 16 + [-2.0] * 16,
               [0.0] * 16 + [rng.choice((-1.0, 1.0))] * 16)
        for _ in range(8)
    ]  # fmt: skip
    share = share_samples(samples, world)[rank]
    figures["step_peak_mb"] = max(phase_peak(lambda: trainer.train_step(share)) for _ in range(args.steps))
    figures["params_mb"] = held_mb(model.parameters())
    figures["adam_mb"] = held_mb(v for state in trainer.optimizer.state.values() for v in state.values() if v.dim() > 0)
    largest = [0.0]
    receiver = (lambda: shape_checker(shapes, largest)) if rank == 0 else None
    figures["stream_peak_mb"] = phase_peak(lambda: stream_weights(trainer, receiver))
    figures["largest_tensor_mb"] = largest[0]
    figures["dict_peak_mb"] = phase_peak(lambda: weights_for_sync(trainer))
    figures["parameters"] = sum(p.numel() for p in model.parameters())  # a DTensor counts its whole shape
    every = [figures]
    if group.distributed:
        every = [{} for _ in range(world)]
        dist.all_gather_object(every, figures)
    group.close()
    if rank == 0:
        print("RESULT " + json.dumps({"world": world, "ranks": every}), flush=True)


def write_model(args: argparse.Namespace, folder: Path) -> None:
    """The benchmark's model and tokenizer as a ``save_pretrained`` folder (written once, before any rank starts)."""
    sys.path.insert(0, str(ROOT))
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from v1.inference import build_tiny_tokenizer

    config = Qwen2Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 3, num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64, num_key_value_heads=args.hidden // 128, tie_word_embeddings=False,
    )  # fmt: skip
    Qwen2ForCausalLM(config).save_pretrained(folder)
    build_tiny_tokenizer().save_pretrained(folder)


def measure(ranks: int, args: argparse.Namespace) -> dict[str, Any]:
    script = [
        str(Path(__file__).resolve()),
        "--worker",
        f"--folder={args.folder}",
        f"--vocab={args.vocab}",
        f"--steps={args.steps}",
    ]
    if ranks == 1:
        command = [sys.executable, *script]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), *script]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{ranks} ranks failed ({done.returncode}): {done.stderr[-2000:]}")
    return dict(json.loads(lines[-1].removeprefix("RESULT ")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    with tempfile.TemporaryDirectory(prefix="v1-memory-") as folder:
        args.folder = folder
        write_model(args, Path(folder))
        report(args)


COLUMNS = (
    ("ranks", "ranks", 5),
    ("rank", "rank", 4),
    ("params_mb", "params", 6),
    ("adam_mb", "Adam", 5),
    ("load_peak_mb", "load peak", 9),
    ("loaded_mb", "loaded", 6),
    ("step_peak_mb", "step peak", 9),
    ("stream_peak_mb", "push streamed", 13),
    ("dict_peak_mb", "push state dict", 15),
)


def report(args: argparse.Namespace) -> None:
    """Measure each rank count and print a row per rank (MiB)."""
    print(" ".join(f"{title:>{width}}" for _, title, width in COLUMNS))
    imported: list[float] = []
    for ranks in args.ranks:
        result = measure(ranks, args)
        for one in result["ranks"]:
            one["ranks"] = ranks
            imported.append(one["imported_mb"])
            print(" ".join(f"{one[key]:>{width}.0f}" for key, _, width in COLUMNS), flush=True)
    parameters = result["ranks"][0]["parameters"]
    largest = result["ranks"][0]["largest_tensor_mb"]
    print(
        f"model: {parameters / 1e6:.0f}M parameters, {4 * parameters / 2**20:.0f} MiB in fp32, largest tensor {largest:.0f} MiB; "
        f"RSS once torch, transformers and v1 are imported: {min(imported):.0f}-{max(imported):.0f} MiB"
    )


if __name__ == "__main__":
    main()
