"""`vf.Environment` and `SingleTurnEnv` over real HTTP against the mock: construction, datasets,
message types, the worker interface (both `run_rollout` forms), configuration methods."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from classic_reverse import answer_length, reversed_exactly, rows

import v1 as vf
from v1._util.calling import pool_size, resize_pool
from v1.testing import MockModelServer, MockRequest, Reply


def reverser(request: MockRequest) -> Reply:
    return Reply.text(request.last_user_text[::-1])


@pytest.fixture
def mock() -> Any:
    with MockModelServer(reverser) as server:
        yield server


@pytest.fixture
def client(mock: MockModelServer) -> vf.ClientConfig:
    return vf.ClientConfig(api_base_url=mock.url, max_retries=0)


def single(**kwargs: Any) -> vf.SingleTurnEnv:
    kwargs.setdefault("dataset", rows())
    kwargs.setdefault("rubric", vf.Rubric([reversed_exactly, answer_length], [1.0, 0.0]))
    return vf.SingleTurnEnv(**kwargs)


def test_environment_is_the_base_of_every_env_and_cannot_be_built_itself() -> None:
    with pytest.raises(TypeError, match="abstract"):
        vf.Environment(dataset=rows())
    assert isinstance(single(), vf.Environment)
    assert isinstance(vf.Env(vf.Taskset(source=rows())), vf.Environment)
    assert isinstance(vf.EnvGroup([single(env_id="a"), single(env_id="b")]), vf.Environment)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset": [{"answer": "x"}]}, "row 0 has neither 'prompt' nor 'question'"),
        ({"dataset": [{"question": "a"}, "oops"]}, "dataset row 1: expected a mapping"),
        ({"dataset": {"question": "a"}}, "dataset must be rows"),
        ({"eval_dataset": [{"text": "a"}]}, "eval_dataset row 0 has neither"),
        ({"message_type": "voice"}, "message_type must be one of"),
        ({"max_workers": 0}, "max_workers must be a positive integer"),
        ({"max_workers": -3}, "max_workers must be a positive integer"),
    ],
)
def test_bad_constructor_input_is_one_clear_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(vf.Error, match=message):
        single(**kwargs)


async def test_single_turn_chat_scores_with_the_rubric_through_the_endpoint(
    mock: MockModelServer, client: vf.ClientConfig
) -> None:
    env = single(
        system_prompt="Reverse the text.", few_shot=[{"role": "user", "content": "ab"}, {"role": "assistant", "content": "ba"}]
    )
    out = await env.generate(env.get_dataset(n=3), client, "m")
    first = out["outputs"][0]
    assert first["prompt"] == [
        {"role": "system", "content": "Reverse the text."},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "ba"},
        {"role": "user", "content": "hello world"},
    ]
    assert first["completion"] == [{"role": "assistant", "content": "dlrow olleh"}]
    assert [o["reward"] for o in out["outputs"]] == [1.0, 1.0, 1.0]
    assert first["metrics"] == {"reversed_exactly": 1.0, "answer_length": 11.0}  # weight 0: recorded, not in the reward
    assert first["stop_condition"] == "max_turns_reached" and first["error"] is None
    assert len(first["trajectory"]) == 1 and len(mock.requests) == 3
    assert mock.requests[0].body["messages"] == first["prompt"]


@pytest.mark.parametrize("prompt_form", ["string", "list"])
async def test_completion_and_chat_message_types_with_string_and_list_prompts(
    mock: MockModelServer, client: vf.ClientConfig, prompt_form: str
) -> None:
    """verifiers#519: a chat env whose prompt column is a string failed; both types take both forms here."""
    prompt: Any = "abc" if prompt_form == "string" else [{"role": "user", "content": "abc"}]
    chat = single(dataset=[{"prompt": prompt, "answer": "cba"}])
    state = await chat.rollout({"prompt": prompt, "answer": "cba", "example_id": 0}, client, "m")
    assert state["prompt"] == [{"role": "user", "content": "abc"}] and state["reward"] == 1.0
    completion_env = single(dataset=[{"prompt": "abc", "answer": "cba"}], message_type="completion")
    out = await completion_env.generate(completion_env.get_dataset(), client, "m")
    (output,) = out["outputs"]
    assert output["prompt"] == "abc" and output["completion"] == "cba" and output["reward"] == 1.0
    # the program spoke the Completions dialect to the endpoint; the chat upstream got the canonical messages
    assert output["trajectory"][0]["extras"]["dialect"] == "completions"
    assert mock.requests[-1].last_user_text == "abc"


