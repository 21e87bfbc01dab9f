"""Loading an `Env`: from a Python module, or from a TOML file alone.

A module defines an environment with a root loader, or with child loaders:

    def load_environment(config: MyEnvConfig) -> vf.Env: ...          # root
    def load_taskset(config: MyTasksetConfig) -> vf.Taskset: ...      # children: the annotations
    def load_harness(config: MyHarnessConfig) -> vf.Harness: ...      # are the [env.taskset] /
                                                                      # [env.harness] schemas

A TOML file names a module (``[env] id = "..."``) or defines everything itself:
sections ``[env.taskset]`` and ``[env.harness]`` with an optional ``loader``
(a `Taskset`/`Harness` class or a loader function, by ``"module:object"`` ref),
sources, handlers (``[[env.taskset.rewards]] fn = "..." weight = ...``) and
``[env.taskset.scoring.NAME]`` overrides.

Where ``"module:object"`` refs are found: installed packages and ``PYTHONPATH``
first, then the folder of the TOML file, then the current directory (both are
appended to `sys.path`, so a local file never shadows an installed module). An
environment given as a folder (``v1 eval ./my_env``) is the package of that name,
imported from the folder's parent.

Every loaded `Env` records its `EnvSource` (what it was loaded from, and the overrides), so
that a remote executor's workers can load the same environment on their own machines.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from v1.config import Config, EnvConfig, HarnessConfig, TasksetConfig, import_ref, read_toml
from v1.env._env import Env
from v1.errors import ConfigError, UnknownNameError
from v1.harness import Harness
from v1.registry import HARNESSES, TASKSETS, Registry
from v1.rollout import LIST_KINDS
from v1.taskset import Taskset

if TYPE_CHECKING:
    from datasets import Dataset

ENV_KEYS = ("id", "name", "pass_threshold", "taskset", "harness")
TOP_LEVEL_KEYS = ("env", "eval")


@dataclass(frozen=True)
class EnvSource:
    """What an `Env` was loaded from: an environment id/module or an absolute TOML path, and the overrides.

    Args:
        env: what `load_environment` takes: a module name or id, or a ``.toml`` path.
        taskset: fields overriding the environment's ``[env.taskset]``.
        harness: fields overriding the environment's ``[env.harness]``.
        env_kwargs: settings applied after loading with `Env.set_kwargs` (``v1 eval -x``).
    """

    env: str
    taskset: Mapping[str, Any] = dataclass_field(default_factory=dict)
    harness: Mapping[str, Any] = dataclass_field(default_factory=dict)
    env_args: Mapping[str, Any] = dataclass_field(default_factory=dict)
    """Keyword arguments of a classic `load_environment(**kwargs)`."""
    env_kwargs: Mapping[str, Any] = dataclass_field(default_factory=dict)
    """Settings applied with `set_kwargs` after loading (`v1 eval -x`)."""

    def load(self) -> Env:
        """Load the environment again (e.g. on a Ray worker)."""
        env = load_environment(self.env, taskset=dict(self.taskset), harness=dict(self.harness), env_args=dict(self.env_args))
        if self.env_kwargs:
            env.set_kwargs(**self.env_kwargs)
        return env


def add_import_roots(*folders: str | Path) -> None:
    """Let refs and environment ids resolve against `folders`: each is appended to `sys.path` once.

    Appended, not prepended: installed packages and ``PYTHONPATH`` keep precedence.
    """
    added = False
    for folder in folders:
        entry = str(Path(folder).resolve())
        if entry not in sys.path:
            sys.path.append(entry)
            added = True
    if added:
        importlib.invalidate_caches()


def environment_config_file(target: str) -> str:
    """`target`, or the config file of the environment folder it names: ``./my_env`` -> ``my_env/my_env.toml`` when that exists.

    So ``v1 eval ./my_env`` runs the folder's config (its ``[eval]`` and ``[env]`` settings), as
    ``v1 eval my_env/my_env.toml`` does; a folder without one stays a package to import.
    """
    folder = Path(target)
    if ("/" in target or target.startswith(".")) and folder.is_dir():
        config = folder / f"{folder.resolve().name}.toml"
        if config.is_file():
            return str(config)
    return target


def import_env_module(env_id: str) -> Any:
    """The module of an environment id: ``name``, ``owner/name``, dashes for underscores, or ``tasksets.name``.

    A path to a folder (``./my_env``) names the package of that name, imported from the folder's parent;
    other ids are looked up on `sys.path` and then in the current directory.

    Raises:
        ConfigError: no candidate module exists, or the module fails to import.
    """
    folder = Path(env_id)
    if ("/" in env_id or env_id.startswith(".")) and folder.is_dir():
        if not (folder / "__init__.py").is_file():
            raise ConfigError(f"environment {env_id!r}: the folder has no __init__.py; an environment folder is a Python package")
        add_import_roots(folder.resolve().parent)
        env_id = folder.resolve().name
    else:
        add_import_roots(Path.cwd())
    name = env_id.split("/")[-1]
    candidates = list(dict.fromkeys([name, name.replace("-", "_"), f"tasksets.{name.replace('-', '_')}"]))
    for candidate in candidates:
        try:
            return importlib.import_module(candidate)
        except ModuleNotFoundError as exc:
            if exc.name and (candidate == exc.name or candidate.startswith(exc.name + ".")):
                continue
            raise ConfigError(f"environment {env_id!r}: module {candidate!r} failed to import: {exc}") from exc
        except Exception as exc:
            raise ConfigError(
                f"environment {env_id!r}: module {candidate!r} failed to import: {type(exc).__name__}: {exc}"
            ) from exc
    tried = f"no module {' or '.join(repr(c) for c in candidates)}"
    raise UnknownNameError("environment", env_id, TASKSETS.names(), detail=tried)


def config_type_of(loader: Callable[..., Any], base: type[Config]) -> type[Config]:
    """The `Config` subclass a loader's first parameter is annotated with (`base` without annotation)."""
    try:
        parameters = list(inspect.signature(loader).parameters.values())
    except (TypeError, ValueError):
        return base
    if not parameters:
        raise ConfigError(f"{_name(loader)} takes no config argument; define it as {_name(loader)}(config: {base.__name__})")
    try:
        hints = typing.get_type_hints(loader)
    except Exception:
        hints = {}
    annotation = hints.get(parameters[0].name)
    options = typing.get_args(annotation) if typing.get_args(annotation) else (annotation,)
    for option in options:
        if isinstance(option, type) and issubclass(option, base):
            return option
    if annotation is not None and annotation is not inspect.Parameter.empty:
        raise ConfigError(
            f"{_name(loader)}: its config parameter must be annotated with a {base.__name__} subclass, got {annotation!r}"
        )
    return base


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', type(obj).__name__)}"


