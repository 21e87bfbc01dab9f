"""Strict pydantic config models and `module:object` references.

Every config model rejects unknown fields with the field's path, accepts a
positional source config plus keyword overrides, and builds the same object
from Python and from TOML (`from_toml`). Fields whose feature is not built yet
validate normally and raise `NotSupportedError` when used.
"""

from __future__ import annotations

import contextvars
import importlib
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

import tomllib
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from v1._util.loopback import connect_wait
from v1._util.sandbox_paths import control_character_problem, sandbox_path_problem
from v1._util.token_budgets import MAX_TOKEN_BUDGET
from v1.config._network import MAX_ENTRIES, HostRule, NetworkMode, network_from_access, parse_rule
from v1.errors import ConfigError, MissingKeyError
from v1.registry import BUILT_IN, CLIENT_TYPES, SANDBOX_BACKENDS

try:
    from typing import Self
except ImportError:  # pragma: no cover
    from typing_extensions import Self


OPENAI_BASE_URL_VAR = "OPENAI_BASE_URL"
"""When set, `ClientConfig`'s default URL (as for the OpenAI SDK); its key is then read from `OPENAI_API_KEY_VAR`."""
OPENAI_API_KEY_VAR = "OPENAI_API_KEY"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""An environment variable's name, as a program's `env` and a harness's `task_env` take them."""


def import_ref(ref: str, field: str = "ref") -> Any:
    """Import the object a ``"package.module:attr.path"`` reference names.

    Raises:
        ConfigError: naming `field`, when the reference is malformed or does not resolve.
    """
    if not isinstance(ref, str) or ref.count(":") != 1 or not all(ref.split(":")):
        raise ConfigError(f"field '{field}': {ref!r} is not a 'module:object' reference")
    module_name, attr_path = ref.split(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"field '{field}': cannot import module {module_name!r} of {ref!r}: {exc}") from exc
    for attr in attr_path.split("."):
        try:
            target = getattr(target, attr)
        except AttributeError:
            raise ConfigError(f"field '{field}': module {module_name!r} has no attribute {attr_path!r} (from {ref!r})") from None
    return target


def ensure_keys(keys: Iterable[str]) -> None:
    """Check that environment variables are set (and not empty), e.g. API keys a loader needs.

    Raises:
        MissingKeyError: listing every missing variable at once.
    """
    missing = [key for key in keys if not os.environ.get(key)]
    if missing:
        raise MissingKeyError(missing)


def resolve_callable(value: Any, field: str) -> Callable[..., Any]:
    """`value` itself when callable, else the callable its `module:object` reference names."""
    target = import_ref(value, field) if isinstance(value, str) else value
    if not callable(target):
        raise ConfigError(f"field '{field}': expected a callable or a 'module:object' reference, got {type(target).__name__}")
    return target


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file as a dict. Raises `ConfigError` naming the file when it is missing or invalid."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


def format_validation_error(error: ValidationError, where: str = "", prefix: str = "") -> str:
    """One line per problem: ``where: field 'prefix.a.b': message (got ...)``."""
    lines = []
    for problem in error.errors():
        # Union tags start with "_" (field names can't), and are not part of the user's path.
        parts = [str(part) for part in problem["loc"] if not str(part).startswith("_")]
        path = ".".join([prefix, *parts] if prefix else parts) or "<root>"
        message = problem["msg"]
        if problem["type"] == "extra_forbidden":
            message = "unknown field"
        got = "" if problem["type"] in ("extra_forbidden", "missing") else f" (got {problem.get('input')!r:.60})"
        lines.append(f"{where + ': ' if where else ''}field '{path}': {message}{got}")
    return "\n".join(lines)


_init_depth: contextvars.ContextVar[int] = contextvars.ContextVar("v1_config_init_depth", default=0)


