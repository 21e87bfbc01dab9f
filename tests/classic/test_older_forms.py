"""Older call forms that can be told apart from seed 001's (issue #45), each called as its seed writes it.

Seed 003 (Tinker's cookbook): `vf_env.rollout(client=, model=, prompt=, answer=)` returning
`(completion, state)`, then `rubric.score_rollout(prompt=, completion=, answer=, state=)`. Seed 000
(chatan) and seed 004: a sync `openai.OpenAI` client. Seed 004: `ToolRubric(tools, weights=[...])`,
`evaluate(...)` positional, and the type names. All against `v1.testing`'s mock over real HTTP with
the official openai SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import openai
import pytest
from classic_reverse import reversed_exactly, rows

import v1 as vf
from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, MockRequest, Reply


def reverser(request: MockRequest) -> Reply:
    last = request.last_message
    if request.tools and last.get("role") != "tool":
        return Reply.tool(request.tools[0]["function"]["name"], {"text": request.last_user_text})
    return Reply.text(request.last_user_text[::-1])


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer(reverser) as server:
        yield server


PROMPT = [{"role": "user", "content": "abc"}]


# Seed 003: the cookbook's custom_do_group_rollout, as written.


async def cookbook_rollout(builder: Any, local_client: Any) -> tuple[Any, Any, Any]:
    completion, state = await builder.vf_env.rollout(
        client=local_client,
        model="tinker",
        prompt=builder.prompt,
        answer=builder.answer,
    )
    rs = await builder.vf_env.rubric.score_rollout(
        prompt=builder.prompt,
        completion=completion,
        answer=builder.answer,
        state=state,
    )
    return completion, state, rs


def test_seed_003_cookbook_pattern_on_a_loaded_environment(mock: MockModelServer) -> None:
    builder = SimpleNamespace(vf_env=vf.load_environment("reverse-text"), prompt=PROMPT, answer="cba")
    local_client = openai.AsyncOpenAI(base_url=mock.url, api_key="x")  # stands in for TinkerAsyncOpenAIClient
    completion, state, rs = asyncio.run(cookbook_rollout(builder, local_client))
    assert completion == [{"role": "assistant", "content": "cba"}]
    assert state["completion"] == completion and state["trajectory"]
    assert rs["reward"] == 1.0
    assert mock.requests[0].body["model"] == "tinker"


def test_seed_003_cookbook_pattern_on_a_classic_environment(mock: MockModelServer) -> None:
    env = vf.SingleTurnEnv(dataset=rows(), rubric=vf.Rubric([reversed_exactly]))
    builder = SimpleNamespace(vf_env=env, prompt=PROMPT, answer="cba")
    completion, state, rs = asyncio.run(cookbook_rollout(builder, openai.AsyncOpenAI(base_url=mock.url, api_key="x")))
    assert completion[-1]["content"] == "cba" and state["answer"] == "cba"
    assert rs == {"reward": 1.0, "metrics": {"reversed_exactly": 1.0}}


def test_the_older_rollout_form_is_told_apart_by_its_keywords(mock: MockModelServer) -> None:
    env = vf.SingleTurnEnv(dataset=rows(), rubric=vf.Rubric([reversed_exactly]))
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    row = {"prompt": PROMPT, "answer": "cba", "example_id": 0}
    with pytest.raises(vf.ConfigError, match=r"pass input .* or prompt=\.\.\. .*, not both"):
        asyncio.run(env.rollout(row, client=client, model="m", prompt=PROMPT))
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        asyncio.run(env.rollout(client=client, model="m", prompt=PROMPT, bogus=1))
    with pytest.raises(TypeError, match="needs an input row"):
        asyncio.run(env.rollout(client=client, model="m"))
    state = asyncio.run(env.rollout(row, client, "m"))  # seed 001's form is unchanged: a State
    assert state["reward"] == 1.0
    completion, state = asyncio.run(env.rollout(client=client, model="m", prompt=PROMPT, answer="cba", info={"k": 1}))
    assert completion[-1]["content"] == "cba" and state["info"] == {"k": 1} and state["reward"] == 1.0


# Seed 000 (chatan) and seed 004: a sync OpenAI client.


@contextlib.asynccontextmanager
async def _null_semaphore() -> AsyncIterator[None]:
    """chatan's: 'acts as an unlimited semaphore'."""
    yield


def test_chatan_run_rollout_with_a_sync_openai_client(mock: MockModelServer) -> None:
    env = vf.SingleTurnEnv(dataset=rows(), rubric=vf.Rubric([reversed_exactly]))
    client = openai.OpenAI(base_url=mock.url, api_key="x")
    input_data = {"prompt": PROMPT, "example_id": 0, "task": env.env_id, "answer": "cba"}

    async def run() -> Any:
        return await env.run_rollout(
            input_data, client, "test-model", gen_sampling_args={"temperature": 0.7}, gen_sem=_null_semaphore()
        )

    result = asyncio.run(run())
    assert result["completion"][-1]["content"] == "cba" and result["reward"] == 1.0
    assert mock.requests[0].body["temperature"] == 0.7
    client.close()