async def test_run_rollout_accepts_chatan_and_seed_call_forms(client: vf.ClientConfig) -> None:
    env = single()
    # chatan (seed 000): env.run_rollout(input, client, model, gen_sampling_args=...), a "task" key in the input
    chatan_input = {"prompt": [{"role": "user", "content": "abc"}], "example_id": 7, "task": env.env_id, "answer": "cba"}
    result = await env.run_rollout(chatan_input, client, "m", gen_sampling_args={"temperature": 0.3})
    assert result["completion"] == [{"role": "assistant", "content": "cba"}]
    assert result["reward"] == 1.0 and result["metrics"]["reversed_exactly"] == 1.0 and len(result["trajectory"]) == 1
    assert env.rubric.names() == ["reversed_exactly", "answer_length"]
    # seed 001: run_rollout(sem, input, client, model, sampling_args)
    semaphore = asyncio.Semaphore(1)
    state = await env.run_rollout(semaphore, chatan_input, client, "m", {"temperature": 0.1})
    assert state["reward"] == 1.0 and not semaphore.locked()
    with pytest.raises(vf.ConfigError, match="not both"):
        await env.run_rollout(chatan_input, client, "m", {"temperature": 0.1}, gen_sampling_args={"temperature": 0.2})
    with pytest.raises(vf.ConfigError, match="run_rollout"):
        await env.run_rollout(chatan_input, client, "m", {}, "extra")


async def test_client_may_be_a_raw_async_openai(mock: MockModelServer) -> None:
    from openai import AsyncOpenAI

    env = single()
    out = await env.generate(env.get_dataset(n=2), AsyncOpenAI(base_url=mock.url, api_key="k"), "m")
    assert [o["reward"] for o in out["outputs"]] == [1.0, 1.0]


def test_generate_sync_and_evaluate_sync(client: vf.ClientConfig) -> None:
    env = single(eval_dataset=rows()[:2])
    assert [o["reward"] for o in env.evaluate_sync(client, "m")["outputs"]] == [1.0, 1.0]
    assert len(env.generate_sync(env.get_dataset(n=3), client, "m")["outputs"]) == 3


def test_datasets_first_n_shuffled_and_made() -> None:
    env = single(eval_dataset=rows()[:3])
    assert [r["question"] for r in env.get_dataset(n=2)] == ["hello world", "abc"]
    shuffled = [r["question"] for r in env.get_dataset(seed=3)]
    assert sorted(shuffled) == sorted(r["question"] for r in rows()) and shuffled == [
        r["question"] for r in env.get_dataset(seed=3)
    ]
    assert len(env.get_eval_dataset()) == 3 and len(env.get_eval_dataset(n=1)) == 1
    assert env.make_dataset([{"question": "q"}])[0]["question"] == "q"


async def test_configuration_methods_change_what_runs(mock: MockModelServer, client: vf.ClientConfig) -> None:
    env = single()
    env.set_score_rollouts(False)
    state = await env.rollout(rows()[0] | {"example_id": 0}, client, "m")
    assert state.get("reward") is None
    env.set_kwargs(score_rollouts=True, max_seq_len=4)  # its effect on a second turn: test_multiturn.py
    assert env.harness.config.max_seq_len == 4
    env.set_max_seq_len(None)
    env.add_rubric(vf.Rubric([lambda completion: 0.5], [2.0]))
    state = await env.rollout(rows()[0] | {"example_id": 0}, client, "m")
    assert state["reward"] == 2.0 and set(state["metrics"]) == {"reversed_exactly", "answer_length", "<lambda>"}


async def test_set_concurrency_really_bounds_the_threads_of_sync_rewards(client: vf.ClientConfig) -> None:
    running, peak, lock = [0], [0], threading.Lock()

    def slow_reward(completion: Any) -> float:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return 1.0

    env = single(rubric=vf.Rubric([slow_reward]))
    try:
        env.set_concurrency(2)
        assert env.concurrency == 2 and pool_size("user") == 2
        out = await env.generate(env.get_dataset(n=6), client, "m", max_concurrent=6)
        assert [o["reward"] for o in out["outputs"]] == [1.0] * 6
        assert peak[0] == 2  # six rewards waited for two threads
        with pytest.raises(vf.ConfigError, match="integer"):
            env.set_concurrency("8")  # type: ignore[arg-type]
    finally:
        resize_pool("user", 512)