if TYPE_CHECKING:
    # Type checkers give every subclass of a dataclass_transform metaclass a synthesized __init__, which would
    # hide Config's positional source argument; a named subclass of that metaclass keeps Config.__init__.
    from pydantic._internal._model_construction import ModelMetaclass

    class _KeepInit(ModelMetaclass): ...
else:
    _KeepInit = type(BaseModel)


class Config(BaseModel, metaclass=_KeepInit):
    """Base of every v1 config model: strict, positional source config + keyword overrides."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, validate_assignment=True, defer_build=True)

    def __init__(self, config: object | None = None, /, **data: object) -> None:
        # pydantic calls a custom __init__ for nested models too: only the outermost call converts errors.
        depth = _init_depth.get()
        token = _init_depth.set(depth + 1)
        try:
            super().__init__(**{**_as_mapping(config, type(self).__name__), **data})
        except ValidationError as exc:
            if depth:
                raise
            raise ConfigError(format_validation_error(exc, type(self).__name__)) from None
        finally:
            _init_depth.reset(token)

    @model_validator(mode="before")
    @classmethod
    def _default_nested_configs(cls, data: Any) -> Any:
        """An annotation-only field typed as a `Config` subclass defaults to that class."""
        if not isinstance(data, Mapping):
            return data
        missing: dict[str, Any] = {
            name: {}
            for name, field in cls.model_fields.items()
            if name not in data
            and field.is_required()
            and isinstance(field.annotation, type)
            and issubclass(field.annotation, Config)
        }
        return {**data, **missing} if missing else data

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, type(self).__name__)) from None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        """Like pydantic's, but a problem is a `ConfigError` naming the field path."""
        return cls._validate(obj, cls.__name__, *args, **kwargs)

    @classmethod
    def _validate(cls, obj: Any, where: str, *args: Any, prefix: str = "", **kwargs: Any) -> Self:
        # pydantic calls the custom __init__ from model_validate: raise its ValidationError as is, convert here.
        depth = _init_depth.get()
        token = _init_depth.set(depth + 1)
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            if depth:
                raise
            raise ConfigError(format_validation_error(exc, where, prefix)) from None
        finally:
            _init_depth.reset(token)

    @classmethod
    def from_section(cls, data: Any, where: str, path: str) -> Self:
        """Validate one section of a file; problems read ``where: field 'path.a.b': ...``.

        Args:
            data: the section's contents.
            where: the file (or other source) the section came from.
            path: the section's dotted path in that file, e.g. ``env.taskset``.
        """
        return cls._validate(data, where, prefix=path)

    @classmethod
    def from_config(cls, config: object | None = None, /, **data: object) -> Self:
        """`config` itself when it is already this class and there are no overrides, else a new one.

        A config of a subclass keeps its class (and its extra fields) under overrides.
        """
        if isinstance(config, cls) and not data:
            return config
        return (type(config) if isinstance(config, cls) else cls)(config, **data)

    @classmethod
    def with_defaults(cls, defaults: Mapping[str, Any], config: object | None = None) -> Self:
        """`defaults` with the fields set in `config` on top: what a `load_taskset(config)` returns.

        A field set in `config` replaces its default whole (tables are not merged); a field left
        unset keeps the default. ``TasksetConfig.with_defaults(DEFAULTS, config)``.

        Args:
            defaults: field values of this class, e.g. a taskset module's ``DEFAULTS``.
            config: ``None``, a config of this class or of a base class (only its explicitly set fields
                count), or a mapping.

        Raises:
            ConfigError: when `defaults` is not a mapping, `config` is another kind of config or
                not a mapping, or a field is unknown or invalid.
        """
        if not isinstance(defaults, Mapping):
            raise ConfigError(f"{cls.__name__}.with_defaults: defaults must be a mapping, got {type(defaults).__name__}")
        given: object | None = config
        if isinstance(config, BaseModel):
            if not (isinstance(config, cls) or issubclass(cls, type(config))):
                raise ConfigError(f"{cls.__name__}.with_defaults: expected a {cls.__name__}, got {type(config).__name__}")
            given = {name: getattr(config, name) for name in config.model_fields_set}
        return cls({**defaults, **_as_mapping(given, cls.__name__)})

    @classmethod
    def from_toml(cls, path: str | Path, section: str | Iterable[str] | None = None) -> Self:
        """Build from a TOML file, optionally from a (dotted) section of it.

        Raises:
            ConfigError: naming the file, the section and the field path.
        """
        path = Path(path)
        document: Any = read_toml(path)
        parts = section.split(".") if isinstance(section, str) else list(section or [])
        where = f"{path} [{'.'.join(parts)}]" if parts else str(path)
        for depth, part in enumerate(parts):
            if not isinstance(document, Mapping) or part not in document:
                raise ConfigError(f"{path}: section [{'.'.join(parts[: depth + 1])}] not found")
            document = document[part]
        return cls._validate(document, where)