def together_or_alone() -> Any:
    """Answers "together" once two requests are in flight at the same time, "alone" if none joins in time."""
    in_flight = 0
    joined: asyncio.Event | None = None

    async def reply(request: MockRequest) -> Reply:
        nonlocal in_flight, joined
        joined = joined or asyncio.Event()
        in_flight += 1
        if in_flight >= 2:
            joined.set()
        try:
            await asyncio.wait_for(joined.wait(), HANG_S / 4)
            return Reply.text("together")
        except asyncio.TimeoutError:
            return Reply.text("alone")
        finally:
            in_flight -= 1

    return reply


def test_a_sync_client_runs_off_the_event_loop(caplog: pytest.LogCaptureFixture) -> None:
    """Two rollouts with one sync client: both model calls are in flight at once, so neither blocks the loop."""
    env = vf.SingleTurnEnv(dataset=rows()[:2])
    with MockModelServer(together_or_alone()) as server, caplog.at_level("INFO", logger="v1"):
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
        outputs = env.generate_sync(env.get_dataset(), client, "m", max_concurrent=2)["outputs"]
        client.close()
    assert [o["completion"][-1]["content"] for o in outputs] == ["together", "together"]
    assert [o["error"] for o in outputs] == [None, None]
    notes = [r.getMessage() for r in caplog.records if "sync openai.OpenAI" in r.getMessage()]
    assert len(notes) == 1 and "off the event loop" in notes[0]


def test_a_sync_client_failure_is_the_rollouts_error(mock: MockModelServer) -> None:
    mock.script(Reply.fail(400, "bad request"))
    env = vf.SingleTurnEnv(dataset=rows()[:1])
    client = openai.OpenAI(base_url=mock.url, api_key="x", max_retries=0)
    output = env.generate_sync(env.get_dataset(), client, "m")["outputs"][0]
    client.close()
    assert output["error"] is not None and "400" in output["error"]["message"]


# Seed 004: ToolRubric(tools, weights=[...]), evaluate(...) positional, the type names.


def test_seed_004_tool_rubric_weights(mock: MockModelServer) -> None:
    def reverse_text(text: str) -> str:
        """Reverse a text.

        Args:
            text: the text to reverse.
        """
        return text[::-1]

    rubric = vf.ToolRubric([reverse_text], weights=[0.5, 0.3, 0.2])
    assert rubric.get_reward_weights()[:3] == [0.5, 0.3, 0.2]
    env = vf.ToolEnv(tools=[reverse_text], dataset=rows(), rubric=rubric)
    state = asyncio.run(
        env.rollout({"prompt": PROMPT, "answer": "cba", "example_id": 0}, vf.ClientConfig(api_base_url=mock.url), "m")
    )
    assert state["metrics"]["correct_answer"] == 1.0 and state["metrics"]["tool_execution"] == 1.0
    assert state["metrics"]["reverse_text_calls"] == 1.0
    assert state["reward"] == pytest.approx(0.5 + 0.3 + 0.2 * state["metrics"]["format_reward"])
    with pytest.raises(vf.ConfigError, match="three numbers"):
        vf.ToolRubric([reverse_text], weights=[1.0])


def test_seed_004_evaluate_positional_with_a_sync_client(mock: MockModelServer) -> None:
    env = vf.SingleTurnEnv(dataset=rows(), rubric=vf.Rubric([reversed_exactly]))
    client = openai.OpenAI(base_url=mock.url, api_key="x")
    outputs = env.evaluate_sync(client, "m", {"temperature": 0.3}, 2, 2)
    client.close()
    assert outputs["metadata"]["num_examples"] == 2 and outputs["metadata"]["rollouts_per_example"] == 2
    assert [o["reward"] for o in outputs["outputs"]] == [1.0] * 4
    assert {r.body["temperature"] for r in mock.requests} == {0.3}


def test_seed_004_type_names() -> None:
    inputs: vf.GenerateInputs = [{"prompt": PROMPT, "answer": "cba"}]
    message: vf.Message = {"role": "user", "content": "x"}
    processed: vf.ProcessedOutputs = {"rewards": [1.0]}
    assert vf.GenerateInputs == list[dict[str, Any]] and vf.ProcessedOutputs == dict[str, Any]
    assert str in vf.Message.__args__  # type: ignore[attr-defined]
    assert inputs and message and processed


def test_older_score_rollout_keeps_the_callers_state_fields(mock: MockModelServer) -> None:
    """Seed 003 passes the rollout's state: a reward reading one of its fields sees it."""

    def used_the_tool(completion: Any, state: Any) -> float:
        return float(state.get("tool_used", False))

    env = vf.SingleTurnEnv(dataset=rows(), rubric=vf.Rubric([used_the_tool]))
    scored = asyncio.run(
        env.rubric.score_rollout(
            prompt=PROMPT,
            completion=[{"role": "assistant", "content": "cba"}],
            answer="cba",
            state={"tool_used": True, "trajectory": [], "is_completed": True, "error": None},
        )
    )
    assert scored == {"reward": 1.0, "metrics": {"used_the_tool": 1.0}}
