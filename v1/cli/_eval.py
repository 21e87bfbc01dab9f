"""`v1 eval CONFIG_OR_ENV_ID`: run an environment against a model, live, and save the results.

Settings come from the config file's ``[eval]`` table, then ``V1_EVAL_*``
environment variables, then flags (pydantic-settings). ``-m`` names a model at
``-b BASE_URL`` (default: ``$OPENAI_BASE_URL``; no ``-m``: the one model the server lists),
or an endpoint id of the registry (``configs/endpoints.toml``); with no ``-m`` and no URL,
`DEFAULT_MODEL` runs, as with vf-eval. ``-a JSON`` passes keywords to a classic
``load_environment``; a ``-x`` key the environment has no setting for is a warning.
Results stream to ``OUTPUT_DIR/ENV--MODEL--TIME/{results.jsonl,metadata.json}``;
``CONFIG_OR_ENV_ID ... --resume PATH`` finishes an interrupted run: the command names what runs and
where the key goes and every setting (those that shape results must equal what the folder saved); the
folder supplies only its finished rollouts.
Bad input is one line on stderr and exit code 2, before anything is written; the
exit codes are listed in `ExitCode` (and docs/evaluation.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import dataclasses
import datetime
import enum
import json
import logging
import os
import re
import sys
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from rich.console import Console

import v1
from v1._util import loop_scope as loop_scope
from v1._util.descriptors import raise_descriptor_limit, rollouts_within
from v1._util.logs import LEVEL_VARIABLE, setup_logging
from v1._util.terminal import printable
from v1.cli._eval_view import LiveView, summary_table
from v1.cli._preflight import ServerUnusable, check_server, fatal_upstream_error
from v1.cli._standalone import run_command
from v1.cli._stopping import DEFAULT_STOP_GRACE_S, INTERRUPTED, Stopping
from v1.clients import client_config_for, load_endpoints
from v1.config import OPENAI_BASE_URL_VAR, ClientConfig, read_toml
from v1.env import (
    DEFAULT_MAX_CONCURRENT,
    DEFAULT_NUM_EXAMPLES,
    DEFAULT_ROLLOUTS_PER_EXAMPLE,
    Env,
    EnvSource,
    EvalConfig,
    MaxConcurrent,
    MaxRetries,
    NumExamples,
    RayActorsLost,
    RayExecutor,
    ResultsWriter,
    RolloutKey,
    RolloutsPerExample,
    create_run_folder,
    environment_config_file,
    load_id_environment,
    load_toml_environment,
)
from v1.errors import ConfigError, Error
from v1.types import GenerateMetadata


class ExitCode(enum.IntEnum):
    """`v1 eval`'s exit status."""

    OK = 0
    """The run finished (and its error rate is within ``--fail-on-error``, when given)."""
    FAILED = 1
    """The run finished, but every rollout failed, or the error rate is above ``--fail-on-error``."""
    BAD_INPUT = 2
    """A flag, setting, config file, environment or ``--resume`` folder is wrong; nothing ran or was written."""
    ABORTED = 3
    """The model server cannot serve the run (unreachable, key refused, no such model or route), or the run broke."""
    UPLOAD_FAILED = 4
    """The run finished and is saved, but ``--save-to-hf-hub`` failed."""
    INTERRUPTED = INTERRUPTED
    """Ctrl-C or SIGTERM: finished groups are saved; ``--resume`` finishes the run (see `v1.cli._stopping`)."""


RESUME_MUST_MATCH = ("env_id", "model", "num_examples", "rollouts_per_example", "sampling_args", "independent_scoring")
SAVED_SETTINGS_FIELD = "eval_settings"
"""The `metadata.json` field holding what `v1 eval` was given: `--resume PATH` checks the command against it (it takes nothing from it)."""
RESUME_REACH_SETTINGS = ("base_url", "api_key_var", "endpoints", "extra_env_kwargs", "env_args")
"""Saved settings that choose where a resumed run sends the key or what it sets on the env: `--resume` never takes them from the folder."""
DEFAULT_MODEL = "openai/gpt-4.1-mini"
"""The model `v1 eval` runs when nothing names one (vf-eval's default): an endpoint id of the registry, else a model
name at `ClientConfig`'s default URL."""
NOT_SAVED = frozenset(
    {"resume", "save_to_hf_hub", "fail_on_error", "ray", "ray_actors", "ray_actor_concurrency", "verbose", "debug", "stop_grace"}
)

MAX_STOP_GRACE_S = 86400.0
"""The longest ``--stop-grace``: a day."""

_file_settings: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("v1_eval_file_settings", default=None)


