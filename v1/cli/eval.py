"""`v1 eval CONFIG_OR_ENV_ID`: run an environment against a model, live, and save the results.

Settings come from the config file's ``[eval]`` table, then ``V1_EVAL_*``
environment variables, then flags (pydantic-settings). ``-m`` names a model at
``-b BASE_URL`` (default: the one model the server lists), or an endpoint id of the
registry (``configs/endpoints.toml``).
Results stream to ``OUTPUT_DIR/ENV--MODEL--TIME/{results.jsonl,metadata.json}``;
``--resume PATH`` finishes an interrupted run. Bad input is one line on stderr
and exit code 2, before anything is written.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import datetime
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from v1.clients.endpoints import client_config_for, load_endpoints
from v1.config import ClientConfig
from v1.env import Env
from v1.errors import ConfigError, Error
from v1.loading import import_env_module, load_module_environment, load_toml_environment, read_toml
from v1.results import EvalSummary, ResultsWriter
from v1.types import GenerateMetadata, RolloutOutput

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
RESUME_MUST_MATCH = ("env_id", "model", "num_examples", "rollouts_per_example", "sampling_args", "independent_scoring")

_file_settings: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("v1_eval_file_settings", default=None)


class EvalSettings(BaseSettings):
    """What `v1 eval` runs; the ``[eval]`` table of a config file, ``V1_EVAL_*`` variables, or flags."""

    model_config = SettingsConfigDict(env_prefix="V1_EVAL_", extra="forbid")

    model: str | None = None
    base_url: str | None = None
    api_key_var: str | None = None
    endpoints: str = "configs/endpoints.toml"
    num_examples: int = 5
    rollouts_per_example: int = 3
    max_concurrent: int = 32
    sampling_args: dict[str, Any] = {}
    independent_scoring: bool = False
    max_retries: int = 0
    state_columns: list[str] = []
    save: bool = True
    output_dir: str = "outputs/evals"
    resume: str | None = None
    save_to_hf_hub: str | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, InitSettingsSource(settings_cls, init_kwargs=_file_settings.get() or {})


FLAGS = {
    "model": "-m/--model",
    "base_url": "-b/--base-url",
    "api_key_var": "-k/--api-key-var",
    "endpoints": "-e/--endpoints",
    "num_examples": "-n/--num-examples",
    "rollouts_per_example": "-r/--rollouts-per-example",
    "max_concurrent": "-c/--max-concurrent",
    "sampling_args": "-s/--sampling-args",
}


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "eval",
        help="evaluate an environment (TOML config or env id) against a model",
        description="Evaluate an environment against a model. Extra flags --taskset.FIELD VALUE and "
        "--harness.FIELD VALUE override the environment's config (VALUE is parsed as JSON when it can be).",
    )
    parser.add_argument("env", metavar="CONFIG_OR_ENV_ID", help="a TOML config file (configs/x.toml) or an environment module/id")
    s = argparse.SUPPRESS
    parser.add_argument("-m", "--model", default=s, help="model name (with -b) or endpoint id from the registry")
    parser.add_argument("-b", "--base-url", default=s, help="OpenAI-compatible base URL")
    parser.add_argument("-k", "--api-key-var", default=s, help="environment variable holding the API key")
    parser.add_argument("-e", "--endpoints", default=s, help="endpoint registry (default configs/endpoints.toml)")
    parser.add_argument("-n", "--num-examples", type=int, default=s, help="examples to evaluate (-1: all; default 5)")
    parser.add_argument("-r", "--rollouts-per-example", type=int, default=s, help="rollouts per example (default 3)")
    parser.add_argument("-c", "--max-concurrent", type=int, default=s, help="most rollouts in flight (default 32)")
    parser.add_argument("-s", "--sampling-args", default=s, help="sampling args as JSON, e.g. '{\"temperature\": 0.7}'")
    parser.add_argument(
        "--independent-scoring", action=argparse.BooleanOptionalAction, default=s, help="score each rollout alone (group of one)"
    )
    parser.add_argument("--max-retries", type=int, default=s, help="retries of a group after an infrastructure error")
    parser.add_argument("--state-columns", nargs="+", default=s, help="extra state fields to save per rollout")
    parser.add_argument("--save", action=argparse.BooleanOptionalAction, default=s, help="write results (default --save)")
    parser.add_argument("--output-dir", default=s, help="where run folders go (default outputs/evals)")
    parser.add_argument("--resume", default=s, metavar="PATH", help="finish the interrupted run in PATH")
    parser.add_argument("--save-to-hf-hub", default=s, metavar="NAME", help="push results.jsonl to this HF Hub dataset")
    parser.set_defaults(run=run)


def parse_overrides(extra: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--taskset.a.b VALUE`` / ``--harness.x=VALUE`` pairs as nested dicts (VALUE parsed as JSON when it can be)."""
    sections: dict[str, dict[str, Any]] = {"taskset": {}, "harness": {}}
    items = list(extra)
    while items:
        flag = items.pop(0)
        match = re.fullmatch(r"--(taskset|harness)\.([A-Za-z_][\w.]*)(?:=(.*))?", flag, re.DOTALL)
        if match is None:
            raise ConfigError(f"command line: unrecognized argument {flag!r}; overrides look like --taskset.FIELD VALUE")
        section, path, value = match.groups()
        if value is None:
            if not items:
                raise ConfigError(f"command line: {flag} needs a value")
            value = items.pop(0)
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        target = sections[section]
        *parents, leaf = path.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
            if not isinstance(target, dict):
                raise ConfigError(f"command line: {flag} sets a field inside {parent!r}, which is not a table")
        target[leaf] = parsed
    return sections["taskset"], sections["harness"]


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def load_settings(flags: dict[str, Any], file: str | None, file_table: dict[str, Any]) -> EvalSettings:
    """Settings from file < environment < flags; a problem names where the bad value came from."""
    if isinstance(flags.get("sampling_args"), str):
        try:
            flags["sampling_args"] = json.loads(flags["sampling_args"])
        except ValueError as exc:
            raise ConfigError(
                f"command line: -s/--sampling-args: expected a JSON object, got {flags['sampling_args']!r} ({exc})"
            ) from None
    token = _file_settings.set(file_table)
    try:
        return EvalSettings(**flags)
    except ValidationError as exc:
        problem = exc.errors()[0]
        field = str(problem["loc"][0]) if problem["loc"] else "<root>"
        rest = ".".join(str(part) for part in problem["loc"][1:])
        message = "unknown field" if problem["type"] == "extra_forbidden" else problem["msg"]
        got = "" if problem["type"] in ("extra_forbidden", "missing") else f" (got {problem.get('input')!r:.60})"
        if field in flags:
            where = f"command line: {FLAGS.get(field, '--' + field.replace('_', '-'))}"
        elif f"V1_EVAL_{field.upper()}" in os.environ:
            where = f"environment variable V1_EVAL_{field.upper()}"
        else:
            where = f"{file}: field 'eval.{field}{'.' + rest if rest else ''}'"
        raise ConfigError(f"{where}: {message}{got}") from None
    finally:
        _file_settings.reset(token)


