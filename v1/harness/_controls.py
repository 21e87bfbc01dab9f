"""The built-in control programs of an episode: the policy alone, a judge, best-of-n, a simulated user.

Each is an async function of the `Episode` and its config (`v1.config`'s `JudgeControl`, `BestOfN`,
`UserControl`); `control_program` turns a control setting into the one callable an episode runs.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import math
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Union

from v1._util.message_text import last_assistant_text, message_text
from v1.config import BestOfN, JudgeControl, ProgramConfig, UserControl, resolve_callable
from v1.errors import ConfigError
from v1.harness._episode import POLICY, Episode
from v1.harness._harness import Harness
from v1.programs import program_sandbox
from v1.rollout import State, Task, judge_question, thaw
from v1.taskset import User

ControlProgram = Callable[[Episode], Awaitable[None]]
"""What runs an episode's roles: an async function taking the `Episode`."""

ControlLike = Union[ControlProgram, JudgeControl, BestOfN, UserControl, str]
"""A control as `EpisodeHarness(control=...)` takes it: a function, a built-in's config, `"policy"` or `"module:fn"`."""

JUDGE = "judge"
USER = "user"
BUILT_IN_KINDS = ("judge", "best_of_n", "user")

JUDGE_PROMPT = """You are judging an attempt at a task.

Task:
{question}

The attempt's final answer:
{answer}

{workspace}Score the attempt against each criterion from 0 (not met) to 1 (fully met):
{criteria}

End your reply with one JSON object mapping each criterion's name to its score, like {example}."""


async def run_policy(episode: Episode) -> None:
    """The default control: the policy attempts the task once; its completion and reward are the episode's."""
    policy = await episode.run(POLICY)
    episode.set_completion(policy)
    if not episode.fail_with(policy, POLICY):
        episode.set_reward(float(policy.get("reward") or 0.0))


def required_roles(control: ControlLike) -> tuple[str, ...]:
    """The roles a control needs (a custom function names its own)."""
    if isinstance(control, JudgeControl):
        return (POLICY, JUDGE)
    if isinstance(control, UserControl):
        return (POLICY, USER)
    if isinstance(control, BestOfN) or control == "policy":
        return (POLICY,)
    return ()


def control_program(control: ControlLike) -> ControlProgram:
    """The callable of a control setting."""
    if isinstance(control, JudgeControl):
        return functools.partial(judge, config=control)
    if isinstance(control, BestOfN):
        return functools.partial(best_of_n, config=control)
    if isinstance(control, UserControl):
        return functools.partial(user_dialogue, config=control)
    if control == "policy":
        return run_policy
    if control in BUILT_IN_KINDS:
        raise ConfigError(f"control {control!r} is a built-in with settings: write control = {{kind = {control!r}, ...}}")
    if isinstance(control, str):
        return resolve_callable(control, "control")  # type: ignore[no-any-return]
    if callable(control):
        return control
    raise ConfigError(f"control: expected a function, a built-in config or 'policy', got {type(control).__name__}")


# -- judge ------------------------------------------------------------------------------------


