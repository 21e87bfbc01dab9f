"""Rubrics over real HTTP against the mock: one scoring path with v1's rewards, weights, argument
injection, group order, failures recorded, and the judge, math and tool rubrics."""

from __future__ import annotations

import math
from typing import Any

import pytest
from classic_reverse import rows

import v1 as vf
from v1.testing import MockModelServer, MockRequest, Reply


def numbered(request: MockRequest) -> Reply:
    """The n-th answer is n characters long, so a group's completions differ."""
    numbered.seen.append(1)  # type: ignore[attr-defined]
    return Reply.text("x" * len(numbered.seen))  # type: ignore[attr-defined]


numbered.seen = []  # type: ignore[attr-defined]


@pytest.fixture
def mock() -> Any:
    numbered.seen.clear()  # type: ignore[attr-defined]
    with MockModelServer(numbered) as server:
        yield server


@pytest.fixture
def client(mock: MockModelServer) -> vf.ClientConfig:
    return vf.ClientConfig(api_base_url=mock.url, max_retries=0)


def length(completion: Any) -> float:
    return float(len(completion[-1]["content"]))


def env_with(rubric: vf.Rubric) -> vf.SingleTurnEnv:
    return vf.SingleTurnEnv(dataset=rows(), rubric=rubric)


async def test_weights_metrics_and_injected_arguments(client: vf.ClientConfig) -> None:
    seen: dict[str, Any] = {}

    def everything(
        prompt: Any,
        completion: Any,
        answer: str,
        state: vf.State,
        task: vf.Task,
        info: dict,
        parser: vf.Parser,
        tokenizer: str,
        **kwargs: Any,
    ) -> float:
        seen.update(
            prompt=prompt,
            answer=answer,
            info=info,
            parser=parser,
            tokenizer=tokenizer,
            task=task["question"],
            extra=sorted(kwargs),
        )
        return 1.0

    rubric = vf.Rubric([everything, length], [0.5, 0.0], parser=vf.XMLParser(["answer"]))
    rubric.add_class_object("tokenizer", "tok")
    rubric.add_metric(lambda completion: 3.0)
    env = env_with(rubric)
    state = await env.rollout({"question": "q", "answer": "a", "info": {"k": 1}, "example_id": 0}, client, "m")
    assert state["reward"] == 0.5  # weight-0 functions recorded, never counted
    assert state["metrics"] == {"everything": 1.0, "length": 1.0, "<lambda>": 3.0}
    assert seen["prompt"] == [{"role": "user", "content": "q"}] and seen["answer"] == "a" and seen["info"] == {"k": 1}
    assert isinstance(seen["parser"], vf.XMLParser) and seen["tokenizer"] == "tok" and seen["task"] == "q"
    assert "trajectory" in seen["extra"] and "example_id" in seen["extra"]


async def test_group_functions_see_the_group_in_rollout_order(client: vf.ClientConfig) -> None:
    def relative(completions: list[Any], states: list[vf.State]) -> list[float]:
        lengths = [len(c[-1]["content"]) for c in completions]
        return [float(n == max(lengths)) for n in lengths]

    env = env_with(vf.Rubric([relative, length], [1.0, 0.0]))
    out = await env.generate([rows()[0]], client, "m", rollouts_per_example=4)
    for output in out["outputs"]:  # each rollout's group value belongs to its own completion
        longest = output["metrics"]["length"] == max(o["metrics"]["length"] for o in out["outputs"])
        assert output["metrics"]["relative"] == float(longest) == output["reward"]
    assert sorted(o["metrics"]["length"] for o in out["outputs"]) == [1.0, 2.0, 3.0, 4.0]
    assert sum(o["advantage"] for o in out["outputs"]) == pytest.approx(0.0)


async def test_a_raising_or_nan_function_is_a_recorded_error_and_the_others_still_score(client: vf.ClientConfig) -> None:
    def broken(completion: Any) -> float:
        raise RuntimeError("reward bug")

    def not_a_number(completion: Any) -> float:
        return math.nan

    for bad, message in ((broken, "reward bug"), (not_a_number, "expected a finite number")):
        env = env_with(vf.Rubric([bad, length]))
        out = await env.generate(rows()[:3], client, "m")
        assert len(out["outputs"]) == 3
        for output in out["outputs"]:
            assert message in output["error"]["message"] and output["error"]["where"] == f"reward:{bad.__name__}"
            assert output["metrics"][bad.__name__] == 0.0 and output["metrics"]["length"] > 0


def test_bad_rubric_input() -> None:
    with pytest.raises(vf.ConfigError, match="2 functions but 1 weights"):
        vf.Rubric([length, lambda completion: 1.0], [1.0])
    with pytest.raises(vf.ConfigError, match="finite number"):
        vf.Rubric([length], [math.inf])
    with pytest.raises(vf.ConfigError, match="callable"):
        vf.Rubric(["length"])  # type: ignore[list-item]
    with pytest.raises(vf.ConfigError, match="already in the rubric"):
        vf.Rubric([length, length])
    with pytest.raises(vf.ConfigError, match="mixes per-rollout"):
        vf.Rubric([lambda completion, states: 1.0])
    with pytest.raises(vf.ConfigError, match="not a free argument name"):
        vf.Rubric().add_class_object("state", 1)
    assert vf.RubricGroup([vf.Rubric([length]), vf.Rubric([length])]).names() == ["length", "length_2"]