class EvalSettings(BaseSettings):
    """What `v1 eval` runs; the ``[eval]`` table of a config file, ``V1_EVAL_*`` variables, or flags."""

    model_config = SettingsConfigDict(env_prefix="V1_EVAL_", extra="forbid")

    model: str | None = None
    base_url: str | None = None
    api_key_var: str | None = None
    endpoints: str = "configs/endpoints.toml"
    num_examples: NumExamples = DEFAULT_NUM_EXAMPLES
    rollouts_per_example: RolloutsPerExample = DEFAULT_ROLLOUTS_PER_EXAMPLE
    max_concurrent: MaxConcurrent = DEFAULT_MAX_CONCURRENT
    sampling_args: dict[str, Any] = {}
    independent_scoring: bool = False
    max_retries: MaxRetries = 0
    state_columns: list[str] = []
    env_args: dict[str, Any] = {}
    extra_env_kwargs: dict[str, Any] = {}
    verbose: bool = False
    debug: bool = False
    save: bool = True
    output_dir: str = "outputs/evals"
    resume: str | None = None
    save_to_hf_hub: str | None = None
    fail_on_error: float | None = Field(None, ge=0, le=1)
    ray: str | None = None
    ray_actors: int = Field(2, ge=1)
    ray_actor_concurrency: int | None = Field(None, ge=1)
    stop_grace: float = Field(DEFAULT_STOP_GRACE_S, gt=0, le=MAX_STOP_GRACE_S, allow_inf_nan=False)

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
    "env_args": "-a/--env-args",
    "extra_env_kwargs": "-x/--extra-env-kwargs",
    "verbose": "-v/--verbose",
    "debug": "-d/--debug",
    "ray": "--ray",
    "ray_actors": "--ray-actors",
    "ray_actor_concurrency": "--ray-actor-concurrency",
    "stop_grace": "--stop-grace",
}
LOCAL_RAY = "local"
"""`--ray` without an address: a Ray instance started by this process."""


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "eval",
        help="evaluate an environment (TOML config or env id) against a model",
        description="Evaluate an environment against a model. Extra flags --taskset.FIELD VALUE and "
        "--harness.FIELD VALUE override the environment's config (VALUE is parsed as JSON when it can be).",
    )
    parser.add_argument(
        "env",
        nargs="?",
        metavar="CONFIG_OR_ENV_ID",
        help="a TOML config file (configs/x.toml) or an environment module/id (with --resume: the saved run's)",
    )
    s = argparse.SUPPRESS
    parser.add_argument(
        "-m", "--model", default=s, help=f"model name (with -b) or endpoint id from the registry (default {DEFAULT_MODEL})"
    )
    parser.add_argument("-b", "--base-url", default=s, help="OpenAI-compatible base URL (default $OPENAI_BASE_URL)")
    parser.add_argument("-k", "--api-key-var", default=s, help="environment variable holding the API key")
    parser.add_argument(
        "-e",
        "--endpoints",
        default=s,
        help="endpoint registry: TOML, or Python defining ENDPOINTS (default configs/endpoints.toml)",
    )
    parser.add_argument("-n", "--num-examples", type=int, default=s, help="examples to evaluate (-1: all; default 5)")
    parser.add_argument("-r", "--rollouts-per-example", type=int, default=s, help="rollouts per example (default 3)")
    parser.add_argument("-c", "--max-concurrent", type=int, default=s, help="most rollouts in flight (default 32)")
    parser.add_argument("-s", "--sampling-args", default=s, help="sampling args as JSON, e.g. '{\"temperature\": 0.7}'")
    parser.add_argument(
        "-a",
        "--env-args",
        default=s,
        metavar="JSON",
        help="keyword arguments of the environment's load_environment as a JSON object, e.g. '{\"num_examples\": 100}'",
    )
    parser.add_argument(
        "-x",
        "--extra-env-kwargs",
        default=s,
        metavar="JSON",
        help="environment settings as a JSON object, applied with env.set_kwargs, e.g. '{\"max_seq_len\": 4096}'",
    )
    parser.add_argument("-v", "--verbose", action="store_true", default=s, help="log at DEBUG level")
    parser.add_argument("-d", "--debug", action="store_true", default=s, help="no live progress bar: plain log lines instead")
    parser.add_argument(
        "--independent-scoring", action=argparse.BooleanOptionalAction, default=s, help="score each rollout alone (group of one)"
    )
    parser.add_argument("--max-retries", type=int, default=s, help="retries of a group after an infrastructure error")
    parser.add_argument("--state-columns", nargs="+", default=s, help="extra state fields to save per rollout")
    parser.add_argument("--save", action=argparse.BooleanOptionalAction, default=s, help="write results (default --save)")
    parser.add_argument("--output-dir", default=s, help="where run folders go (default outputs/evals)")
    parser.add_argument(
        "--resume",
        default=s,
        metavar="PATH",
        help="finish the interrupted run in PATH (repeat its command: environment, overrides and flags)",
    )
    parser.add_argument("--save-to-hf-hub", default=s, metavar="NAME", help="push results.jsonl to this HF Hub dataset")
    parser.add_argument(
        "--fail-on-error",
        nargs="?",
        type=float,
        const=0.0,
        default=s,
        metavar="RATE",
        help="exit 1 when the share of failed rollouts is above RATE (0 to 1; alone: any error)",
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const=LOCAL_RAY,
        default=s,
        metavar="ADDRESS",
        help="run the groups on Ray actors: at ADDRESS (host:6379, ray://host:10001, auto), or a local Ray instance",
    )
    parser.add_argument("--ray-actors", type=int, default=s, help="Ray actors to start (default 2; with --ray)")
    parser.add_argument(
        "--ray-actor-concurrency",
        type=int,
        default=s,
        help="most rollouts in flight per actor (default: -c divided among the actors; with --ray)",
    )
    parser.add_argument(
        "--stop-grace",
        type=float,
        default=s,
        metavar="SECONDS",
        help=f"after Ctrl-C or SIGTERM, the most time the rollouts in flight get to stop and clean up "
        f"(default {DEFAULT_STOP_GRACE_S:g}; Ctrl-C again exits at once)",
    )
    parser.add_argument(
        "--compat",
        choices=["verifiers"],
        default=None,
        help="run an environment written for another framework unchanged: 'verifiers' makes 'import verifiers' resolve to v1",
    )
    parser.set_defaults(run=run, accepts_extra_args=True)


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
        except (ValueError, RecursionError):
            parsed = value
        target = sections[section]
        *parents, leaf = path.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
            if not isinstance(target, dict):
                raise ConfigError(f"command line: {flag} sets a field inside {parent!r}, which is not a table")
        target[leaf] = parsed
    return sections["taskset"], sections["harness"]