def _as_mapping(config: object | None, target: str) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, BaseModel):
        return {name: getattr(config, name) for name in type(config).model_fields}
    if isinstance(config, Mapping):
        return dict(config)
    raise ConfigError(f"{target}: expected a config object or a mapping, got {type(config).__name__}")


class HandlerConfig(Config):
    """A lifecycle handler named in config: ``{fn = "pkg.mod:fn", weight = 1.0, priority = 0}``.

    A bare reference or callable is accepted wherever a `HandlerConfig` is.
    """

    fn: object
    weight: float | None = None
    priority: int = 0

    @model_validator(mode="before")
    @classmethod
    def _bare_reference(cls, value: Any) -> Any:
        return value if isinstance(value, Mapping) or isinstance(value, HandlerConfig) else {"fn": value}


class NetworkPolicy(Config):
    """Hosts a sandbox may reach (`allow`) and, among those, hosts it may not (`block`): each entry is
    `host[:port]` with an exact name, `*.domain`, `*` or an IP address (see `v1.config._network`).

    An empty `allow` reaches nothing but the rollout's endpoint (as `"none"` does).
    """

    allow: list[str] = []
    block: list[str] = []

    @field_validator("allow", "block")
    @classmethod
    def _entries(cls, entries: list[str]) -> list[str]:
        if len(entries) > MAX_ENTRIES:
            raise ValueError(f"at most {MAX_ENTRIES} entries, got {len(entries)}")
        return [str(parse_rule(entry)) for entry in entries]

    def allow_rules(self) -> list[HostRule]:
        return [parse_rule(entry) for entry in self.allow]

    def block_rules(self) -> list[HostRule]:
        return [parse_rule(entry) for entry in self.block]

    def first_not_within(self, wider: NetworkPolicy) -> str | None:
        """The first of this policy's `allow` entries that `wider`'s don't cover, or None when all are."""
        rules = wider.allow_rules()
        return next((str(rule) for rule in self.allow_rules() if not any(w.covers(rule) for w in rules)), None)


def _network_kind(value: Any) -> str:
    return "mode" if isinstance(value, str) else "policy"


Network = Annotated[
    Union[Annotated[NetworkMode, Tag("mode")], Annotated[NetworkPolicy, Tag("policy")]], Discriminator(_network_kind)
]
"""A `SandboxConfig.network` value: "none", "all" or a `NetworkPolicy`."""


SandboxScope = Literal["rollout", "group", "global"]