def _build(target: Any, base: type[Config], product: type, data: Any, where: str, path: str) -> Any:
    """A taskset or harness from a class (`cls(config=...)`) or a loader function (`fn(config)`)."""
    if isinstance(data, Config) and isinstance(data, base):
        data = data.model_dump(exclude_unset=True)
    if isinstance(target, type) and issubclass(target, product):
        config = target.config_type.from_section(data, where, path)  # type: ignore[attr-defined]
        return target(config=config)  # type: ignore[call-arg]
    if not callable(target):
        raise ConfigError(f"{where}: field '{path}.loader': expected a {product.__name__} class or a loader function")
    config = config_type_of(target, base).from_section(data, where, path)
    built = target(config)
    if not isinstance(built, product):
        raise ConfigError(f"{where}: {_name(target)} returned {type(built).__name__}, expected a {product.__name__}")
    return built


def _section(data: Any, where: str, path: str) -> dict[str, Any]:
    if data is None:
        return {}
    if isinstance(data, Config):
        return data.model_dump(exclude_unset=True)
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: field '{path}': expected a table (mapping), got {type(data).__name__}")
    return dict(data)


def _check_refs(section: Mapping[str, Any], where: str, path: str) -> None:
    """Import every `module:object` ref of a section now, so a bad one is reported with its full path."""

    def check(value: Any, field: str) -> None:
        if isinstance(value, str):
            try:
                import_ref(value, field)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None

    if isinstance(section.get("loader"), str):
        try:
            loader_of(section["loader"], path)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    for key in ("source", "eval_source"):
        check(section.get(key), f"{path}.{key}")
    for list_name in LIST_KINDS:
        for index, entry in enumerate(section.get(list_name) or []):
            check(entry.get("fn") if isinstance(entry, Mapping) else entry, f"{path}.{list_name}[{index}].fn")
    program = section.get("program")
    if isinstance(program, Mapping):
        check(program.get("fn"), f"{path}.program.fn")
    for index, toolset in enumerate(section.get("toolsets") or []):
        if isinstance(toolset, Mapping):
            for tool_index, tool in enumerate(toolset.get("tools") or []):
                check(tool, f"{path}.toolsets[{index}].tools[{tool_index}]")


