"""`EpisodeHarness`: a harness whose program is a control over roles, each a harness of its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from v1.config import EpisodeConfig, HarnessConfig, RoleConfig
from v1.errors import ConfigError
from v1.harness._controls import ControlLike, control_program, required_roles
from v1.harness._episode import Episode, Role, RoleLike, resolve_role
from v1.harness._harness import Harness
from v1.rollout import State, Task, reward
from v1.taskset import Taskset


class EpisodeHarness(Harness):
    """An episode of roles: `policy`, `judge`, `user` or any name, each a harness, run by a control.

    The episode's own program is the control; every role runs as a child rollout on an endpoint
    session of its own, and is kept under `state["roles"][name]` with its trajectory and usage
    (see `Episode.run`). The taskset's handlers (rewards included) apply to the roles that attempt
    the task (the policy), not to the episode: the episode's reward is its control's
    (`Episode.set_reward`, scored as the `episode` reward; the default control gives the policy's),
    plus the episode harness's own rewards; its completion is the one the control chose.

    Args:
        roles: `{name: Role | Harness | RoleConfig}`; added to the config's `roles`.
        control: `"policy"` (default: the policy once), an async function taking the `Episode`, a
            `module:fn` reference, or a built-in: `JudgeControl`, `BestOfN`, `UserControl`.
        config: an `EpisodeConfig` (or mapping); other keyword arguments are `Harness`'s.
    """

    config_type: ClassVar[type[HarnessConfig]] = EpisodeConfig
    scores_with_taskset: ClassVar[bool] = False

    def __init__(
        self,
        roles: Mapping[str, RoleLike] | None = None,
        control: ControlLike | None = None,
        *,
        config: EpisodeConfig | Mapping[str, object] | None = None,
        **kwargs: Any,
    ) -> None:
        episode_config = EpisodeConfig.from_config(config)
        if episode_config.program is not None or "program" in kwargs:
            raise ConfigError("an episode's program is its control: set control, not program")
        self.roles: dict[str, Role] = {}
        super().__init__(self.run_control, config=episode_config, **kwargs)
        assert isinstance(self.config, EpisodeConfig)
        given = dict(roles or {})
        EpisodeConfig(roles={name: RoleConfig() for name in given})  # the names given in Python meet the config's rule
        self.roles = {name: resolve_role(name, value) for name, value in {**self.config.roles, **given}.items()}
        if not self.roles:
            raise ConfigError("an episode needs roles: pass roles={'policy': Harness(...)} or set [env.harness.roles.policy]")
        self.control = control if control is not None else self.config.control
        missing = [name for name in required_roles(self.control) if name not in self.roles]
        if missing:
            raise ConfigError(f"control {_label(self.control)} needs the role(s) {missing}; the episode has {sorted(self.roles)}")
        self.control_program = control_program(self.control)
        self._give_roles_the_taskset(self.taskset)

    @property
    def taskset(self) -> Taskset | None:
        return self._taskset

    @taskset.setter
    def taskset(self, taskset: Taskset | None) -> None:
        Harness.taskset.fset(self, taskset)  # type: ignore[attr-defined]
        self._give_roles_the_taskset(taskset)

    def _give_roles_the_taskset(self, taskset: Taskset | None) -> None:
        for role in getattr(self, "roles", {}).values():
            if role.attempts_task:
                role.harness.taskset = taskset

    async def run_control(self, task: Task, state: State) -> None:
        """The episode's program: its control, handed the `Episode`."""
        await self.control_program(Episode(self.roles, task, state))

    @reward
    def episode(self, state: State) -> float:
        """The reward the control gave the episode (`Episode.set_reward`; 0.0 when it gave none)."""
        return float(state.get("episode_reward") or 0.0)

    async def teardown(self) -> None:
        """The episode's teardown, then each role's."""
        await super().teardown()
        for role in self.roles.values():
            await role.harness.teardown()


def _label(control: ControlLike) -> str:
    kind = getattr(control, "kind", None)
    return repr(kind if kind is not None else control if isinstance(control, str) else getattr(control, "__name__", "?"))


__all__ = ["EpisodeHarness"]