def _json_object_flag(field: str, text: str) -> dict[str, Any]:
    """The JSON object a flag holds, or one line naming the flag."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: hostile nesting
        raise ConfigError(f"command line: {FLAGS[field]}: expected a JSON object, got {text!r:.80} ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"command line: {FLAGS[field]}: expected a JSON object, got {type(value).__name__} {text!r:.80}")
    return value


def load_settings(flags: dict[str, Any], file: str | None, file_table: dict[str, Any]) -> EvalSettings:
    """Settings from file < environment < flags; a problem names where the bad value came from."""
    for field in ("sampling_args", "env_args", "extra_env_kwargs"):
        if isinstance(flags.get(field), str):
            flags[field] = _json_object_flag(field, flags[field])
    token = _file_settings.set(file_table)
    try:
        return EvalSettings(**flags)
    except ValidationError as exc:
        problem = exc.errors()[0]
        field = str(problem["loc"][0]) if problem["loc"] else "<root>"
        rest = ".".join(str(part) for part in problem["loc"][1:])
        message = "unknown field" if problem["type"] == "extra_forbidden" else problem["msg"].removeprefix("Value error, ")
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


def _is_config_file(target: str) -> bool:
    return target.endswith(".toml") or Path(target).is_file()


def read_eval_table(target: str) -> tuple[str | None, dict[str, Any]]:
    """The config file (None for a module environment) and its ``[eval]`` table."""
    if not _is_config_file(target):
        return None, {}
    table = read_toml(target).get("eval", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{target}: field 'eval': expected a table")
    return target, table


def load_env(target: str, taskset: dict[str, Any], harness: dict[str, Any], env_args: Mapping[str, Any] | None = None) -> Env:
    """The environment of a config file or a module/id, with the command line's overrides and ``-a`` keywords."""
    if _is_config_file(target):
        if env_args:
            raise ConfigError(
                f"command line: {FLAGS['env_args']}: {target} is a config file, whose loader takes no keywords; "
                "set its fields with --taskset.FIELD VALUE / --harness.FIELD VALUE"
            )
        return load_toml_environment(target, taskset, harness)
    if not env_args:
        return load_id_environment(target, taskset, harness)
    try:
        return load_id_environment(target, taskset, harness, env_args=env_args)
    except Error:
        raise
    except Exception as exc:  # the loader refusing the user's keywords its own way (a KeyError, a ValueError, ...)
        raise ConfigError(
            f"command line: {FLAGS['env_args']}: {target}'s load_environment(**{dict(env_args)!r:.80}) raised {_first_line(exc)}"
        ) from None


def _named(config: ClientConfig, field: str) -> bool:
    return field in config.model_fields_set


def _named_base_url(settings: EvalSettings, env: Env) -> str | None:
    """``-b``, else the harness's named client URL; None: the model is an endpoint id of the registry."""
    client = env.harness.config.client
    return settings.base_url or (client.api_base_url if client is not None and _named(client, "api_base_url") else None)


def default_model(settings: EvalSettings, env: Env) -> str | None:
    """`DEFAULT_MODEL` when nothing names a model or a URL (no ``-m``, ``-b``, harness model or URL, ``$OPENAI_BASE_URL``)."""
    named = settings.model or env.harness.config.model or _named_base_url(settings, env) or os.environ.get(OPENAI_BASE_URL_VAR)
    return None if named else DEFAULT_MODEL