LOADERS: dict[str, Registry[Any]] = {"env.taskset": TASKSETS, "env.harness": HARNESSES}
"""The registry a section's ``loader = "NAME"`` is looked up in."""


def loader_of(value: Any, path: str) -> Any:
    """The loader of ``[env.taskset]``/``[env.harness]`` (`path`): a registered name (`v1.registry.TASKSETS`,
    `HARNESSES`, plugins included) or a ``module:object`` reference.

    Raises:
        ConfigError: naming the field, for an unknown name or a reference that does not resolve.
    """
    field = f"{path}.loader"
    if not isinstance(value, str) or ":" in value:
        return import_ref(value, field)
    try:
        return LOADERS[path].get(value)
    except UnknownNameError as exc:
        raise ConfigError(f"field '{field}': {exc}; or a 'module:object' reference") from None
    except ConfigError as exc:
        raise ConfigError(f"field '{field}': {exc}") from None


def _located(exc: ConfigError, where: str) -> ConfigError:
    message = str(exc)
    for part in ("taskset", "harness"):
        message = message.replace(f"field '{part}.", f"field 'env.{part}.")
    return ConfigError(message if message.startswith(where) else f"{where}: {message}")


def is_classic_loader(loader: Any) -> bool:
    """Whether `loader` is a seed-style `load_environment(**kwargs)`: its first parameter (if any)
    takes no config (it has a default, is keyword-only or is `**kwargs`)."""
    try:
        parameters = list(inspect.signature(loader).parameters.values())
    except (TypeError, ValueError):
        return False
    if not parameters:
        return True
    first = parameters[0]
    return first.kind in (first.KEYWORD_ONLY, first.VAR_KEYWORD) or first.default is not first.empty


def _load_classic(root: Any, env_args: Mapping[str, Any], taskset: Any, harness: Any, where: str) -> Env:
    """A classic environment from `root(**env_args)`, with `harness` fields overriding its harness's config."""
    if taskset:
        raise ConfigError(
            f"{where}: {_name(root)} builds a classic environment; pass its arguments as env_args, not taskset fields"
        )
    try:
        env = root(**env_args)
    except TypeError as exc:
        if env_args and "argument" in str(exc):
            raise ConfigError(f"{where}: {_name(root)} refused env_args {sorted(env_args)}: {exc}") from None
        raise
    if not isinstance(env, Env):
        raise ConfigError(f"{where}: {_name(root)} returned {type(env).__name__}, expected a v1.Environment")
    if harness:
        section = _section(harness, where, "env.harness")
        config = env.harness.config
        env.harness.config = type(config).from_section({**config.model_dump(exclude_unset=True), **section}, where, "env.harness")
    return env


def load_module_environment(
    module: Any, taskset: Any = None, harness: Any = None, where: str | None = None, env_args: Mapping[str, Any] | None = None
) -> Env:
    """An environment from a module's `load_environment` (root: a config loader, or a classic
    `load_environment(**env_args)`) or `load_taskset`/`load_harness` (children)."""
    where = where or module.__name__
    root = getattr(module, "load_environment", None)
    if root is not None and is_classic_loader(root):
        env: Env = _load_classic(root, dict(env_args or {}), taskset, harness, where)
    elif env_args:
        raise ConfigError(
            f"{where}: env_args {sorted(env_args)} given, but its loader takes a config; use taskset/harness fields"
        )
    elif root is not None:
        config_type = config_type_of(root, EnvConfig)
        config = config_type.from_section(
            {"taskset": _section(taskset, where, "env.taskset"), "harness": _section(harness, where, "env.harness")}, where, "env"
        )
        env = root(config)
        if not isinstance(env, Env):
            raise ConfigError(f"{where}: {_name(root)} returned {type(env).__name__}, expected a v1.Environment")
    else:
        load_taskset = getattr(module, "load_taskset", None)
        if load_taskset is None:
            raise ConfigError(f"{where}: module {module.__name__!r} defines neither load_environment nor load_taskset")
        built_taskset = _build(
            load_taskset, TasksetConfig, Taskset, _section(taskset, where, "env.taskset"), where, "env.taskset"
        )
        load_harness = getattr(module, "load_harness", Harness)
        built_harness = _build(
            load_harness, HarnessConfig, Harness, _section(harness, where, "env.harness"), where, "env.harness"
        )
        env = Env(built_taskset, built_harness)
    env.module = module.__name__
    env.source = EnvSource(module.__name__, dict(taskset or {}), dict(harness or {}), dict(env_args or {}))
    return env