def load_env(target: str, taskset: dict[str, Any], harness: dict[str, Any]) -> tuple[Env, str | None, dict[str, Any]]:
    """The environment, its config file (if any) and that file's ``[eval]`` table."""
    if target.endswith(".toml") or Path(target).is_file():
        document = read_toml(target)
        table = document.get("eval", {})
        if not isinstance(table, dict):
            raise ConfigError(f"{target}: field 'eval': expected a table")
        return load_toml_environment(target, taskset, harness), target, table
    return load_module_environment(import_env_module(target), taskset, harness), None, {}


def _named(config: ClientConfig, field: str) -> bool:
    return field in config.model_fields_set


def resolve_client(settings: EvalSettings, env: Env) -> tuple[ClientConfig, str]:
    """The client config and model name: flags and settings over the registry alias over the env's harness."""
    harness_config = env.harness.config
    base = harness_config.client or ClientConfig()
    model = settings.model or harness_config.model
    base_url = settings.base_url or (
        base.api_base_url if harness_config.client is not None and _named(base, "api_base_url") else None
    )
    key_named = settings.api_key_var is not None or _named(base, "api_key_var")
    if base_url is None:
        if not model:
            raise ConfigError("no model: pass -m MODEL_OR_ENDPOINT_ID (with -b BASE_URL for a plain model name)")
        registry_path = Path(settings.endpoints)
        if not registry_path.is_file():
            raise ConfigError(f"-m {model}: no endpoint registry at {registry_path}; pass -b BASE_URL, or -e REGISTRY")
        registry = load_endpoints(registry_path)
        if model not in registry:
            raise ConfigError(
                f"-m {model}: no endpoint {model!r} in {registry_path} (known: {', '.join(sorted(registry)) or 'none'}); "
                "pass -b BASE_URL to call a model by name"
            )
        variants = registry[model]
        client, model = client_config_for(model, variants, base)
        key_named = key_named or any("key" in variant.model_fields_set for variant in variants)
    else:
        client = ClientConfig({**base.model_dump(), "api_base_url": base_url})
        model = model or served_model(client)
    if settings.api_key_var is not None:
        client = ClientConfig(
            {
                **client.model_dump(),
                "api_key_var": settings.api_key_var,
                "endpoint_configs": [{**e.model_dump(), "api_key_var": settings.api_key_var} for e in client.endpoint_configs],
            }
        )
    if key_named:
        variables = [client.api_key_var] + [e.api_key_var for e in client.endpoint_configs]
        missing = sorted({var for var in variables if not os.environ.get(var)})
        if missing:
            raise ConfigError(f"API key variable {missing[0]} is not set: export {missing[0]}=... or name another with -k VAR")
    return client, model