class SandboxConfig(Config):
    """Where a sandboxed program, toolset or user runs (see docs/sandbox.md).

    `backend` names a registered backend (`local`: bubblewrap on this machine;
    `prime`: prime-sandboxes); `prefer` lists backends to try first, in order,
    falling back to `backend` when one is not available here. The sandbox lives
    `timeout_minutes`, independent of the program's timeout, so scoring can still
    run in it. `scope` shares one sandbox per rollout, per group or per harness.
    """

    backend: str = "local"
    prefer: list[str] = []
    image: str | None = None
    start_command: str | None = None
    cpu_cores: float = Field(1, gt=0)
    memory_gb: float = Field(2, gt=0)
    disk_size_gb: float = Field(5, gt=0)
    gpu_count: int = Field(0, ge=0)
    network: Network = "none"
    """What the sandbox's commands may reach besides the rollout's endpoint: "none", "all", or a
    `NetworkPolicy` (`{allow = [...], block = [...]}`), enforced by an egress proxy outside the sandbox
    (see docs/sandbox.md, "Network policy"). The older `network_access = true | false` means "all" | "none"."""
    timeout_minutes: float = Field(60, gt=0)
    workdir: str = "/workspace"
    command_timeout: float = Field(300, gt=0)
    packages: list[str] = []
    install_timeout: float = Field(600, gt=0)
    setup_commands: list[str] = []
    setup_timeout: float = Field(300, gt=0)
    scope: SandboxScope = "rollout"
    env: dict[str, str] = {}
    labels: list[str] = []
    mounts: dict[str, str] = {}
    """Host directories shown read-only inside the sandbox, `{path inside: host path}` (local backend only):
    how an agent installed once on the host (see `harnesses/`) reaches every sandbox."""
    team_id: str | None = None
    """The team that owns the sandbox (prime backend only)."""
    advanced_configs: dict[str, Any] | None = None
    """The SDK's `AdvancedConfigs` fields, passed through as given (prime backend only)."""

    @model_validator(mode="before")
    @classmethod
    def _old_network_spelling(cls, data: Any) -> Any:
        return cls.network_spelled(data)

    @staticmethod
    def network_spelled(data: Any) -> Any:
        """A sandbox config's mapping with the older `network_access` bool spelled as `network`.

        Raises:
            ValueError: both are given and say different things.
        """
        return network_from_access(data)

    @property
    def network_access(self) -> bool:
        """Whether the sandbox shares the host's whole network (`network == "all"`): the older spelling."""
        return self.network == "all"

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, name: str) -> str:
        # imported and checked now, so a missing or broken plugin fails with the config, not in a rollout
        try:
            SANDBOX_BACKENDS.get(name)
        except ConfigError as exc:
            raise PydanticCustomError("unknown_name", str(exc)) from None
        return name

    @model_validator(mode="after")
    def _plain_paths(self) -> SandboxConfig:
        """Paths that reach `bwrap` are plain (see `v1._util.sandbox_paths`): refused, never cleaned."""
        problem = sandbox_path_problem(self.workdir)
        if problem is not None or self.workdir == "/":
            why = problem or "would hide the sandbox's whole system"
            raise ValueError(f"workdir must be an absolute path inside the sandbox; {self.workdir!r:.120} {why}")
        for inside, host in self.mounts.items():
            problem = sandbox_path_problem(inside) or sandbox_path_problem(host)
            if problem is not None:
                raise ValueError(f"mounts: {inside!r:.120} = {host!r:.120}: both paths must be absolute; one {problem}")
            if inside in ("/", "/usr", "/proc", "/dev", "/tmp", self.workdir):
                raise ValueError(f"mounts: {inside!r} would hide a directory the sandbox needs")
        for name, value in self.env.items():
            if not name or "=" in name or control_character_problem(name) is not None or "\0" in value:
                raise ValueError(f"env: {name!r:.120}: a name is non-empty with no '=' or control character; no value holds NUL")
        return self