async def test_rubric_scoring_and_harness_scoring_are_one_path(client: vf.ClientConfig) -> None:
    rubric = vf.Rubric([length, lambda completions: [2.0] * len(completions)], [1.0, 0.5])
    env = env_with(rubric)
    states = await env.run_group([rows()[0]] * 3, client, "m")
    harness_scores = [(s["reward"], dict(s["metrics"]), s["advantage"]) for s in states]
    rescored = await rubric.score_group(states)
    assert [(s["reward"], s["metrics"], s["advantage"]) for s in states] == harness_scores
    assert rescored["reward"] == [r for r, _, _ in harness_scores] and rescored["metrics"]["length"] == [1.0, 2.0, 3.0]
    single = await rubric.score_rollout(states[0])
    assert single["metrics"]["length"] == 1.0


async def test_rubric_group_scores_every_rubric(client: vf.ClientConfig) -> None:
    group = vf.RubricGroup([vf.Rubric([length]), vf.Rubric([lambda completion: 1.0], [0.0])])
    state = await env_with(group).rollout(rows()[0] | {"example_id": 0}, client, "m")
    assert state["metrics"] == {"length": 1.0, "<lambda>": 1.0} and state["reward"] == 1.0


async def test_judge_rubric_with_its_own_client_and_with_the_rollouts_model(
    mock: MockModelServer, client: vf.ClientConfig
) -> None:
    from openai import AsyncOpenAI

    with MockModelServer(
        lambda request: Reply.text("yes" if "Ground truth answer" in request.last_user_text else "no")
    ) as judge_server:

        async def judged(judge: Any, prompt: Any, completion: Any, answer: Any, state: vf.State) -> float:
            verdict = await judge(prompt, completion, answer, state)
            again = await judge(prompt, completion, answer, state)  # cached: one judge call
            return float(verdict == again == "yes")

        rubric = vf.JudgeRubric(
            funcs=[judged],
            judge_client=AsyncOpenAI(base_url=judge_server.url, api_key="k"),
            judge_model="judge-model",
            judge_sampling_args={"temperature": 0.0},
        )
        state = await env_with(rubric).rollout(rows()[0] | {"example_id": 0}, client, "m")
        assert state["reward"] == 1.0 and len(judge_server.requests) == 1
        sent = judge_server.requests[0].body
        assert sent["model"] == "judge-model" and sent["temperature"] == 0.0 and "hello world" in sent["messages"][0]["content"]
        with_config = vf.JudgeRubric(
            funcs=[judged], judge_client=vf.ClientConfig(api_base_url=judge_server.url, max_retries=0), judge_model="j"
        )
        state = await env_with(with_config).rollout(rows()[0] | {"example_id": 0}, client, "m")
        assert state["reward"] == 1.0 and len(judge_server.requests) == 2
    # no judge_client: the rollout's own model through its endpoint, forwarded after the program, not a turn
    mock.reset()
    mock.responder = lambda request: Reply.text("yes")
    state = await env_with(vf.JudgeRubric(funcs=[judged])).rollout(rows()[0] | {"example_id": 0}, client, "m")
    assert state["reward"] == 1.0 and len(state["trajectory"]) == 1 and len(mock.requests) == 2
    with pytest.raises(vf.ConfigError, match="judge_model is required"):
        vf.JudgeRubric(judge_client=AsyncOpenAI(base_url=mock.url, api_key="k"))


async def test_math_rubric_checks_equivalence(mock: MockModelServer, client: vf.ClientConfig) -> None:
    pytest.importorskip("math_verify")
    env = vf.SingleTurnEnv(dataset=[{"question": "half?", "answer": "0.5"}], rubric=vf.MathRubric())
    mock.script(Reply.text("<think>hmm</think>It is \\boxed{\\frac{1}{2}}"), Reply.text("\\boxed{3}"), Reply.text("x" * 600))
    rewards = [
        (await env.rollout({"question": "half?", "answer": "0.5", "example_id": 0}, client, "m"))["reward"] for _ in range(3)
    ]
    assert rewards == [1.0, 0.0, 0.0]


async def test_older_call_forms_score_rollout_keywords_and_env_response_tuples(client: vf.ClientConfig) -> None:
    rubric = vf.Rubric([length, lambda completion, answer: float(completion[-1]["content"] == answer)])
    # seed 003 (tinker cookbook): rubric.score_rollout(prompt=..., completion=..., answer=..., state=...)
    scores = await rubric.score_rollout(
        prompt=[{"role": "user", "content": "q"}], completion=[{"role": "assistant", "content": "ab"}], answer="ab", state={}
    )  # type: ignore[arg-type]
    assert scores == {"reward": 3.0, "metrics": {"length": 2.0, "<lambda>": 1.0}}

    class Older(vf.MultiTurnEnv):  # seed 004: env_response returns (messages, state)
        async def env_response(self, messages: Any, state: vf.State, **kwargs: Any) -> Any:
            return [{"role": "user", "content": "more"}], state

    state = await Older(dataset=rows(), max_turns=2).rollout(rows()[0] | {"example_id": 0}, client, "m")
    assert state["error"] is None and state["completion"][1] == {"role": "user", "content": "more"}