def _registry_client(
    settings: EvalSettings, model: str, base: ClientConfig, by_default: bool
) -> tuple[ClientConfig, str, bool] | None:
    """The registry's client, model name and whether it names a key, for an endpoint id; None: a model name at `base`'s
    default URL (``$OPENAI_BASE_URL``, or `DEFAULT_MODEL` at ClientConfig's default)."""
    registry_path = Path(settings.endpoints)
    registry = load_endpoints(registry_path) if registry_path.is_file() else {}
    if model not in registry:
        if by_default or os.environ.get(OPENAI_BASE_URL_VAR):
            return None
        if not registry_path.is_file():
            raise ConfigError(f"-m {model}: no endpoint registry at {registry_path}; pass -b BASE_URL, or -e REGISTRY")
        raise ConfigError(
            f"-m {model}: no endpoint {model!r} in {registry_path} (known: {', '.join(sorted(registry)) or 'none'}); "
            "pass -b BASE_URL (or set $OPENAI_BASE_URL) to call a model by name"
        )
    variants = registry[model]
    client, name = client_config_for(model, variants, base)
    return client, name, any("key" in variant.model_fields_set for variant in variants)


def resolve_client(settings: EvalSettings, env: Env) -> tuple[ClientConfig, str | None]:
    """The client config and model name (None: ask the server): flags and settings over the registry alias over the env's
    harness; ``$OPENAI_BASE_URL`` where ``-b`` would go; `DEFAULT_MODEL` when nothing names a model or a URL."""
    harness_config = env.harness.config
    base = harness_config.client or ClientConfig()
    by_default = default_model(settings, env)
    model = settings.model or harness_config.model or by_default
    base_url = _named_base_url(settings, env)
    key_named = settings.api_key_var is not None or _named(base, "api_key_var")
    found = _registry_client(settings, model, base, by_default is not None) if base_url is None and model else None
    if found is not None:
        client, model, registry_key = found
        key_named = key_named or registry_key
    elif base_url is None:  # $OPENAI_BASE_URL, or the default model at ClientConfig's default URL
        client = base
    else:
        client = ClientConfig({**base.model_dump(), "api_base_url": base_url})
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
    return client, model or None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text.replace("/", "--")).strip("-") or "model"


