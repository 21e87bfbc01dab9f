"""The seed's worker interface on `Env` (rollout, init_state, run_rollout, setters) and `EnvGroup` routing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import v1 as vf
from v1.interception import upstream
from v1.testing import MockModelServer, MockRequest, Reply


@vf.reward
def exact(completion: list[dict[str, Any]], answer: str) -> float:
    return float(completion[-1]["content"] == answer)


def reverser(request: MockRequest) -> Reply:
    return Reply.text(request.last_user_text[::-1])


def env_of(taskset_id: str, words: list[str], answer: Any = lambda w: w[::-1]) -> vf.Env:
    rows = [{"question": word, "answer": answer(word)} for word in words]
    return vf.Env(vf.Taskset(taskset_id=taskset_id, source=rows, rewards=[exact]))


async def test_init_state_rollout_and_run_rollout(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverser
    env = env_of("rev", ["abc", "hello"])
    row = env.get_dataset(1)[0]
    state = await env.init_state(row, client_config, "m", {"temperature": 0.5})
    assert state.runtime.model == "m" and upstream(state).sampling_args == {"temperature": 0.5}
    assert not env.is_completed(state)
    done = await env.rollout(row, client_config, "m")
    assert env.is_completed(done) and done["reward"] == 1.0 and done["completion"][-1]["content"] == "cba"
    semaphore = asyncio.Semaphore(1)
    states = await asyncio.gather(*(env.run_rollout(semaphore, r, client_config, "m") for r in env.get_dataset()))
    assert [s["reward"] for s in states] == [1.0, 1.0]


async def test_setters_change_what_rollouts_do(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverser

    async def twice(task: vf.Task, state: vf.State) -> None:
        for _ in range(2):
            answer = await state.get_client().chat.completions.create(model="m", messages=list(state["prompt"]))
        state["completion"] = [{"role": "assistant", "content": answer.choices[0].message.content}]

    env = vf.Env(
        vf.Taskset(taskset_id="rev", source=[{"question": "abc", "answer": "cba"}], rewards=[exact]), vf.Harness(program=twice)
    )
    env.set_kwargs(score_rollouts=False, max_seq_len=2, concurrency=3, pass_threshold=1.0)
    assert env.concurrency == 3 and env.pass_threshold == 1.0
    state = await env.rollout(env.get_dataset()[0], client_config, "m")
    # max_seq_len=2: the first turn's context fills it, so the second call is refused; unscored: no reward ran
    assert state["stop_condition"] == "prompt_too_long" and len(state["trajectory"]) == 1
    assert not state.get("metrics") and not state.get("reward")
    env.set_max_seq_len(None)
    env.set_score_rollouts(True)
    scored = await env.rollout(env.get_dataset()[0], client_config, "m")
    assert scored["reward"] == 1.0 and len(scored["trajectory"]) == 2
    with pytest.raises(vf.ConfigError, match="unknown setting 'nope'"):
        env.set_kwargs(nope=1)
    assert len(env.make_dataset([{"question": "q"}])) == 1


async def test_env_group_routes_rows_by_env_id(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverser
    group = vf.EnvGroup([env_of("rev", ["abc", "xyz"]), env_of("same", ["noon"], answer=lambda w: w)], ["rev", "same"])
    rows = group.get_dataset()
    assert [(r["info"]["env_id"], r["question"]) for r in rows] == [("rev", "abc"), ("rev", "xyz"), ("same", "noon")]
    assert len({r["example_id"] for r in rows}) == 3
    states = await group.run_group([rows[2]] * 2, client_config, "m")
    assert [s["reward"] for s in states] == [1.0, 1.0]  # "noon" reversed is itself: the "same" env's answer
    result = await group.generate(rows, client_config, "m", rollouts_per_example=2)
    assert len(result["outputs"]) == 6 and result["metadata"]["env_id"] == "env_group"
    assert result["metadata"]["num_rollouts"] == 6
    with pytest.raises(vf.ConfigError, match=r"info.env_id 'other'"):
        await group.rollout({"question": "q", "info": {"env_id": "other"}}, client_config, "m")
    with pytest.raises(vf.ConfigError, match="one environment"):
        await group.run_group([rows[0], rows[2]], client_config, "m")
    assert vf.EnvGroup([env_of("a", ["x"]), env_of("a", ["y"])]).env_names == ["env_0", "env_1"]  # the seed's default
    with pytest.raises(vf.ConfigError, match="name each environment once"):
        vf.EnvGroup([env_of("a", ["x"]), env_of("b", ["y"])], env_names=["a", "a"])