async def judge(episode: Episode, config: JudgeControl) -> None:
    """The policy attempts the task, then the `judge` role scores the attempt against the criteria.

    The judge runs on its own endpoint session: its calls are its trajectory, never the policy's.
    A failed policy or judge rollout is the episode's error (`Episode.fail_with`), not a score of 0.
    """
    judged: dict[str, State] = {}
    if config.mode == "isolated":
        files: dict[str, bytes] = {}

        async def keep_the_policys_files(state: State) -> None:
            if config.files:
                sandbox = await state.get_sandbox()
                for path in config.files:
                    try:
                        files[path] = await sandbox.read_file(path, config.max_file_bytes)
                    except FileNotFoundError:
                        continue

        async def restore_the_policys_files(state: State) -> None:
            sandbox = await state.get_sandbox()
            for path, content in files.items():
                await sandbox.write_file(path, content)

        roles_without = [name for name in (POLICY, JUDGE) if not _role_has_sandbox(episode.role(name).harness)]
        if config.files and roles_without:
            raise ConfigError(f"an isolated judge with files needs sandboxes: give the {roles_without} role's harness one")
        policy_harness = episode.role(POLICY).harness.with_handlers(cleanups=[keep_the_policys_files])
        policy = await episode.run(POLICY, harness=policy_harness)
        if policy.get("error") is None:
            judge_harness = episode.role(JUDGE).harness.with_handlers(setups=[restore_the_policys_files] if files else [])
            prompt = {"prompt": _judge_prompt(episode, policy, config)}
            judged["state"] = await episode.run(JUDGE, prompt, harness=judge_harness)
    else:

        async def judge_in_the_policy_sandbox(state: State) -> None:
            if state.get("error") is None:
                prompt = {"prompt": _judge_prompt(episode, state, config, shared=True)}
                judged["state"] = await episode.run(JUDGE, prompt, sandbox_of=state)

        policy_harness = episode.role(POLICY).harness
        if not _role_has_sandbox(policy_harness):
            raise ConfigError("a shared judge works in the policy's sandbox: give the policy role's harness one")
        policy = await episode.run(POLICY, harness=policy_harness.with_handlers(cleanups=[judge_in_the_policy_sandbox]))
    verdict_state = judged.get("state")
    episode.set_completion(policy)
    if episode.fail_with(policy, POLICY) or (verdict_state is not None and episode.fail_with(verdict_state, JUDGE)):
        return
    scores, problem = _verdict(verdict_state, config)
    for name, score in scores.items():
        episode.set_metric(f"judge/{name}", score)
    if problem is not None:
        episode.state["judge_problem"] = problem
    episode.set_reward(math.fsum(config.weights.get(name, 1.0) * score for name, score in scores.items()))


def _role_has_sandbox(harness: Harness) -> bool:
    program = harness.config.program
    return program_sandbox(program if isinstance(program, ProgramConfig) else None, harness.config.sandbox) is not None


def _judge_prompt(episode: Episode, attempt: State, config: JudgeControl, shared: bool = False) -> str:
    if shared:
        workspace = "You are in the attempt's workspace, as the attempt left it.\n\n"
    elif config.files:
        workspace = f"The attempt's files are in your working directory: {', '.join(config.files)}.\n\n"
    else:
        workspace = ""
    criteria = "\n".join(f"- {name}: {description}" for name, description in config.criteria.items())
    example = json.dumps({name: 1 for name in config.criteria})
    answer = last_assistant_text(attempt.get("completion")) or "(no answer)"
    question = judge_question(thaw(episode.task.prompt))
    return JUDGE_PROMPT.format(question=question, answer=answer, workspace=workspace, criteria=criteria, example=example)


def _verdict(state: State | None, config: JudgeControl) -> tuple[dict[str, float], str | None]:
    """Each criterion's score from the judge's last message (0.0 for one it did not score validly)."""
    scores = dict.fromkeys(config.criteria, 0.0)
    if state is None:
        return scores, "the judge did not run"
    found = _last_json_object(last_assistant_text(state.get("completion")) or "")
    if found is None:
        return scores, "the judge's last message holds no JSON object"
    problems = []
    for name in config.criteria:
        value = found.get(name)
        if isinstance(value, bool):
            scores[name] = 1.0 if value else 0.0
        elif isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 1:
            scores[name] = float(value)
        else:
            problems.append(f"{name}: {str(value)[:40]!r} is not a score in [0, 1]")
    return scores, "; ".join(problems) or None