def new_run_folder(settings: EvalSettings, env_id: str, model: str) -> Path:
    """A fresh run folder, `OUTPUT_DIR/ENV--MODEL--YYYYMMDD-HHMMSS[-N]`, created atomically."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return create_run_folder(settings.output_dir, f"{_slug(env_id)}--{_slug(model)}--{stamp}")


def check_resume(path: Path, saved: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    """Refuse to resume a run with other settings, naming every difference at once."""
    differences = [
        f"{field} (saved {saved[field]!r}, now {expected[field]!r})"
        for field in RESUME_MUST_MATCH
        if field in saved and field in expected and saved[field] != expected[field]
    ]
    if differences:
        raise ConfigError(
            f"--resume {path}: the saved run differs in {len(differences)} setting(s): {'; '.join(differences)}; "
            "a run folder never chooses them: pass the saved run's flags yourself"
        )


def _as_saved(field: str, value: Any) -> Any:
    """`value` as `saved_invocation` records it: an environment or registry file by its absolute path."""
    if field == "env" and isinstance(value, str):
        value = environment_config_file(value)
    if field in ("env", "endpoints") and isinstance(value, str) and Path(value).is_file():
        return str(Path(value).resolve())
    return value


def refuse_what_the_folder_would_change(
    path: Path, given: Mapping[str, Any], now: Mapping[str, Any], flags: Mapping[str, Any]
) -> None:
    """Resume trusts the user, not the folder: what the saved run would run or contact must be what this command says.

    The environment, the ``--taskset.*``/``--harness.*`` overrides (a program, its command, the
    sandbox, the client) and the settings in `RESUME_REACH_SETTINGS` come from this command only
    (its config file, ``V1_EVAL_*`` variables and flags), never from ``metadata.json``; a saved value
    that differs is refused before anything loads, runs or is sent.

    Raises:
        ConfigError: every difference, in one line.
    """
    target = now["env"]
    file, table = read_eval_table(environment_config_file(target)) if target is not None else (None, {})
    settings = load_settings(dict(flags), file, table)
    mine = {**now, **{field: getattr(settings, field) for field in RESUME_REACH_SETTINGS}}
    saved = {field: EvalSettings.model_fields[field].default for field in RESUME_REACH_SETTINGS}
    saved |= {field: value for field, value in given["settings"].items() if field in RESUME_REACH_SETTINGS}
    saved |= {field: given[field] for field in ("env", "taskset", "harness")}
    differences = []
    for field, value in mine.items():
        if field == "endpoints" and settings.base_url is not None:  # with -b no registry is read
            continue
        before, after = _as_saved(field, saved[field]), _as_saved(field, value)
        if before != after:
            differences.append(f"{field} (saved {before!r:.120}, now {after!r:.120})")
    if differences:
        raise ConfigError(
            f"--resume {path}: what the run would run or contact differs from this command in {len(differences)} "
            f"setting(s): {'; '.join(differences)}; a run folder never chooses them: pass the saved run's "
            "CONFIG_OR_ENV_ID, overrides and -b/-k/-e/-x/-a yourself"
        )


def saved_invocation(target: str, taskset: dict[str, Any], harness: dict[str, Any], settings: EvalSettings) -> dict[str, Any]:
    """What this run was given, with paths made absolute, for `--resume PATH` to check and continue."""
    values = settings.model_dump(exclude=set(NOT_SAVED))
    if Path(values["endpoints"]).is_file():
        values["endpoints"] = str(Path(values["endpoints"]).resolve())
    env = str(Path(target).resolve()) if Path(target).is_file() else target
    return {"env": env, "taskset": taskset, "harness": harness, "settings": values}


JSON_VALUES = (type(None), bool, int, float, str, list, dict)


def _settable_from_json(env: Env, key: str) -> bool:
    """A public ``set_<key>`` method, or a public attribute holding a JSON value (not a taskset, a method, ...)."""
    if key.startswith("_"):
        return False
    return callable(getattr(env, f"set_{key}", None)) or isinstance(getattr(env, key, ()), JSON_VALUES)


def _not_a_setting(env: Env, key: str) -> str:
    setters = sorted(
        name[4:] for name in dir(env) if name.startswith("set_") and name != "set_kwargs" and not name[4:].startswith("_")
    )
    return (
        f"{FLAGS['extra_env_kwargs']}: {key!r:.60} is not a setting of {type(env).__name__} {env.env_id!r}: ignored "
        f"(a vf-eval option this environment does not take; -x sets, for example: {', '.join(setters) or 'its attributes'})"
    )


def apply_extra_env_kwargs(env: Env, extra: Mapping[str, Any]) -> list[str]:
    """``-x JSON``: each key set with `env.set_kwargs`, and recorded in the env's `EnvSource` for Ray actors.

    A key the environment has no setting for (a command line copied from vf-eval, say) is left out, with a warning.

    Returns:
        One warning per key left out.

    Raises:
        ConfigError: a value its setter refuses, as one line.
    """
    applied: dict[str, Any] = {}
    warnings = []
    for key, value in extra.items():
        if not _settable_from_json(env, key):
            warnings.append(_not_a_setting(env, key))
            continue
        try:
            env.set_kwargs(**{key: value})
        except Exception as exc:  # a setter refusing the value, whatever it raises
            if isinstance(exc, ConfigError) and "unknown setting" in str(exc):
                warnings.append(_not_a_setting(env, key))
                continue
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            flag = FLAGS["extra_env_kwargs"]
            raise ConfigError(f"command line: {flag}: {key!r}: bad value {value!r:.60}: {reason}"[:400]) from None
        applied[key] = value
    if applied and isinstance(env.source, EnvSource):  # Ray actors load the env again from its source: they apply them too
        env.source = dataclasses.replace(env.source, env_kwargs={**env.source.env_kwargs, **applied})
    return warnings


def eval_config(
    settings: EvalSettings, env: Env, client: ClientConfig, model: str, overrides: Mapping[str, Mapping[str, Any]]
) -> EvalConfig:
    """The run's `EvalConfig`, from the resolved settings, environment, client and model."""
    return EvalConfig(
        env_id=env.env_id,
        env_args={section: dict(values) for section, values in overrides.items() if values},
        endpoint_id=(settings.model or env.harness.config.model) if _named_base_url(settings, env) is None else None,
        model=model,
        client_config=client,
        sampling_args=settings.sampling_args,
        num_examples=settings.num_examples,
        rollouts_per_example=settings.rollouts_per_example,
        max_concurrent=settings.max_concurrent,
        independent_scoring=settings.independent_scoring,
        extra_env_kwargs=settings.extra_env_kwargs,
        max_retries=settings.max_retries,
        verbose=settings.verbose,
        state_columns=settings.state_columns or None,
        save_results=settings.save,
        resume_path=Path(settings.resume) if settings.resume else None,
        save_to_hf_hub=settings.save_to_hf_hub is not None,
        hf_hub_dataset_name=settings.save_to_hf_hub,
    )


def _check_saved_invocation(given: Any, where: Path) -> dict[str, Any]:
    shape = {"env": str, "taskset": dict, "harness": dict, "settings": dict}
    if not isinstance(given, dict) or any(not isinstance(given.get(key), kind) for key, kind in shape.items()):
        raise ConfigError(
            f"{where}: field '{SAVED_SETTINGS_FIELD}' is malformed (expected env, taskset, harness and settings); "
            "pass CONFIG_OR_ENV_ID and the run's flags with --resume"
        )
    return given