class ArtifactConfig(Config):
    """A text or JSON file collected into `state["artifacts"][name]` after the program.

    A bare path string is accepted wherever an `ArtifactConfig` is. Relative paths
    are inside the program's working directory (the sandbox's `workdir`).
    """

    path: str
    name: str | None = None
    format: Literal["text", "json"] = "text"
    optional: bool = False
    max_bytes: int = Field(1_000_000, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _bare_path(cls, value: Any) -> Any:
        return {"path": value} if isinstance(value, str) else value

    @field_validator("path")
    @classmethod
    def _no_control_character(cls, path: str) -> str:
        problem = control_character_problem(path)
        if problem is not None:
            raise ValueError(f"artifact path {path[:120]!r} {problem}")
        return path

    @property
    def key(self) -> str:
        return self.name or self.path


class ProgramConfig(Config):
    """A harness program: at most one of `base`, `fn` or `command` (none means the base loop).

    `command` runs a process with the rollout's endpoint in its environment;
    `sandbox` (a `SandboxConfig`, or true for the harness's) runs a command, an
    `fn` reference (its package installed) or the base loop's tools in a sandbox.
    `files` map destination paths to contents, `dirs` destination paths to local
    directories, `setup` commands run before the program, `args` are appended to
    the command, `stdin` is written to it, and `artifacts` are collected after it.
    """

    base: bool = False
    fn: object | None = None
    command: list[str] | None = None
    args: list[str] = []
    files: dict[str, str] = {}
    dirs: dict[str, str] = {}
    env: dict[str, str] = {}
    setup: list[str] = []
    stdin: str | None = None
    artifacts: list[ArtifactConfig] = []
    bindings: dict[str, object] = {}
    sandbox: SandboxConfig | bool | None = None

    @model_validator(mode="after")
    def _one_form(self) -> ProgramConfig:
        forms = [
            name for name, on in (("base", self.base), ("fn", self.fn is not None), ("command", self.command is not None)) if on
        ]
        if len(forms) > 1:
            raise ValueError(f"a program is exactly one of base, fn or command; got {' and '.join(forms)}")
        if self.command is not None and not self.command:
            raise ValueError("command must name a program to run, e.g. ['my-agent', '--flag']")
        return self


def _program_form(value: Any) -> str:
    return "_config" if isinstance(value, (Mapping, ProgramConfig)) else "_callable"


ProgramSpec = Annotated[
    Union[Annotated[ProgramConfig, Tag("_config")], Annotated[Callable[..., Any], Tag("_callable")]],
    Discriminator(_program_form),
]
"""A program: a `ProgramConfig` (or mapping of one) or an in-process callable `(task, state)`."""

ProgramLike = Union[ProgramConfig, Mapping[str, Any], Callable[..., Any]]
"""What a `program=` argument takes: a `ProgramConfig`, a mapping of one, or a callable `(task, state)`."""

SystemPromptLike = Union[str, Mapping[str, Any], Sequence[Mapping[str, Any]]]
"""A system prompt: its text, one system message, or a list of them."""

RowSourceLike = Union[Iterable[Mapping[str, Any]], Callable[[], Iterable[Mapping[str, Any]]], str]
"""Task rows: an iterable of mappings (a `datasets.Dataset` too), a zero-argument loader (a generator function
too), or a `module:object` reference. A list, tuple or `Dataset` is loaded once and kept; anything else is
a stream, drawn on demand."""

SandboxLike = Union[SandboxConfig, Mapping[str, Any]]
"""A sandbox: a `SandboxConfig` or a mapping of one."""

SharedSandboxLike = Union[SandboxConfig, Mapping[str, Any], Literal["program"]]
"""A toolset's or user's sandbox: its own (`SandboxLike`), or `"program"` to share the program's."""

HandlerLike = Union[Callable[..., Any], str, HandlerConfig, Mapping[str, Any]]
"""One entry of a handler list (`rewards=[...]`): a callable, a `module:object` reference, or a `HandlerConfig` (or mapping)."""


class EndpointClientConfig(Config):
    """One upstream endpoint inside `ClientConfig.endpoint_configs`."""

    client_idx: int = 0
    api_key_var: str = "PRIME_API_KEY"
    api_base_url: str = "https://api.pinference.ai/api/v1"
    timeout: float = Field(3600.0, gt=0)
    max_connections: int = Field(28000, ge=1)
    max_keepalive_connections: int = Field(28000, ge=0)
    max_retries: int = Field(10, ge=0)
    extra_headers: dict[str, str] = {}


class ClientConfig(Config):
    """How to reach the upstream model: API type, URL, key variable, limits and retries."""

    client_idx: int = 0
    client_type: str = "openai_chat_completions"
    """A name in `v1.registry.CLIENT_TYPES`: a built-in `ClientType`, or a plugin's (entry-point group ``v1.clients``)."""
    preserve_all_thinking: bool = False
    preserve_thinking_between_tool_calls: bool = False
    renderer_model_name: str | None = None  # client_type "renderer": the tokenizer to render with (default: the model name)
    api_key_var: str = "PRIME_API_KEY"
    api_base_url: str = "https://api.pinference.ai/api/v1"
    endpoint_configs: list[EndpointClientConfig] = []
    timeout: float = Field(3600.0, gt=0)
    connect_timeout: float = Field(5.0, gt=0)
    max_connections: int = Field(28000, ge=1)
    max_keepalive_connections: int = Field(28000, ge=0)
    max_retries: int = Field(10, ge=0)
    max_response_bytes: int = Field(64 * 2**20, ge=1)
    """The most bytes one upstream answer may hold, whole or streamed (an answer is outside data)."""
    response_timeout: float = Field(3600.0, gt=0, allow_inf_nan=False)
    """The longest one upstream answer may take, from the request to its last byte (`timeout` bounds each wait for bytes)."""
    extra_headers: dict[str, str] = {}
    extra_headers_from_state: dict[str, str] = {}

    @model_validator(mode="after")
    def _openai_environment_defaults(self) -> ClientConfig:
        """As the OpenAI SDK does: `OPENAI_BASE_URL`, when set, is the default URL, and `OPENAI_API_KEY` then the default key.

        Written past validation so the fields stay unset (`model_fields_set`): a default, not a URL the user named.
        """
        url = os.environ.get(OPENAI_BASE_URL_VAR)
        if url and "api_base_url" not in self.model_fields_set:
            self.__dict__["api_base_url"] = url
            if "api_key_var" not in self.model_fields_set:
                self.__dict__["api_key_var"] = OPENAI_API_KEY_VAR
        return self

    @field_validator("client_type")
    @classmethod
    def _known_client_type(cls, name: str) -> str:
        # a built-in by name only (importing it imports its SDK, which waits for the first request);
        # a plugin imported and checked now, so a broken one fails with the config
        try:
            if name not in CLIENT_TYPES or CLIENT_TYPES.origin(name) != BUILT_IN:
                CLIENT_TYPES.get(name)
        except ConfigError as exc:
            raise PydanticCustomError("unknown_name", str(exc)) from None
        return name

    @property
    def connect_wait(self) -> float:
        """The connect timeout in force: `connect_timeout`, at least 60 s when `api_base_url` is on loopback.

        A loopback connect crosses no network (the kernel accepts or refuses at once), so a wait there
        means only that this process is starved of CPU; on a loaded machine a 5 s limit would fail calls
        to a healthy local server, and a refusal stays immediate.
        """
        return connect_wait(self.api_base_url, self.connect_timeout)

    def endpoint_variants(self) -> list[ClientConfig]:
        """One config per entry of `endpoint_configs` (just this one when there are none).

        Each is this config with the fields that endpoint sets; the fields it leaves out (its
        timeout, retries, limits, ...) are this config's, and its `extra_headers` add to these.
        """
        if not self.endpoint_configs:
            return [self]
        shared = self.model_dump(exclude={"endpoint_configs"})
        variants = []
        for endpoint in self.endpoint_configs:
            own = endpoint.model_dump(include=endpoint.model_fields_set)
            own["extra_headers"] = {**self.extra_headers, **endpoint.extra_headers}
            variants.append(ClientConfig({**shared, **own}))
        return variants


class MCPToolConfig(Config):
    """An MCP server as a tool source: a `command` started over stdio, or a streamable-HTTP `url`.

    In TOML: ``[[env.taskset.toolsets.tools]] command = "python", args = ["server.py"]``.
    """

    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    name: str | None = None
    startup_timeout: float = Field(60.0, gt=0)
    call_timeout: float = Field(300.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> MCPToolConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP tool needs exactly one of command (stdio) or url (streamable HTTP)")
        return self


ToolScope = Literal["rollout", "group", "global"]


class ToolsetConfig(Config):
    """A toolset in config: Python tools by `module:object` reference and MCP servers.

    `bindings` map ``"tool.argument"`` to a source path (``task.*``, ``state.*``,
    ``objects.*``, ``tools.*``) or a callable; `objects` map names to factories.
    """

    name: str | None = None
    tools: list[object] = []
    show: list[str] | None = None
    hide: list[str] | None = None
    bindings: dict[str, object] = {}
    objects: dict[str, object] = {}
    write: bool = False
    scope: ToolScope | None = None
    sandbox: object | None = None
    artifacts: list[ArtifactConfig] = []
    stops: list[HandlerConfig] = []
    setups: list[HandlerConfig] = []
    updates: list[HandlerConfig] = []
    cleanups: list[HandlerConfig] = []
    teardowns: list[HandlerConfig] = []


class UserConfig(Config):
    """A user simulator: `fn` answers between model turns (see `v1.User`)."""

    fn: object | None = None
    bindings: dict[str, object] = {}
    objects: dict[str, object] = {}
    scope: ToolScope | None = None
    model: str | None = None
    sandbox: object | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare_reference(cls, value: Any) -> Any:
        return value if isinstance(value, (Mapping, UserConfig)) else {"fn": value}


SystemPromptStrategy = Literal["HT", "TH", "H_OR_T", "T_OR_H", "H", "T", "REJECT"]


class _HandlerLists(Config):
    stops: list[HandlerConfig] = []
    setups: list[HandlerConfig] = []
    updates: list[HandlerConfig] = []
    metrics: list[HandlerConfig] = []
    rewards: list[HandlerConfig] = []
    advantages: list[HandlerConfig] = []
    cleanups: list[HandlerConfig] = []


class ScoringConfig(Config):
    """Re-weight or skip one reward/metric by name: ``[env.taskset.scoring.NAME] weight = 0.5`` or ``skip = true``."""

    weight: float | None = None
    skip: bool = False


class TasksetConfig(_HandlerLists):
    """Config of a `Taskset`. Subclass it to add environment-specific fields.

    `scoring` re-weights or skips rewards and metrics by name, class-defined ones included.
    """

    taskset_id: str | None = None
    system_prompt: object | None = None
    source: object | None = None
    eval_source: object | None = None
    infinite: bool = False
    """The stream sources (generators, loaders returning iterators) never end: `v1 eval` needs `-n`,
    `Env.evaluate` needs `num_examples`, and `shuffle` needs a buffer. A list source is always finite."""
    user: UserConfig | None = None
    toolsets: list[ToolsetConfig] = []
    scoring: dict[str, ScoringConfig] = {}
    artifacts: list[ArtifactConfig] = []
    gold: object | None = None
    """The gold solution `v1 validate` runs in place of the policy: a program (a callable `(task, state)`,
    a `"module:fn"` reference, or a program table such as a command applying the task's patch)."""
    validate_threshold: float | None = Field(None, allow_inf_nan=False)
    """The reward at which a gold run passes `v1 validate` (None: the most the rewards can give, the sum of
    their positive weights)."""


MAX_STAGE_SECONDS = 7 * 24 * 3600.0
"""The longest stage timeout a harness takes: one week."""
DEFAULT_MAX_TOOL_OUTPUT = 20_000
"""Characters of one tool result the model sees by default; the rest is cut (see `HarnessConfig.max_tool_output`)."""
TokenBudget = Annotated[int, Field(strict=True, ge=1, le=MAX_TOKEN_BUDGET)]
"""A token count a rollout may use: a positive integer (never a bool, a float or a string)."""
StageSeconds = Annotated[float, Field(strict=True, gt=0, le=MAX_STAGE_SECONDS, allow_inf_nan=False)]
"""A stage's time limit in seconds: positive, finite, at most a week."""


class HarnessConfig(_HandlerLists):
    """Config of a `Harness`. Subclass it to add harness-specific fields.

    Budgets per rollout (each ends the rollout with its own stop condition, never an error):
    `max_input_tokens`, `max_output_tokens` and `max_total_tokens` sum the recorded usage of the
    program's model calls; `setup_timeout_seconds`, `timeout_seconds` (the program) and
    `scoring_timeout_seconds` bound the rollout's stages; `max_tool_output` is how many characters
    of one tool result the model sees.
    """

    program: ProgramSpec | None = None
    task_programs: dict[str, ProgramSpec] = {}
    """Programs a task row may choose by name (`{"program": "name"}`): the harness's opt-in to rows
    choosing a program. A row never names a command, `fn` or sandbox itself."""
    task_env: list[str] = []
    """Environment variables a task row's `program.env` may set, each by its exact name (no
    wildcard): the harness's opt-in to rows passing data through the environment. Any other name
    from a row fails that rollout."""
    system_prompt: object | None = None
    system_prompt_strategy: SystemPromptStrategy = "HT"
    sandbox: SandboxConfig | None = None
    client: ClientConfig | None = None
    model: str | None = None
    sampling_args: dict[str, object] = {}
    max_turns: int = Field(10, ge=1)
    timeout_seconds: StageSeconds | None = None
    setup_timeout_seconds: StageSeconds | None = None
    scoring_timeout_seconds: StageSeconds | None = None
    max_seq_len: int | None = Field(None, ge=1)
    max_total_completion_tokens: int | None = Field(None, ge=1)
    max_input_tokens: TokenBudget | None = None
    max_output_tokens: TokenBudget | None = None
    max_total_tokens: TokenBudget | None = None
    max_tool_output: int = Field(DEFAULT_MAX_TOOL_OUTPUT, strict=True, ge=1, le=MAX_TOKEN_BUDGET)
    toolsets: list[ToolsetConfig] = []
    user: UserConfig | None = None

    @field_validator("task_env")
    @classmethod
    def _task_env_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not ENV_NAME.fullmatch(name):
                raise PydanticCustomError(
                    "task_env_name", f"{name[:80]!r} is not a variable name; name each variable a row may set (no wildcard)"
                )
        return names


class EnvConfig(Config):
    """The loader envelope: `[env.taskset]` and `[env.harness]` of a TOML environment."""

    taskset: TasksetConfig
    harness: HarnessConfig

    KNOWN_SECTIONS: ClassVar[tuple[str, ...]] = ("taskset", "harness")


__all__ = [
    "ClientConfig",
    "Config",
    "EndpointClientConfig",
    "EnvConfig",
    "HandlerConfig",
    "HarnessConfig",
    "MCPToolConfig",
    "Network",
    "NetworkPolicy",
    "ProgramConfig",
    "SandboxConfig",
    "SandboxScope",
    "ArtifactConfig",
    "ScoringConfig",
    "SystemPromptStrategy",
    "TasksetConfig",
    "ToolScope",
    "ToolsetConfig",
    "UserConfig",
    "ensure_keys",
    "format_validation_error",
    "import_ref",
    "resolve_callable",
    "HandlerLike",
    "ProgramLike",
    "RowSourceLike",
    "SandboxLike",
    "SharedSandboxLike",
    "SystemPromptLike",
]