def served_model(client: ClientConfig) -> str:
    """The one model the server at `client.api_base_url` serves (``GET /models``), for a run without ``-m``."""
    import httpx

    from v1.clients.credentials import resolve_api_key

    url = client.api_base_url.rstrip("/") + "/models"
    try:
        response = httpx.get(url, headers={"Authorization": f"Bearer {resolve_api_key(client.api_key_var)}"}, timeout=10)
        response.raise_for_status()
        models = [entry["id"] for entry in response.json()["data"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"no model: pass -m MODEL (asking {url} which model it serves failed: {exc})") from None
    if len(models) != 1:
        raise ConfigError(f"no model: pass -m MODEL; {url} serves {len(models)} models: {', '.join(models[:10]) or 'none'}")
    return str(models[0])


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text.replace("/", "--")).strip("-") or "model"


def new_run_folder(settings: EvalSettings, env_id: str, model: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(settings.output_dir) / f"{_slug(env_id)}--{_slug(model)}--{stamp}"
    path, suffix = base, 1
    while path.exists():
        suffix += 1
        path = base.with_name(f"{base.name}-{suffix}")
    return path


def check_resume(writer: ResultsWriter, expected: dict[str, Any]) -> None:
    saved = writer.read_metadata()
    for field in RESUME_MUST_MATCH:
        if field in saved and saved[field] != expected[field]:
            raise ConfigError(
                f"--resume {writer.path}: field '{field}' of the saved run is {saved[field]!r}, this run has {expected[field]!r}; "
                "resume with the same settings"
            )


class LiveView:
    """A rich progress bar: rollouts done/total, rate, running mean reward and error count."""

    def __init__(self, console: Console, total: int, title: str) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:.1f} rollouts/s"),
            TextColumn("reward {task.fields[reward]:.3f}"),
            TextColumn("errors {task.fields[errors]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self.task: TaskID = self.progress.add_task(title, total=total, rate=0.0, reward=0.0, errors=0)
        self.start = time.perf_counter()
        self.first: int | None = None

    def update(self, outputs: list[RolloutOutput], summary: EvalSummary) -> None:
        if self.first is None:
            self.first = summary.count
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        self.progress.update(
            self.task,
            completed=summary.count,
            rate=(summary.count - self.first) / elapsed,
            reward=summary.avg_reward,
            errors=summary.errors,
        )


def summary_table(metadata: GenerateMetadata, wall_seconds: float, new_rollouts: int) -> Table:
    """The end-of-run table: reward, metrics, pass@k, errors, tokens and timing."""
    meta: dict[str, Any] = dict(metadata)
    count = meta.get("num_rollouts", 0)
    table = Table(
        title=f"v1 eval: {meta['env_id']} x {meta['model']}: {count} rollouts "
        f"({meta['num_examples']} examples x {meta['rollouts_per_example']})",
        title_justify="left",
    )
    table.add_column("", style="bold")
    table.add_column("value")
    table.add_row("reward (mean)", f"{meta['avg_reward']:.4f}")
    for name, value in meta["avg_metrics"].items():
        table.add_row(f"  {name}", f"{value:.4f}")
    pass_at = "  ".join(f"@{k} {v:.3f}" for k, v in meta["pass_at_k"].items())
    pass_all = "  ".join(f"@{k} {v:.3f}" for k, v in meta["pass_all_k"].items())
    table.add_row(f"pass (reward >= {meta['pass_threshold']:g})", pass_at)
    table.add_row("pass-all", pass_all)
    errors = f"{meta['num_errors']} ({meta['avg_error']:.1%})"
    if meta["error_types"]:
        errors += "  " + ", ".join(f"{name} {n}" for name, n in meta["error_types"].items())
    table.add_row("errors", errors)
    table.add_row("retries", str(meta["num_retries"]))
    table.add_row("stop conditions", ", ".join(f"{name} {n}" for name, n in meta["stop_conditions"].items()))
    usage, total = meta.get("usage") or {}, meta.get("total_usage") or {}
    if usage:
        table.add_row(
            "tokens in / out",
            f"{usage.get('input_tokens', 0):.1f} / {usage.get('output_tokens', 0):.1f} per rollout"
            f"  ({total.get('input_tokens', 0):.0f} / {total.get('output_tokens', 0):.0f} total)",
        )
    timing = meta.get("avg_timing") or {}
    table.add_row(
        "time",
        f"{wall_seconds:.1f} s wall, {new_rollouts / max(wall_seconds, 1e-9):.1f} rollouts/s; "
        f"rollout {timing.get('total', 0) * 1000:.0f} ms, model {timing.get('model', 0) * 1000:.0f} ms (mean)",
    )
    scoring = meta.get("scoring") or {}
    table.add_row(
        "scoring", scoring.get("note") or f"groups of {meta['rollouts_per_example']}; advantage: {scoring.get('advantage')}"
    )
    return table


async def run_eval(
    env: Env,
    settings: EvalSettings,
    client: ClientConfig,
    model: str,
    rows: list[dict[str, Any]],
    writer: ResultsWriter | None,
) -> tuple[GenerateMetadata, int, float]:
    """Run the eval under the live view (on stderr); the metadata, the rollouts run now, and the wall time."""
    total = len(rows) * settings.rollouts_per_example
    view = LiveView(Console(stderr=True), total, env.env_id)
    start = time.perf_counter()
    with view.progress:
        result = await env.generate(
            rows,
            client,
            model,
            settings.sampling_args,
            rollouts_per_example=settings.rollouts_per_example,
            max_concurrent=settings.max_concurrent,
            independent_scoring=settings.independent_scoring,
            max_retries=settings.max_retries,
            state_columns=settings.state_columns,
            results=writer,
            keep_outputs=False,
            on_progress=view.update,
        )
    new = result["metadata"].get("num_rollouts", 0) - (view.first or 0)
    return result["metadata"], new, time.perf_counter() - start


def push_to_hub(results_path: Path, name: str) -> None:
    from datasets import Dataset

    Dataset.from_json(str(results_path)).push_to_hub(name)


def _show_warnings() -> None:
    """v1's warnings (e.g. "no eval split") as ``v1 eval: warning: ...`` lines, unless logging is set up already."""
    if not logging.getLogger().handlers and not logging.getLogger("v1").handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("v1 eval: warning: %(message)s"))
        handler.setLevel(logging.WARNING)
        logging.getLogger("v1").addHandler(handler)