@dataclass
class EvalPlan:
    """Everything a run needs, resolved and checked before anything runs."""

    env: Env
    settings: EvalSettings
    client: ClientConfig
    model: str
    rows: list[dict[str, Any]] | Iterable[dict[str, Any]]
    """The rows evaluated: a list, or a stream's rows drawn as the run takes them."""
    writer: ResultsWriter | None
    warnings: list[str]
    config: EvalConfig
    """The run as the seed's `EvalConfig`: what `run_eval` reads its counts, sampling and client from."""
    executor: RayExecutor | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    """What the user should know that is not a problem (the default model running), one line each."""


def plan_run(args: argparse.Namespace) -> EvalPlan:
    """Resolve and check the run `args` ask for; creates the run folder last.

    Raises:
        ConfigError: bad input (exit 2).
        ServerUnusable: the model server cannot serve the run (exit 3).
    """
    if getattr(args, "compat", None) == "verifiers":
        v1.install_verifiers_alias()
    taskset_overrides, harness_overrides = parse_overrides(getattr(args, "extra", []))
    flags = {k: v for k, v in vars(args).items() if k not in ("env", "run", "command", "extra", "accepts_extra_args", "compat")}
    target: str | None = args.env
    resume_path = flags.get("resume") or os.environ.get("V1_EVAL_RESUME")
    resumed = saved = None
    if resume_path:
        resumed = ResultsWriter.resuming(resume_path, extra_fields=[SAVED_SETTINGS_FIELD], redo=stopped_the_run)
        saved = resumed.read_metadata()
        given = saved.get(SAVED_SETTINGS_FIELD)
        if given is not None:
            given = _check_saved_invocation(given, resumed.metadata_path)
            now = {"env": target, "taskset": taskset_overrides, "harness": harness_overrides}
            refuse_what_the_folder_would_change(Path(str(resume_path)), given, now, flags)
        elif target is None:
            raise ConfigError(
                f"--resume {resume_path}: the saved run does not record its settings (an older v1 made it); "
                "pass CONFIG_OR_ENV_ID and the run's flags with --resume"
            )
    if target is None:
        raise ConfigError("pass CONFIG_OR_ENV_ID (a TOML config or an environment id), or --resume PATH to finish a saved run")
    target = environment_config_file(target)
    file, table = read_eval_table(target)
    # A resumed run's settings are this command's, never the folder's: `check_resume` compares those that shape results.
    settings = load_settings(flags, file, table)
    if settings.save_to_hf_hub and not settings.save:
        raise ConfigError("--save-to-hf-hub needs --save (it uploads the saved results.jsonl)")
    if settings.resume and not settings.save:
        raise ConfigError("--resume needs --save (it completes a saved run)")
    if settings.ray is None and ({"ray_actors", "ray_actor_concurrency"} & settings.model_fields_set):
        raise ConfigError("--ray-actors and --ray-actor-concurrency need --ray [ADDRESS]")
    configure_logging(settings)
    env = load_env(target, taskset_overrides, harness_overrides, settings.env_args)
    ignored = apply_extra_env_kwargs(env, settings.extra_env_kwargs)
    client, model = resolve_client(settings, env)
    notes = [f"model {DEFAULT_MODEL} at {client.api_base_url} (the default; choose another with -m MODEL)"] * bool(
        default_model(settings, env)
    )
    rows = eval_inputs(env, settings)
    expected: dict[str, Any] = {
        "env_id": env.env_id,
        "rollouts_per_example": settings.rollouts_per_example,
        "sampling_args": {**env.harness.config.sampling_args, **settings.sampling_args},
        "independent_scoring": settings.independent_scoring,
    }
    if isinstance(rows, list):  # a stream's rows are keyed by content: a resumed run may draw more or fewer
        expected["num_examples"] = len(rows)
    if saved is not None and model is not None:  # else the server names the model: checked after asking it
        check_resume(Path(str(resume_path)), saved, {**expected, "model": model})
    model, warnings = check_server_saying(client, model, notes)
    assert model is not None  # check_server names one or raises
    if saved is not None:
        check_resume(Path(str(resume_path)), saved, {**expected, "model": model})
    if isinstance(rows, list) and 0 < settings.num_examples and len(rows) < settings.num_examples:
        warnings.append(f"-n {settings.num_examples}: {env.env_id} has {len(rows)} evaluation rows; evaluating all {len(rows)}")
    executor = None
    if settings.ray is not None:
        executor = RayExecutor(
            None if settings.ray == LOCAL_RAY else settings.ray,
            actors=settings.ray_actors,
            actor_concurrency=settings.ray_actor_concurrency,
        )
        executor.connect()
    writer = resumed
    if resumed is None and settings.save:
        writer = ResultsWriter(
            new_run_folder(settings, env.env_id, model),
            {SAVED_SETTINGS_FIELD: saved_invocation(target, taskset_overrides, harness_overrides, settings)},
            redo=stopped_the_run,
        )
    settings, fitted = fit_to_descriptors(settings)
    config = eval_config(settings, env, client, model, {"taskset": taskset_overrides, "harness": harness_overrides})
    return EvalPlan(env, settings, client, model, rows, writer, [*ignored, *warnings, *fitted], config, executor, notes)


