"""Peak training memory per token: one GRPO step of a tiny, long-sequence, 32k-vocabulary model.

    python benchmarks/train_memory.py                                   # this checkout's trainer
    python benchmarks/train_memory.py --code /work/main --code .        # before (main) and after, side by side

Each (code, variant) runs in its own Python process with that checkout first on the path:
the model (Qwen2 layout, `--vocab` tokens, hidden 64, 2 layers) and `--samples` samples of
`--tokens` tokens (the second half completion tokens) are built, the peak-RSS mark is reset
(``/proc/self/clear_refs``), one `PolicyTrainer.train_step` runs (forward, backward, AdamW),
and the peak RSS above the level before the step is divided by the step's tokens. On a GPU
(``--device cuda``) the figure is `torch.cuda.max_memory_allocated` above the allocation before.
Variants: ``padded`` (`micro_batch_size` = all samples, one padded batch) and, where the code
has it, ``packed`` (`micro_batch_tokens` = one sample's tokens per row).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def current_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One step in this process; the peak memory it added (run as the child)."""
    import torch
    import transformers

    from v1.train import LossConfig, OptimConfig, PolicyTrainer, Sample

    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = transformers.Qwen2Config(
        vocab_size=args.vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=args.tokens,
    )  # fmt: skip
    device = torch.device(args.device)
    model = transformers.Qwen2ForCausalLM(config).to(device)
    half = args.tokens // 2
    samples = []
    for number in range(args.samples):
        ids = torch.randint(0, args.vocab, (args.tokens,), generator=torch.Generator().manual_seed(number)).tolist()
        mask = [0] * half + [1] * (args.tokens - half)
        samples.append(Sample(ids, mask, [-10.0 * m for m in mask], [(1.0 if number % 2 else -1.0) * m for m in mask]))
    options: dict[str, Any] = {"micro_batch_size": args.samples}
    if args.variant == "packed":
        if "micro_batch_tokens" not in inspect.signature(PolicyTrainer).parameters:
            return {"skipped": "this code has no micro_batch_tokens"}
        options = {"micro_batch_tokens": args.tokens}
    trainer = PolicyTrainer(model, LossConfig(), OptimConfig(lr=1e-4), max_steps=1, **options)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        before = current_rss_mb()
    stats = trainer.train_step(samples)
    if device.type == "cuda":
        peak_mb = (torch.cuda.max_memory_allocated() - before) / 2**20
    else:
        peak_mb = peak_rss_mb() - before
    tokens = args.samples * args.tokens
    return {"peak_mb": round(peak_mb, 1), "tokens": tokens, "kib_per_token": round(peak_mb * 1024 / tokens, 1),
            "loss": stats["loss"]}  # fmt: skip


def run_child(code: str, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(Path(code).resolve())}
    command = [sys.executable, __file__, "--child", "--variant", variant, "--vocab", str(args.vocab),
               "--tokens", str(args.tokens), "--samples", str(args.samples), "--device", args.device]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", action="append", help="a checkout to measure (repeatable; default: this one)")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per sample")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--variant", default="padded", choices=["padded", "packed"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.vocab, args.tokens, args.samples) < 2:
        parser.error("--vocab, --tokens and --samples must be >= 2")
    if args.child:
        print(json.dumps(measure(args)))
        return
    codes = args.code or [str(Path(__file__).resolve().parent.parent)]
    print(f"one GRPO step: {args.samples} samples x {args.tokens} tokens, vocabulary {args.vocab}, {args.device}")
    for code in codes:
        for variant in ("padded", "packed"):
            result = run_child(code, variant, args)
            print(f"{code:<24} {variant:<7} {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main()