def run(args: argparse.Namespace) -> int:
    console = Console()
    error_console = Console(stderr=True)
    _show_warnings()
    try:
        taskset_overrides, harness_overrides = parse_overrides(getattr(args, "extra", []))
        flags = {k: v for k, v in vars(args).items() if k not in ("env", "run", "command", "extra")}
        env, file, table = load_env(args.env, taskset_overrides, harness_overrides)
        settings = load_settings(flags, file, table)
        client, model = resolve_client(settings, env)
        if settings.save_to_hf_hub and not settings.save:
            raise ConfigError("--save-to-hf-hub needs --save (it uploads the saved results.jsonl)")
        if settings.resume and not settings.save:
            raise ConfigError("--resume needs --save (it completes a saved run)")
        resumed = ResultsWriter.resuming(settings.resume) if settings.resume else None
        rows = env.eval_rows(settings.num_examples)
        expected = {
            "env_id": env.env_id,
            "model": model,
            "num_examples": len(rows),
            "rollouts_per_example": settings.rollouts_per_example,
            "sampling_args": {**env.harness.config.sampling_args, **settings.sampling_args},
            "independent_scoring": settings.independent_scoring,
        }
        writer: ResultsWriter | None = resumed
        if resumed is not None:
            check_resume(resumed, expected)
        elif settings.save:
            writer = ResultsWriter(new_run_folder(settings, env.env_id, model))
        else:
            writer = None
    except Error as exc:
        error_console.print(f"v1 eval: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_BAD_INPUT
    if settings.independent_scoring:
        console.print(env.scoring_plan(True)["note"], markup=False, highlight=False)
    try:
        metadata, new, wall = asyncio.run(run_eval(env, settings, client, model, rows, writer))
    except KeyboardInterrupt:
        where = f"; saved rollouts are in {writer.path}, finish with --resume {writer.path}" if writer else ""
        error_console.print(f"v1 eval: interrupted{where}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_INTERRUPTED
    except Error as exc:  # found only once running (a bad task row, an unsupported client type)
        error_console.print(f"v1 eval: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_BAD_INPUT
    console.print(summary_table(metadata, wall, new))
    if writer is not None:
        console.print(
            f"results: {writer.results_path}  metadata: {writer.metadata_path}", markup=False, highlight=False, soft_wrap=True
        )
        if settings.save_to_hf_hub:
            push_to_hub(writer.results_path, settings.save_to_hf_hub)
            console.print(f"pushed to the Hugging Face Hub as {settings.save_to_hf_hub}", markup=False, highlight=False)
    return 0


__all__ = ["EvalSettings", "add_parser", "load_settings", "parse_overrides", "resolve_client", "run", "summary_table"]
