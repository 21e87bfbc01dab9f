"""`v1 serve MODEL_OR_CONFIG`: the built-in inference server, or vLLM, over a model directory or a tiny-model config.

MODEL_OR_CONFIG is a directory saved with `save_pretrained` (weights, config,
tokenizer), or a `.toml`/`.json` `TinyModelConfig` (TOML: a `[tiny_model]` table or
the whole file) built in memory (``--engine vllm``: saved to the vLLM cache first). Prints
the base URL once the server answers, then serves until Ctrl-C or SIGTERM (vLLM: its whole
process tree stopped). torch and transformers are imported only when the command runs, so
`v1 --help` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import v1  # v1.config loads when the command runs
from v1.errors import ConfigError, ModelError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("serve", help="serve a model (directory or tiny-model config) over OpenAI-compatible HTTP")
    parser.add_argument(
        "model", metavar="MODEL_OR_CONFIG", help="a save_pretrained directory, or a .toml/.json tiny-model config"
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to bind; 0 picks a free one (default 8000)")
    parser.add_argument("--model-name", default=None, help="the name clients send as `model` (default: the directory, or 'tiny')")
    parser.add_argument("--max-batch-size", type=int, default=64, help="most sequences decoded in one step (default 64)")
    parser.add_argument("--max-model-len", type=int, default=None, help="context length (default: the model's)")
    parser.add_argument("--cpu-threads", type=int, default=1, help="torch threads for generation on CPU (default 1)")
    parser.add_argument(
        "--nemo-token-fields", action="store_true", help="also answer chat with NeMo-RL's message-level token ids"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="builtin: reproducible sampling for requests without their own seed (default: random per request)",
    )
    parser.add_argument(
        "--engine", choices=["builtin", "vllm"], default="builtin", help="builtin (default) or vllm (its own venv on CPU)"
    )
    parser.add_argument(
        "--vllm-arg", action="append", default=[], metavar="ARG", help="one more `vllm serve` argument (repeatable)"
    )
    parser.add_argument(
        "--weight-updates",
        action="store_true",
        help="vllm: VLLM_SERVER_DEV_MODE=1, the /collective_rpc and /reset_prefix_cache routes a trainer pushes weights through",
    )
    parser.set_defaults(run=run)


def checked_model_path(source: str) -> Path:
    """`source` as a path: a model directory (with its config.json) or a file (a tiny-model config).

    Raises:
        ConfigError: the path does not exist, or is a directory without config.json.
    """
    path = Path(source)
    if not path.exists():
        raise ConfigError(f"{source}: no such model directory or config file")
    if path.is_dir() and not (path / "config.json").is_file():
        raise ConfigError(f"{source}: not a model directory (no config.json); save one with save_pretrained")
    return path


def load_model_source(source: str) -> tuple[Any, Any, str]:
    """The model, tokenizer and default served name for a directory or a tiny-model config file.

    Raises:
        ConfigError: the path does not exist, or is neither a model directory nor a valid config.
    """
    path = checked_model_path(source)
    if path.is_dir():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            model: Any = AutoModelForCausalLM.from_pretrained(path)
            tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{source}: cannot load the model: {exc}") from None
        return model, tokenizer, str(path)
    from v1.inference import build_tiny_model

    model, tokenizer = build_tiny_model(tiny_config_from_file(path))
    return model, tokenizer, "tiny"


def tiny_config_from_file(path: Path) -> v1.config.TinyModelConfig:
    """The `TinyModelConfig` in a `.toml` or `.json` file.

    Raises:
        ConfigError: another suffix, invalid TOML/JSON, or invalid fields.
    """
    source = str(path)
    if path.suffix == ".toml":
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: invalid TOML: {exc}") from None
        config = v1.config.TinyModelConfig.from_toml(path, section="tiny_model" if "tiny_model" in document else None)
    elif path.suffix == ".json":
        try:
            config = v1.config.TinyModelConfig(json.loads(path.read_text(encoding="utf-8")))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source}: invalid JSON: {exc}") from None
    else:
        raise ConfigError(f"{source}: expected a model directory, or a .toml/.json tiny-model config")
    return config


async def serve(args: argparse.Namespace) -> None:
    from v1.inference import InferenceServer

    model, tokenizer, name = load_model_source(args.model)
    server = InferenceServer(
        model,
        tokenizer,
        model_name=args.model_name or name,
        host=args.host,
        port=args.port,
        max_batch_size=args.max_batch_size,
        max_model_len=args.max_model_len,
        cpu_threads=args.cpu_threads,
        nemo_token_fields=args.nemo_token_fields,
        seed=args.seed,
    )
    async with server:
        print(f"serving {server.model_name!r} at {server.url}", flush=True)
        await asyncio.Event().wait()


def vllm_model_dir(source: str) -> tuple[Path, str]:
    """A folder vLLM can load and the default served name: the directory itself, or the tiny config saved once to the cache.

    Raises:
        ConfigError: as `load_model_source`.
    """
    path = checked_model_path(source)
    if path.is_dir():
        return path.resolve(), str(path)
    from v1.inference import cache_root, save_tiny_model

    config = tiny_config_from_file(path)
    digest = hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:16]
    folder = cache_root() / "models" / f"tiny-{digest}"
    if not (folder / "config.json").is_file():
        save_tiny_model(config, folder)
    return folder, "tiny"


def serve_vllm(args: argparse.Namespace) -> None:
    """Start vLLM, print its URL once it answers, and stop its process tree on Ctrl-C or SIGTERM."""
    from v1.inference import VLLMServer, port_is_free, startup_error, vllm_python

    folder, name = vllm_model_dir(args.model)
    if args.port and not port_is_free(args.host, args.port):
        raise ConfigError(f"port {args.port} on {args.host} is already in use")
    python = vllm_python(log=lambda line: print(line, file=sys.stderr, flush=True))
    server = VLLMServer(
        python, folder, served_name=args.model_name or name, host=args.host, port=args.port,
        max_model_len=args.max_model_len, dev_mode=args.weight_updates, extra_args=args.vllm_arg,
    )  # fmt: skip
    try:
        server.start()
        print(f"starting vLLM (log: {server.log_path})", file=sys.stderr, flush=True)
        server.wait_ready()
        print(f"serving {server.served_name!r} at {server.url}", flush=True)
        while server.alive():
            time.sleep(0.5)
        assert server.log_path is not None
        raise ModelError(f"vLLM exited: {startup_error(server.log_path)} (log: {server.log_path})")
    finally:
        server.stop()


def run(args: argparse.Namespace) -> int:
    if args.max_batch_size < 1 or args.cpu_threads < 1 or (args.max_model_len is not None and args.max_model_len < 2):
        print("error: --max-batch-size and --cpu-threads must be >= 1, --max-model-len >= 2", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"error: --port must be in 0..65535, got {args.port}", file=sys.stderr)
        return 2
    if args.seed is not None and not 0 <= args.seed < 2**63:
        print(f"error: --seed must be in 0..2**63-1, got {args.seed}", file=sys.stderr)
        return 2
    if args.seed is not None and args.engine == "vllm":
        print("error: --seed is the builtin engine's; give vLLM its own with --vllm-arg=--seed=N", file=sys.stderr)
        return 2
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if args.engine == "vllm":
            serve_vllm(args)
            return 0
        asyncio.run(serve(args))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


__all__ = ["add_parser", "load_model_source", "run", "serve_vllm", "tiny_config_from_file", "vllm_model_dir"]
