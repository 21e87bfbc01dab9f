"""`EnvGroup`: several environments behind one `Env` interface, for multi-task training and eval.

Every row of the group's datasets carries ``info["env_id"]``, and every call that takes rows
(`run_group`, `rollout`, `generate`, ...) sends each row to the environment that id names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from v1.classic._environment import Environment
from v1.clients import Client
from v1.env import HandlerRubric
from v1.errors import ConfigError
from v1.harness import Harness
from v1.rollout import Handler, State, Task, thaw
from v1.taskset import Taskset
from v1.types import Response, SamplingArgs

if TYPE_CHECKING:
    from datasets import Dataset


def _env_id_of(row: Mapping[str, Any] | Task) -> Any:
    info = row.get("info") or {}
    return info.get("env_id") if isinstance(info, Mapping) else None


class EnvGroup(Environment):
    """Environments of either kind (`Env` pairs, classic envs, other groups) mixed into one,
    routed by ``info["env_id"]``.

    Every row of the group's datasets carries ``info["env_id"]`` (and an ``example_id`` prefixed
    with it); each task, group and rollout runs in the environment its row names, with that
    environment's taskset, harness, tools and scoring. `generate`, `evaluate`, results,
    `--resume`, Ray executors and the trainer's `run_group` all route the same way. Defaults
    not given to `generate` (client, model) come from the first environment that has them.

    Args:
        envs: the environments.
        env_names: their ids in the group; must be unique. By default each env's `env_id`, or
            ``env_0``, ``env_1``, ... (the seed's default) when two envs share an id.
        env_id: the group's own id.
        pass_threshold: the reward at which a rollout counts as passed for pass@k.
    """

    def __init__(
        self,
        envs: Sequence[Environment],
        env_names: Sequence[str] | None = None,
        *,
        env_id: str = "env_group",
        pass_threshold: float = 0.5,
    ) -> None:
        if not envs:
            raise ConfigError("EnvGroup needs at least one environment")
        for env in envs:
            if not isinstance(env, Environment):
                raise ConfigError(f"EnvGroup: expected v1 environments, got {type(env).__name__}")
        names = list(env_names) if env_names is not None else [env.env_id for env in envs]
        if env_names is None and len(set(names)) != len(names):
            names = [f"env_{index}" for index in range(len(envs))]  # the seed's default names
        if len(names) != len(envs) or len(set(names)) != len(names):
            raise ConfigError(f"EnvGroup: env_names must name each environment once, got {names}")
        self.envs: dict[str, Environment] = dict(zip(names, envs))
        self.env_names = names
        self.init_run_fields(
            env_id=env_id,
            env_args={name: env.env_args for name, env in self.envs.items()},
            pass_threshold=pass_threshold,
            module=None,
        )
        self.rubric = HandlerRubric(self.scoring_handlers)
        """Every environment's rewards and metrics, as one rubric (each rollout is scored by its own environment)."""

    @property
    def env_map(self) -> dict[str, Environment]:
        """The environments by name (the reference's name for `envs`)."""
        return self.envs

    def scoring_handlers(self) -> list[Handler]:
        """Every environment's reward and metric handlers, in environment order."""
        return [handler for env in self.envs.values() for handler in env.scoring_handlers()]

    @property
    def harness(self) -> Harness:  # type: ignore[override]
        """The first environment's harness: where defaults (client, model, sampling args) come from."""
        return next(iter(self.envs.values())).harness

    async def teardown(self) -> None:
        """Each environment's teardown, in order."""
        for env in self.envs.values():
            await env.teardown()

    @property
    def taskset(self) -> Taskset:  # type: ignore[override]
        raise ConfigError(f"EnvGroup {self.env_id} has one taskset per environment: use env_for(row).taskset or to_task(row)")

    def env_for(self, row: Mapping[str, Any] | Task) -> Environment:
        """The environment a row belongs to (its ``info["env_id"]``).

        Raises:
            ConfigError: when the row names no environment of the group.
        """
        env_id = _env_id_of(row)
        if env_id not in self.envs:
            raise ConfigError(
                f"EnvGroup {self.env_id}: row {row.get('example_id')!r} has info.env_id {env_id!r}; expected one of {list(self.envs)}"
            )
        return self.envs[env_id]

    def to_task(self, row: Mapping[str, Any] | Task | str) -> Task:
        if isinstance(row, str):
            raise ConfigError(f"EnvGroup {self.env_id}: a bare prompt names no environment; pass a row with info.env_id")
        return self.env_for(row).to_task(row)

    @staticmethod
    def _tag(rows: list[dict[str, Any]], env_id: str) -> list[dict[str, Any]]:
        tagged = []
        for row in rows:
            row = thaw(row)
            row["info"] = {**(row.get("info") or {}), "env_id": env_id}
            row["example_id"] = f"{env_id}/{row.get('example_id')}"
            tagged.append(row)
        return tagged

    def _rows(self, split: str, n: int, seed: int | None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for name, env in self.envs.items():
            source = env.eval_rows() if split == "eval" else env.train_rows()
            rows += self._tag([dict(row, example_id=row.get("example_id", i)) for i, row in enumerate(source)], name)
        return self._select(rows, n, seed)

    def train_rows(self, n: int = -1, seed: int | None = None) -> list[dict[str, Any]]:
        return self._rows("train", n, seed)

    def row_stream(self, split: Literal["train", "eval"] = "train") -> None:
        """None: a group's rows are its environments' lists, tagged (`train_rows`, `eval_rows`)."""
        return None

    def eval_rows(self, n: int = -1, seed: int | None = None) -> list[dict[str, Any]]:
        return self._rows("eval", n, seed)

    def get_dataset(self, n: int = -1, seed: int | None = None) -> Dataset:
        """Every environment's training rows, tagged with ``info.env_id`` (first `n`, shuffled with `seed` if given)."""
        return self.make_dataset(self.train_rows(n, seed))

    def get_eval_dataset(self, n: int = -1, seed: int | None = None) -> Dataset:
        return self.make_dataset(self.eval_rows(n, seed))

    # -- running: each task in its own environment --------------------------------------------

    def merged_sampling_args(self, sampling_args: SamplingArgs | None) -> SamplingArgs:
        """The caller's sampling args only: each environment merges its harness's own in `run_tasks`."""
        return dict(sampling_args or {})

    async def resolve_clients(self, client: Any) -> list[Client[Any, Any, Any, Any]]:
        if client is None:
            for env in self.envs.values():
                if env.harness.client is not None or env.harness.config.client is not None:
                    return await env.resolve_clients(None)
        return await super().resolve_clients(client)

    def resolve_model(self, model: str | None) -> str:
        """`model`, else the first environment's harness's."""
        for env in self.envs.values():
            model = model or env.harness.config.model
        return super().resolve_model(model)

    async def run_tasks(
        self, tasks: list[Task], client: Client[Any, Any, Any, Any], model: str, sampling_args: SamplingArgs
    ) -> list[State]:
        envs = {id(self.env_for(task)): self.env_for(task) for task in tasks}
        if len(envs) != 1:
            raise ConfigError(f"EnvGroup {self.env_id}: a group's rows must all name one environment")
        env = next(iter(envs.values()))
        return await env.run_tasks(tasks, client, model, env.merged_sampling_args(sampling_args))

    async def init_state(
        self,
        input: Mapping[str, Any] | Task,
        client: Any = None,
        model: str | None = None,
        sampling_args: SamplingArgs | None = None,
    ) -> State:
        return await self.env_for(input).init_state(input, client, model, sampling_args)

    async def rollout(
        self,
        input: Mapping[str, Any] | Task | None = None,
        client: Any = None,
        model: str | None = None,
        sampling_args: SamplingArgs | None = None,
        **older: Any,
    ) -> Any:
        """The rollout on the environment the row names (the older `prompt=` form too: `Env.rollout`)."""
        if older or input is None:
            return await super().rollout(input, client, model, sampling_args, **older)
        return await self.env_for(input).rollout(input, client, model, sampling_args)

    async def get_model_response(
        self, state: State, prompt: Any, tools: list[dict[str, Any]] | None = None, sampling_args: SamplingArgs | None = None
    ) -> Response | None:
        """The call on the environment the state's row belongs to (its endpoint, its harness)."""
        return await self.env_for(state.task).get_model_response(state, prompt, tools, sampling_args)

    async def finish_state(self, state: State) -> State:
        """`finish_state` on the environment the state's row belongs to."""
        return await self.env_for(state.task).finish_state(state)

    # -- description and settings ---------------------------------------------------------------

    def tool_descriptions(self) -> list[dict[str, Any]] | None:
        """Every environment's tools (each name once)."""
        tools: dict[str, dict[str, Any]] = {}
        for env in self.envs.values():
            for tool in env.tool_descriptions() or []:
                tools.setdefault(tool["name"], tool)
        return list(tools.values()) or None

    def scoring_plan(self, independent_scoring: bool = False) -> dict[str, Any]:
        """Each environment's scoring plan, by name."""
        return {name: env.scoring_plan(independent_scoring) for name, env in self.envs.items()}

    def set_concurrency(self, concurrency: int) -> None:
        super().set_concurrency(concurrency)
        for env in self.envs.values():
            env.set_concurrency(concurrency)

    def set_max_seq_len(self, max_seq_len: int | None) -> None:
        for env in self.envs.values():
            env.set_max_seq_len(max_seq_len)

    def set_score_rollouts(self, score_rollouts: bool) -> None:
        for env in self.envs.values():
            env.set_score_rollouts(score_rollouts)


__all__ = ["EnvGroup"]