def fit_to_descriptors(settings: EvalSettings) -> tuple[EvalSettings, list[str]]:
    """Raise this process's open-file limit to its hard limit; past what that holds, `-c` is lowered, with a warning.

    Each rollout in flight holds an upstream connection: more than the limit would fail rollouts with
    "Too many open files" wherever the next descriptor is opened. Ray actors are processes of their own.
    """
    limit = raise_descriptor_limit()
    fitting = rollouts_within(limit, settings.max_concurrent)
    if settings.ray is not None or fitting == settings.max_concurrent:
        return settings, []
    warning = (
        f"-c {settings.max_concurrent}: this process may open {limit} files (its hard limit, `ulimit -Hn`) and each rollout "
        f"in flight holds at least one; running at most {fitting} at once (raise the hard limit to run more)"
    )
    return settings.model_copy(update={"max_concurrent": fitting}), [warning]


def eval_inputs(env: Env, settings: EvalSettings) -> list[dict[str, Any]] | Iterable[dict[str, Any]]:
    """The rows the run evaluates: a list, every row checked now (a bad row is bad input, found before the run
    folder exists), or a stream's rows, drawn as the run takes them.

    Raises:
        ConfigError: the taskset is infinite and `-n` is not given (or is negative).
    """
    stream = env.row_stream("eval")
    if stream is not None and stream.infinite and ("num_examples" not in settings.model_fields_set or settings.num_examples < 0):
        raise ConfigError(f"{env.env_id}: its taskset is infinite: pass -n N, the number of examples to draw")
    rows = env.eval_inputs(settings.num_examples)
    if isinstance(rows, list):
        for position, row in enumerate(rows):
            env.to_task(row if "example_id" in row else {**row, "example_id": position})
    return rows


def check_server_saying(client: ClientConfig, model: str | None, notes: list[str]) -> tuple[str | None, list[str]]:
    """`check_server`, whose refusal also carries the run's notes (which model it would have run)."""
    try:
        return check_server(client, model)
    except ServerUnusable as exc:
        if not notes:
            raise
        raise ServerUnusable(f"{exc} ({'; '.join(notes)})") from None


def stopped_the_run(output: Mapping[str, Any]) -> bool:
    """Whether a saved rollout failed in a way that stops a run (its group is redone on resume, once fixed)."""
    return fatal_upstream_error(output.get("error")) is not None


class RunAborted(Exception):
    """A rollout failed in a way every other rollout would repeat (the key refused, no such model)."""


def stop_on_fatal(errors: list[Any], model: str) -> None:
    for error in errors:
        reason = fatal_upstream_error(error)
        if reason is not None:
            raise RunAborted(f"{reason} (calling model {model!r})")


async def run_eval(plan: EvalPlan, stopping: Stopping | None = None) -> tuple[GenerateMetadata, int, float]:
    """Run the eval under the live view (on stderr); the metadata, the rollouts run now, and the wall time.

    With `stopping` (installed), Ctrl-C and SIGTERM cancel the run. Raises `RunAborted` at the first fatal upstream error.
    """
    config = plan.config
    if stopping is not None:
        stopping.attach()
    examples = len(plan.rows) if isinstance(plan.rows, list) else plan.settings.num_examples
    view = LiveView(
        Console(stderr=True),
        examples * config.rollouts_per_example if examples >= 0 else None,
        plan.env.env_id,
        live=not plan.settings.debug,
    )

    def on_progress(outputs: list[Any], summary: Any) -> None:
        view.update(outputs, summary)
        stop_on_fatal([output.get("error") for output in outputs], plan.model)

    def on_retry(keys: list[RolloutKey], errors: list[Mapping[str, Any]]) -> None:
        view.retry(keys, errors)
        stop_on_fatal(list(errors), plan.model)

    start = time.perf_counter()
    try:
        with view.progress:
            result = await plan.env.generate(
                plan.rows,
                config.client_config,
                config.model,
                config.sampling_args,
                rollouts_per_example=config.rollouts_per_example,
                max_concurrent=config.max_concurrent,
                independent_scoring=config.independent_scoring,
                max_retries=config.max_retries,
                state_columns=config.state_columns or [],
                results=plan.writer,
                keep_outputs=False,
                on_progress=on_progress,
                on_retry=on_retry,
                executor=plan.executor,
            )
    finally:
        await plan.env.teardown()
    new = result["metadata"].get("num_rollouts", 0) - (view.first or 0)
    return result["metadata"], new, time.perf_counter() - start


def push_to_hub(results_path: Path, name: str) -> None:
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_json(str(results_path)).push_to_hub(name)


def _show_warnings() -> None:
    """v1's warnings (e.g. "no eval split") as ``v1 eval: warning: ...`` lines, unless logging is set up already."""
    if not logging.getLogger().handlers and not logging.getLogger("v1").handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("v1 eval: warning: %(message)s"))
        handler.setLevel(logging.WARNING)
        logging.getLogger("v1").addHandler(handler)