def _last_json_object(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    start = text.rfind("{")
    while start >= 0:
        try:
            value, _ = decoder.raw_decode(text[start:])
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
        start = text.rfind("{", 0, start)
    return None


# -- best of n --------------------------------------------------------------------------------


async def best_of_n(episode: Episode, config: BestOfN) -> None:
    """`n` attempts of the policy, each in a sandbox of its own with seed `base + i` (`config.seed`, else drawn
    for this episode), run together.

    Records `pass@n` and `best` (also the episode's reward); the best attempt's completion is the episode's.
    """
    harness = episode.role(POLICY).harness
    program = harness.config.program
    sandbox = program_sandbox(program if isinstance(program, ProgramConfig) else None, harness.config.sandbox)
    if sandbox is not None and sandbox.scope != "rollout":
        raise ConfigError(
            f"best_of_n: the policy's sandbox has scope {sandbox.scope!r}, so its attempts would share it; "
            "give it scope 'rollout'"
        )
    base = config.seed if config.seed is not None else random.SystemRandom().randrange(2**30)
    attempts = await asyncio.gather(*(episode.run(POLICY, key=f"{POLICY}/{i}", seed=base + i) for i in range(config.n)))
    if all(attempt.get("error") is not None for attempt in attempts):
        episode.fail_with(attempts[0], f"{POLICY}/0")
        return
    rewards = [float(attempt.get("reward") or 0.0) for attempt in attempts]
    best = max(range(config.n), key=lambda i: rewards[i])
    episode.set_metric(f"pass@{config.n}", 1.0 if rewards[best] >= config.pass_threshold else 0.0)
    episode.set_metric("best", rewards[best])
    episode.set_reward(rewards[best])
    episode.set_completion(attempts[best])


# -- simulated user ---------------------------------------------------------------------------


async def user_dialogue(episode: Episode, config: UserControl) -> None:
    """The policy talks with the `user` role: each of the user's replies is the policy's next user turn.

    The policy's reward (the taskset's rewards on the dialogue) is the episode's."""
    policy_harness = episode.role(POLICY).harness
    if policy_harness.active_user is not None:
        raise ConfigError("the policy role already has a user simulator; the user role would be a second one")
    talking = copy.copy(policy_harness)
    talking.user = RoleUser(episode, config)
    policy = await episode.run(POLICY, harness=talking)
    episode.set_completion(policy)
    if not episode.fail_with(policy, POLICY):
        episode.set_reward(float(policy.get("reward") or 0.0))
    episode.set_metric("user_turns", float(_user_turns(episode)))


class RoleUser(User):
    """The user simulator a `user` role speaks through: one child rollout of the role per user turn."""

    def __init__(self, episode: Episode, config: UserControl) -> None:
        super().__init__()
        self.episode = episode
        self.settings = config

    async def get_response(self, task: Task, state: State, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if _user_turns(self.episode) >= self.settings.max_turns:
            state.stop("user_max_turns")
            return []
        prompt = _swapped(messages, self.settings.instructions.replace("{end_marker}", self.settings.end_marker))
        reply = await self.episode.run(USER, {"prompt": prompt})
        text = last_assistant_text(reply.get("completion")) or ""
        if reply.get("error") is not None or not text.strip() or self.settings.end_marker in text:
            state.stop("user_ended")
            return []
        return [{"role": "user", "content": text}]


def _user_turns(episode: Episode) -> int:
    return int((episode.state.get("roles") or {}).get(USER, {}).get("runs", 0))


def _swapped(messages: Sequence[Mapping[str, Any]], instructions: str) -> list[dict[str, Any]]:
    """The policy's conversation as the user role sees it: the user's words are its own (assistant), the policy's are
    the other side's (user); system and tool messages, and answers that only call tools, are left out."""
    swapped = [{"role": "user", "content": instructions}]
    for message in messages:
        role, text = message.get("role"), message_text(message)
        if role not in ("user", "assistant") or not text:
            continue
        side = "assistant" if role == "user" else "user"
        if swapped[-1]["role"] == side:
            swapped[-1]["content"] += "\n\n" + text
        else:
            swapped.append({"role": side, "content": text})
    return swapped


__all__ = [
    "ControlLike",
    "ControlProgram",
    "RoleUser",
    "best_of_n",
    "control_program",
    "judge",
    "required_roles",
    "run_policy",
    "user_dialogue",
]
