"""Configs of an episode of roles (`v1.EpisodeHarness`): its roles and its control program.

An episode's harness names roles, each a harness of its own (`RoleConfig`: a `HarnessConfig`
plus whether its tokens are trained), and a control: `"policy"` (run the policy once), a
`module:object` reference to an async callable taking the `Episode`, or one of the built-ins
(`JudgeControl`, `BestOfN`, `UserControl`), told apart by their `kind`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, TypeVar, Union

from pydantic import Field, field_validator

from v1._util.sandbox_paths import sandbox_path_problem
from v1.config._config import Config, HarnessConfig

ROLE_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
MAX_ATTEMPTS = 64
MAX_USER_TURNS = 100


def name_problem(name: str) -> str | None:
    """What is wrong with a role's or a criterion's name (None: nothing)."""
    if isinstance(name, str) and re.match(ROLE_NAME_PATTERN, name):
        return None
    return f"{str(name)[:80]!r} is not a name: 1 to 64 letters, digits, '_' and '-', starting with a letter"


class RoleConfig(HarnessConfig):
    """One role of an episode: a harness (model, sandbox, limits) and whether its tokens are trained.

    `trainable` defaults to true for the role named `policy` and false for every other.
    `attempts_task` (default: true for `policy`) gives the role the episode's taskset: its prompt,
    tools and rewards apply to the role's rollouts.
    """

    trainable: bool | None = None
    attempts_task: bool | None = None


_Value = TypeVar("_Value")


def _named(entries: dict[str, _Value], what: str) -> dict[str, _Value]:
    """`entries`, once every key is a usable name (`name_problem`); else a ValueError naming `what`."""
    for name in entries:
        problem = name_problem(name)
        if problem is not None:
            raise ValueError(f"{what} {problem}")
    return entries


class JudgeControl(Config):
    """The built-in judge: the policy attempts the task, then the `judge` role judges the attempt.

    `mode = "isolated"` runs the judge in a fresh sandbox of its own with the policy's `files`
    restored (collected as artifacts of the policy's rollout); `"shared"` runs it in the policy's
    own sandbox after the policy's program ended, before that sandbox is deleted. The judge's last
    message holds a JSON object with a score in [0, 1] (or true/false) per criterion: each becomes
    the metric `judge/<criterion>`, and their weighted sum the episode's reward.
    """

    kind: Literal["judge"] = "judge"
    criteria: dict[str, str] = Field(min_length=1)
    """Criterion name -> what the judge checks."""
    weights: dict[str, float] = Field(default_factory=dict)
    """Criterion name -> weight in the reward (default 1.0 each)."""
    mode: Literal["isolated", "shared"] = "isolated"
    files: list[str] = Field(default_factory=list)
    """Paths in the policy's workspace restored into an isolated judge's workspace."""
    max_file_bytes: int = Field(1_000_000, gt=0, le=100_000_000)

    @field_validator("criteria")
    @classmethod
    def _criterion_names(cls, criteria: dict[str, str]) -> dict[str, str]:
        return _named(criteria, "criterion")

    @field_validator("files")
    @classmethod
    def _relative_files(cls, files: list[str]) -> list[str]:
        for path in files:
            if not path or sandbox_path_problem("/" + path) is not None:
                raise ValueError(
                    f"judge file {path[:120]!r}: a plain relative path inside the workspace (no '..', '.', '//' or leading '/')"
                )
        return files


class BestOfN(Config):
    """The built-in best-of-n: `n` attempts of the policy, each with a sandbox and a seed of its own.

    Attempt `i` samples with `seed + i`. Without a `seed`, each episode draws its own base, so the
    episodes of one task (a training group, `-r` repeats) differ; a fixed `seed` makes every episode
    of a task sample alike (reproducible, and no spread within a group to learn from). The episode
    records `pass@n` (1.0 when an attempt's reward reached `pass_threshold`) and `best` (the best
    attempt's reward), which is also its reward.
    """

    kind: Literal["best_of_n"] = "best_of_n"
    n: int = Field(gt=0, le=MAX_ATTEMPTS)
    seed: int | None = Field(None, ge=0, le=2**31 - MAX_ATTEMPTS)
    pass_threshold: float = 1.0


class UserControl(Config):
    """The built-in simulated user: the `user` role (a harness) speaks the policy's user turns.

    After each answer of the policy, the user role gets the conversation with the sides swapped and
    its reply becomes the policy's next user message. A reply containing `end_marker` (or an empty
    one) ends the dialogue; `max_turns` user replies at most.
    """

    kind: Literal["user"] = "user"
    instructions: str = (
        "You play the user in a conversation with an assistant. Reply with the user's next message only. "
        "When the conversation has reached its goal, reply with {end_marker}."
    )
    end_marker: str = Field("[END]", min_length=1, max_length=100)
    max_turns: int = Field(5, gt=0, le=MAX_USER_TURNS)


BuiltInControl = Annotated[Union[JudgeControl, BestOfN, UserControl], Field(discriminator="kind")]


class EpisodeConfig(HarnessConfig):
    """Config of an `EpisodeHarness`: its roles and the control program that runs them.

    `control` is `"policy"` (the policy role runs once), a `module:object` reference to an async
    function taking the `Episode`, or a built-in table (`kind = "judge" | "best_of_n" | "user"`).
    """

    roles: dict[str, RoleConfig] = Field(default_factory=dict)
    control: Union[BuiltInControl, str] = "policy"

    @field_validator("roles")
    @classmethod
    def _role_names(cls, roles: dict[str, RoleConfig]) -> dict[str, RoleConfig]:
        return _named(roles, "role")


__all__ = ["BestOfN", "EpisodeConfig", "JudgeControl", "RoleConfig", "UserControl"]