def configure_logging(settings: EvalSettings) -> None:
    """``-v``: v1 logs at DEBUG; ``-d`` or ``VF_LOG_LEVEL``: v1 logs at that level (default INFO) to stderr."""
    try:
        if settings.verbose:
            setup_logging("DEBUG")
        elif settings.debug or os.environ.get(LEVEL_VARIABLE):
            setup_logging()
    except ValueError as exc:
        raise ConfigError(f"environment variable {LEVEL_VARIABLE}: {exc}") from None


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]


def exit_status(metadata: GenerateMetadata, fail_on_error: float | None) -> tuple[ExitCode, str | None]:
    """`FAILED` when every rollout failed or the error rate is above `fail_on_error`, with the reason."""
    count, errors = metadata.get("num_rollouts", 0), metadata.get("num_errors", 0)
    if count and errors == count:
        return ExitCode.FAILED, f"every rollout failed ({errors} of {count})"
    if fail_on_error is not None and count and errors / count > fail_on_error:
        return (
            ExitCode.FAILED,
            f"error rate {errors / count:.1%} ({errors} of {count}) is above --fail-on-error {fail_on_error:g}",
        )
    return ExitCode.OK, None


def run(args: argparse.Namespace) -> int:
    console = Console()
    error_console = Console(stderr=True)

    def say(line: str) -> None:
        error_console.print(printable(line), markup=False, highlight=False, soft_wrap=True)

    _show_warnings()
    stopping = Stopping(DEFAULT_STOP_GRACE_S)
    with stopping.installed():
        try:
            plan = plan_run(args)
        except KeyboardInterrupt:
            say("v1 eval: interrupted before the run started; nothing ran")
            return ExitCode.INTERRUPTED
        except ServerUnusable as exc:
            say(f"v1 eval: error: {exc}")
            return ExitCode.ABORTED
        except Error as exc:
            say(f"v1 eval: error: {exc}")
            return ExitCode.BAD_INPUT
        writer, settings = plan.writer, plan.settings
        resume_hint = f"; saved rollouts are in {writer.path}, finish with --resume {writer.path}" if writer else ""
        stopping.grace_s, stopping.resume_hint = settings.stop_grace, resume_hint
        try:
            for note in plan.notes:
                say(f"v1 eval: {note}")
            for warning in plan.warnings:
                say(f"v1 eval: warning: {warning}")
            if settings.independent_scoring:
                console.print(plan.env.scoring_plan(True)["note"], markup=False, highlight=False)
            metadata, new, wall = loop_scope.run(run_eval(plan, stopping))
        except (KeyboardInterrupt, asyncio.CancelledError):
            stopping.wait_for_worker_threads()
            say(f"v1 eval: interrupted{resume_hint}")
            return ExitCode.INTERRUPTED
        except (RunAborted, RayActorsLost) as exc:
            say(f"v1 eval: error: {exc}; stopped the run{resume_hint}")
            return ExitCode.ABORTED
        except Error as exc:  # found only once running (a bad task row, an unsupported client type)
            say(f"v1 eval: error: {exc}")
            return ExitCode.BAD_INPUT
        except Exception as exc:
            traceback.print_exc()
            say(f"v1 eval: error: the run broke: {_first_line(exc)}{resume_hint}")
            return ExitCode.ABORTED
        finally:
            if plan.executor is not None:
                plan.executor.close()
    console.print(summary_table(metadata, wall, new))
    status, reason = exit_status(metadata, settings.fail_on_error)
    if writer is not None:
        console.print(
            f"results: {writer.results_path}  metadata: {writer.metadata_path}", markup=False, highlight=False, soft_wrap=True
        )
        name = plan.config.hf_hub_dataset_name
        if plan.config.save_to_hf_hub and name:
            try:
                push_to_hub(writer.results_path, name)
            except Exception as exc:  # any library or network failure: the results are safe on disk
                say(f"v1 eval: error: --save-to-hf-hub {name}: upload failed: {_first_line(exc)}")
                status = status or ExitCode.UPLOAD_FAILED
            else:
                console.print(f"pushed to the Hugging Face Hub as {name}", markup=False, highlight=False)
    if reason is not None:
        say(f"v1 eval: {reason}")
    return status


def main(argv: list[str] | None = None) -> int:
    """``vf-eval ...`` (the console script) and ``python -m v1.cli._eval ...``: `v1 eval` on its own."""
    return run_command(sys.modules[__name__], argv, prog="vf-eval")


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "DEFAULT_MODEL",
    "EvalPlan",
    "EvalSettings",
    "ExitCode",
    "add_parser",
    "apply_extra_env_kwargs",
    "configure_logging",
    "default_model",
    "eval_config",
    "check_resume",
    "exit_status",
    "load_settings",
    "main",
    "parse_overrides",
    "plan_run",
    "refuse_what_the_folder_would_change",
    "resolve_client",
    "run",
]