def load_toml_environment(path: str | Path, taskset: Any = None, harness: Any = None) -> Env:
    """An `Env` from the ``[env]`` section of a TOML file; `taskset`/`harness` mappings override its fields.

    Raises:
        ConfigError: one line naming the file, the field path and what was expected.
    """
    where = str(path)
    document = read_toml(path)
    folder = Path(path).parent
    # a config file inside its environment's package (as `v1 init` makes it): `id` names that package
    package_parent = [folder.resolve().parent] if (folder / "__init__.py").is_file() else []
    add_import_roots(folder, *package_parent, Path.cwd())
    unknown = sorted(set(document) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise ConfigError(f"{where}: field '{unknown[0]}': unknown section; a config file has [env] and optionally [eval]")
    env_table = document.get("env")
    if not isinstance(env_table, Mapping):
        raise ConfigError(f'{where}: no [env] section; define [env.taskset] (and [env.harness]) or set [env] id = "module"')
    unknown = sorted(set(env_table) - set(ENV_KEYS))
    if unknown:
        raise ConfigError(f"{where}: field 'env.{unknown[0]}': unknown field; expected one of {', '.join(ENV_KEYS)}")
    taskset_data = {**_section(env_table.get("taskset"), where, "env.taskset"), **_section(taskset, where, "env.taskset")}
    harness_data = {**_section(env_table.get("harness"), where, "env.harness"), **_section(harness, where, "env.harness")}
    env_id, name = env_table.get("id"), env_table.get("name")
    for field, value in (("id", env_id), ("name", name)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where}: field 'env.{field}': expected a string, got {value!r}")
    threshold = env_table.get("pass_threshold", 0.5)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise ConfigError(f"{where}: field 'env.pass_threshold': expected a number, got {threshold!r}")
    _check_refs(taskset_data, where, "env.taskset")
    _check_refs(harness_data, where, "env.harness")
    try:
        if env_id is not None:
            for part, data in (("taskset", taskset_data), ("harness", harness_data)):
                if "loader" in data:
                    raise ConfigError(f"field 'env.{part}.loader': not allowed with [env] id (the module's loaders are used)")
            env = load_id_environment(env_id, taskset_data, harness_data, where)
        else:
            taskset_loader = loader_of(taskset_data.pop("loader"), "env.taskset") if "loader" in taskset_data else Taskset
            harness_loader = loader_of(harness_data.pop("loader"), "env.harness") if "loader" in harness_data else Harness
            built_taskset = _build(taskset_loader, TasksetConfig, Taskset, taskset_data, where, "env.taskset")
            built_harness = _build(harness_loader, HarnessConfig, Harness, harness_data, where, "env.harness")
            env = Env(built_taskset, built_harness)
            env.module = _module_of(taskset_loader, built_taskset.config)
    except ConfigError as exc:
        raise _located(exc, where) from None
    env.pass_threshold = float(threshold)
    if name or env_id:
        env.env_id = name or env_id.split("/")[-1]  # type: ignore[union-attr]
    env.source = EnvSource(str(Path(path).resolve()), dict(taskset or {}), dict(harness or {}))
    return env


def _module_of(loader: Any, config: TasksetConfig) -> str | None:
    if loader is not Taskset:
        return getattr(loader, "__module__", None)
    source = config.source
    if isinstance(source, str) and ":" in source:
        return source.split(":")[0]
    return getattr(source, "__module__", None)


EXAMPLE_DATASET_NAMES = {"math": "competition_math"}
"""verifiers' example dataset names whose bundled taskset here is named otherwise."""


def load_example_dataset(name: str, split: str | None = "train", n: int | None = None, seed: int = 0) -> Dataset:
    """The rows of a bundled taskset (``gsm8k``, ``reverse_text``, ...) as a `datasets.Dataset`.

    Args:
        name: an environment id, as for `load_environment`.
        split: ``train`` (the taskset's rows) or ``eval`` (its eval rows; ``test`` is the same).
        n: keep only the first `n` rows (after shuffling with `seed`, as verifiers does).
        seed: the shuffle seed when `n` is given.

    Raises:
        ConfigError: unknown environment or split.
    """
    split = "eval" if split == "test" else split or "train"
    if split not in ("train", "eval"):
        raise ConfigError(f"load_example_dataset: split must be 'train', 'eval' or 'test', got {split!r}")
    from datasets import Dataset  # imported on use: it takes seconds

    name = EXAMPLE_DATASET_NAMES.get(name, name)
    # a bundled taskset first: an environment module of the same name (verifiers' gsm8k) may be the caller
    taskset = (load_registered_taskset(name) if name in TASKSETS else load_environment(name)).taskset
    dataset = Dataset.from_list(taskset.rows() if split == "train" else taskset.eval_rows())
    if n is not None and n >= 0:
        dataset = dataset.shuffle(seed=seed).select(range(min(n, len(dataset))))
    return dataset


def load_environment(env: str | Path, /, **overrides: Any) -> Env:
    """Load an environment by module/id or from a TOML file.

    Examples: ``load_environment("reverse_text")``, ``load_environment("configs/reverse_text.toml")``,
    ``load_environment("my_pkg.my_env", harness={"max_turns": 3})``.

    Args:
        env: a module name or environment id (``name``, ``owner/name``), or a ``.toml`` path.
        **overrides: ``taskset={...}`` and ``harness={...}``: fields that override the environment's;
            any other keyword (or ``env_args={...}``) goes to a classic ``load_environment(**kwargs)``,
            as the seed's ``load_environment(env_id, **kwargs)``.

    Raises:
        ConfigError: unknown id, bad file, or a field that does not validate.
    """
    env_args = {
        **(overrides.pop("env_args", None) or {}),
        **{k: overrides.pop(k) for k in set(overrides) - {"taskset", "harness"}},
    }
    if str(env).endswith(".toml") or isinstance(env, Path):
        if env_args:
            raise ConfigError(
                f"load_environment: {str(env)!r} is a TOML file: pass taskset={{...}} and harness={{...}}, not {sorted(env_args)}"
            )
        return load_toml_environment(env, overrides.get("taskset"), overrides.get("harness"))
    return load_id_environment(str(env), overrides.get("taskset"), overrides.get("harness"), env_args=env_args)


def load_id_environment(
    env_id: str, taskset: Any = None, harness: Any = None, where: str | None = None, env_args: Mapping[str, Any] | None = None
) -> Env:
    """An environment by id: its module (`import_env_module`), else the taskset registered under that name
    (`v1.registry.TASKSETS`, plugins included) with the base `Harness`.

    Raises:
        UnknownNameError: neither a module nor a registered taskset has that name.
    """
    try:
        module = import_env_module(env_id)
    except UnknownNameError:
        if env_id not in TASKSETS:
            raise
        if env_args:
            raise ConfigError(f"environment {env_id!r} is a registered taskset: it takes taskset fields, not env_args") from None
        return load_registered_taskset(env_id, taskset, harness, where)
    return load_module_environment(module, taskset, harness, where, env_args)


def load_registered_taskset(name: str, taskset: Any = None, harness: Any = None, where: str | None = None) -> Env:
    """An `Env` of the taskset registered as `name` (a plugin's, say) with the base `Harness`.

    Raises:
        ConfigError: unknown name, a plugin that fails to load, or a field that does not validate.
    """
    where = where or f"taskset {name!r}"
    taskset_data, harness_data = _section(taskset, where, "env.taskset"), _section(harness, where, "env.harness")
    loader = TASKSETS.get(name)
    env = Env(
        _build(loader, TasksetConfig, Taskset, taskset_data, where, "env.taskset"),
        _build(Harness, HarnessConfig, Harness, harness_data, where, "env.harness"),
    )
    env.module = getattr(loader, "__module__", None)
    env.env_id = name
    env.source = EnvSource(name, dict(taskset or {}), dict(harness or {}))
    return env


__all__ = [
    "EnvSource",
    "add_import_roots",
    "environment_config_file",
    "config_type_of",
    "import_env_module",
    "load_environment",
    "load_example_dataset",
    "load_id_environment",
    "load_module_environment",
    "load_registered_taskset",
    "loader_of",
    "load_toml_environment",
]
