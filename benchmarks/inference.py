"""Benchmark the built-in inference server and vLLM (CPU) on a tiny model: rollout tokens/s at several concurrencies.

    python benchmarks/inference.py [--engine builtin vllm] [--concurrency 1 16 64] [--rollouts-per-level 64]
                                   [--max-tokens 32] [--hidden-size 64] [--layers 2] [--heads 2]
                                   [--client-type openai_chat_completions] [--json out.json]

A tiny model built from a config (no download; 2 heads of 32, a head size vLLM's CPU build
has kernels for) is served by `InferenceServer` on its own thread and event loop, and by
vLLM (`VLLMServer`, its managed venv, fp32, `--enforce-eager`); single-turn `Harness`
rollouts run against each through the interception endpoint with the given exact-token
client type (asking for `return_token_ids` and logprobs), `--rollouts-per-level` rollouts at
each concurrency. Every rollout generates exactly `--max-tokens` tokens (`ignore_eos`), so
tokens/s compare across levels and engines. For each level it prints completion tokens/s,
rollouts/s, and for the built-in server, from its own counters, the decoding steps taken and
the mean batch size per step. Nothing asserts on timing; the exit status is non-zero only if
a rollout failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import v1 as vf
from v1.inference import VLLMServer, build_tiny_model, save_tiny_model, serve_in_thread, vllm_python


async def run_level(
    url: str, model_name: str, stats: Any, client_type: str, concurrency: int, rollouts: int, max_tokens: int
) -> dict[str, Any]:
    """`rollouts` single-turn rollouts, `concurrency` at a time; `stats` reads the built-in server's counters (None: vLLM)."""
    harness = vf.Harness(
        client=vf.ClientConfig(client_type=client_type, api_base_url=url, max_retries=0),
        model=model_name,
        max_turns=1,
        sampling_args={
            "temperature": 1.0, "max_tokens": max_tokens, "logprobs": True,
            "extra_body": {"ignore_eos": True, "return_token_ids": True},
        },
    )  # fmt: skip
    limit = asyncio.Semaphore(concurrency)

    async def one(index: int) -> vf.State:
        async with limit:
            return await harness.run({"prompt": f"Reverse the text: sample {index} " + "abc" * (index % 5)})

    before = dict(stats()) if stats else {}
    start = time.perf_counter()
    states = await asyncio.gather(*(one(i) for i in range(rollouts)))
    elapsed = time.perf_counter() - start
    errors = [s["error"] for s in states if s["error"] is not None]
    tokens = sum(len(step["tokens"]["completion_ids"]) for s in states for step in s["trajectory"] if step["tokens"])
    result = {
        "concurrency": concurrency,
        "rollouts": rollouts,
        "errors": len(errors),
        "first_error": str(errors[0]) if errors else None,
        "seconds": round(elapsed, 3),
        "completion_tokens": tokens,
        "tokens_per_s": round(tokens / elapsed, 1),
        "rollouts_per_s": round(rollouts / elapsed, 2),
    }
    if stats:
        after = stats()
        steps = after["decode_steps"] - before["decode_steps"]
        result["decode_steps"] = steps
        result["mean_batch_size"] = round((after["decoded_tokens"] - before["decoded_tokens"]) / steps, 2) if steps else 0.0
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", nargs="+", choices=["builtin", "vllm"], default=["builtin", "vllm"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--rollouts-per-level", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2, help="attention heads (vLLM's CPU build needs head size 32, 64, ...)")
    parser.add_argument("--client-type", default="openai_chat_completions", choices=["openai_chat_completions", "renderer"])
    parser.add_argument("--cpu-threads", type=int, default=1, help="the built-in engine's torch threads")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if min(args.concurrency) < 1 or args.rollouts_per_level < 1 or args.max_tokens < 1:
        parser.error("--concurrency, --rollouts-per-level and --max-tokens must be >= 1")

    config = {
        "hidden_size": args.hidden_size, "intermediate_size": 2 * args.hidden_size, "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads, "num_key_value_heads": 1,
    }  # fmt: skip
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as directory:
        path = save_tiny_model(config, Path(directory) / "tiny")  # the renderer loads the tokenizer by the model's name
        model, tokenizer = build_tiny_model(config)
        if "builtin" in args.engine:
            with serve_in_thread(model, tokenizer, model_name=str(path), cpu_threads=args.cpu_threads) as server:
                results["builtin"] = run_levels("builtin", server.url, str(path), lambda: server.stats, args)
        if "vllm" in args.engine:
            started = time.perf_counter()
            extra = ["--dtype", "float32", "--max-num-seqs", str(max(args.concurrency)), "--max-model-len", "1024"]
            with VLLMServer(vllm_python(), path, served_name=str(path), extra_args=extra) as vllm:
                print(f"vllm: answering after {time.perf_counter() - started:.0f} s", flush=True)
                results["vllm"] = run_levels("vllm", vllm.url, str(path), None, args)
    report = {
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "builtin_threads": args.cpu_threads},
        "model": {**config, "parameters": sum(p.numel() for p in model.parameters())},
        "max_tokens": args.max_tokens,
        "client_type": args.client_type,
        "engines": results,
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(report, file, indent=2)
    return 1 if any(r["errors"] for levels in results.values() for r in levels) else 0


def run_levels(engine: str, url: str, model_name: str, stats: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    asyncio.run(run_level(url, model_name, stats, args.client_type, 1, 4, args.max_tokens))  # warm-up
    for concurrency in args.concurrency:
        result = asyncio.run(
            run_level(url, model_name, stats, args.client_type, concurrency, args.rollouts_per_level, args.max_tokens)
        )
        results.append(result)
        batching = f", {result['decode_steps']} decode steps, mean batch {result['mean_batch_size']}" if stats else ""
        print(
            f"{engine:>7} concurrency {concurrency:>3}: {result['tokens_per_s']:>8.1f} completion tokens/s, "
            f"{result['rollouts_per_s']:>6.2f} rollouts/s{batching}, errors {result['errors']}",
            flush=True,
        )
    return results


if __name__ == "__main__":
    sys.exit(main())
