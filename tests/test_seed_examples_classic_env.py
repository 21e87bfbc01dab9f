"""The seeds' code examples for environments, rubrics, decorators, clients and utilities.

Each example runs as the seed writes it, with ``import v1 as vf`` for ``import verifiers as vf``
and the model URL pointed at the mock server; placeholders the seed leaves (``...``) are filled in
minimally and say so. Parsers, messages, logging, EvalConfig, the Prime plugin and vf-eval are in
tests/test_seed_examples_classic_api.py. Examples that cannot run here, and why:

- seed 001 ``SandboxEnv``/``PythonEnv``/``OpenEnvEnv``/``SWEDebugEnv``: the seed gives signatures
  only (no example); ``docker_image``, ``openenv_project`` and ``SandboxTaskSet`` name remote
  Prime sandbox images and OpenEnv builds. docs/classic.md runs them on the local sandbox.
- seed 001 ``RendererClient``: needs the optional ``renderers`` package, which v1 does not have
  (``vf.RendererClient`` is absent: an ``AttributeError``, tested below).
- seed 003 ``TinkerAsyncOpenAIClient``: Tinker's sampling client (a remote service); a plain
  ``AsyncOpenAI`` on the mock stands in. Its ``rollout(client=, model=, prompt=, answer=)``
  returning ``(completion, state)`` contradicts seed 001's ``rollout(input, client, model,
  sampling_args) -> State``, so it is refused in one line (tested below). Its
  ``vf_env.rubric.score_rollout(...)`` runs as written: on ``load_environment("reverse-text")`` (a
  Taskset/Harness ``Env``) the rubric is the taskset's rewards.
- seed 003 ``vf.JudgeRubric(model=, prompt_template=)``: seed 001 names them ``judge_model`` and
  ``judge_prompt``; the seed-003 names are refused in one line (tested below).
- seed 004 ``Environment(client=, model=)``, ``ToolEnv(max_steps=)`` and ``JudgeRubric(judge_models=,
  client=, template=)``: the older constructors, replaced in seed 001; refused in one line (tested below).
- seed 004 ``MyCustomEnv.is_completed(messages, state)``: v1 never calls an ``is_completed``
  override (stop conditions are ``@vf.stop`` methods, checked before every turn and in the
  endpoint), so the seed's class is refused in one line (tested below) and runs with its
  condition written as a ``@vf.stop`` method.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from openai import AsyncOpenAI

import v1 as vf
from v1.testing import MockModelServer, MockRequest, Reply

MCP_SERVER = str(Path(__file__).parent / "tools" / "mcp_server.py")
ROWS = [{"question": "hello", "answer": "olleh"}, {"question": "abc", "answer": "cba"}]


def reverse(request: MockRequest) -> Reply:
    return Reply.text(request.last_user_text[::-1])


def exact(completion: Any, answer: str) -> float:
    return float(completion[-1]["content"] == answer)


def test_seed_001_environment_is_abstract_and_its_subclasses_take_its_constructor(
    mock: MockModelServer, client_config: vf.ClientConfig
) -> None:
    with pytest.raises(TypeError):
        vf.Environment()  # type: ignore[abstract]
    mock.responder = reverse
    env = vf.SingleTurnEnv(
        dataset=ROWS,
        eval_dataset=ROWS[:1],
        system_prompt="Reverse the text.",
        few_shot=[{"role": "user", "content": "ab"}, {"role": "assistant", "content": "ba"}],
        parser=vf.Parser(),
        rubric=vf.Rubric([exact]),
        sampling_args={"temperature": 0.5},
        message_type="chat",
        max_workers=8,
        env_id="reverse",
        env_args={},
        max_seq_len=4096,
        score_rollouts=True,
        pass_threshold=0.5,
    )
    assert isinstance(env, vf.Environment)
    outputs = env.evaluate_sync(client_config, "mock", num_examples=1, rollouts_per_example=1)
    assert [o["reward"] for o in outputs["outputs"]] == [1.0]
    sent = mock.requests[0].body
    assert sent["temperature"] == 0.5 and [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "user"]


def test_seed_001_ensure_keys_example(monkeypatch: pytest.MonkeyPatch) -> None:
    def load_environment(api_key_var: str = "OPENAI_API_KEY") -> vf.Environment:
        vf.ensure_keys([api_key_var])
        # now safe to use os.environ[api_key_var]
        return vf.SingleTurnEnv(dataset=[{"question": os.environ[api_key_var], "answer": ""}])  # filled in: the seed's "..."

    monkeypatch.delenv("SEED_MISSING_KEY", raising=False)
    with pytest.raises(vf.MissingKeyError) as missing:
        load_environment("SEED_MISSING_KEY")
    assert isinstance(missing.value, ValueError) and missing.value.keys == ["SEED_MISSING_KEY"]
    assert "SEED_MISSING_KEY" in str(missing.value)
    monkeypatch.setenv("SEED_MISSING_KEY", "sk-x")
    assert load_environment("SEED_MISSING_KEY").get_dataset()[0]["question"] == "sk-x"


class Game(vf.MultiTurnEnv):
    """Seed 001's decorators on one env; the bodies (the seed's "...") are filled in to record calls."""

    calls: ClassVar[list[str]] = []

    async def env_response(self, messages: Any, state: vf.State, **kwargs: Any) -> Any:
        return [{"role": "user", "content": "again"}]  # filled in

    @vf.stop
    async def my_condition(self, state: vf.State) -> bool:
        """Return True to end the rollout."""
        self.calls.append("my_condition")
        return len(state["trajectory"]) >= 2  # filled in

    @vf.stop(priority=10)  # Higher priority runs first
    async def early_check(self, state: vf.State) -> bool:
        self.calls.append("early_check")
        return False  # filled in

    @vf.cleanup
    async def my_cleanup(self, state: vf.State) -> None:
        """Called after each rollout completes."""
        self.calls.append("my_cleanup")

    @vf.cleanup(priority=10)
    async def early_cleanup(self, state: vf.State) -> None:
        self.calls.append("early_cleanup")

    @vf.teardown
    async def my_teardown(self) -> None:
        """Called when environment is destroyed."""
        self.calls.append("my_teardown")

    @vf.teardown(priority=10)
    async def early_teardown(self) -> None:
        self.calls.append("early_teardown")


async def test_seed_001_stop_cleanup_teardown_decorators(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    env = Game(dataset=ROWS, rubric=vf.Rubric([exact]), max_turns=5)
    Game.calls = []
    state = await env.rollout(ROWS[0] | {"example_id": 0}, client_config, "mock")
    assert state["stop_condition"] == "my_condition" and len(state["trajectory"]) == 2
    checks = [call for call in Game.calls if call in ("early_check", "my_condition")]
    assert checks[:2] == ["early_check", "my_condition"]  # priority 10 first
    assert Game.calls[-2:] == ["early_cleanup", "my_cleanup"]
    await env.harness.teardown()
    assert Game.calls[-2:] == ["early_teardown", "my_teardown"]
    assert len(mock.requests) == 2


def my_reward(
    completion: vf.Messages,
    answer: str = "",
    prompt: vf.Messages | None = None,
    state: vf.State | None = None,
    parser: vf.Parser | None = None,  # if rubric has parser
    info: vf.Info | None = None,
    **kwargs: Any,
) -> float:
    assert parser is not None and state is not None and prompt and info == {"level": 1}  # filled in: the seed's "..."
    return float(parser.parse_answer(completion) == answer)


def my_group_reward(
    completions: list[vf.Messages],
    answers: list[str],
    states: list[vf.State],
    # ... plural versions of individual args
    **kwargs: Any,
) -> list[float]:
    lengths = [len(vf.Parser().parse_answer(c) or "") for c in completions]  # filled in: the longest answer scores 1
    return [float(n == max(lengths)) for n in lengths]


async def test_seed_001_rubric_with_reward_metric_class_object_and_group_functions(
    mock: MockModelServer, client_config: vf.ClientConfig
) -> None:
    replies = iter(["cba", "wrong answer"])
    mock.responder = lambda request: Reply.text(next(replies))
    rubric = vf.Rubric(funcs=[my_reward], weights=[1.0], parser=vf.Parser())
    rubric.add_reward_func(my_group_reward, weight=0.5)
    rubric.add_class_object("limit", 5)
    rubric.add_metric(lambda completion, limit: float(len(completion[-1]["content"]) <= limit))
    env = vf.SingleTurnEnv(dataset=[ROWS[1] | {"info": {"level": 1}}], rubric=rubric)
    states = await env.run_group([ROWS[1] | {"info": {"level": 1}}] * 2, client_config, "mock")
    assert [s["reward"] for s in states] == [1.0, 0.5]
    assert states[0]["metrics"] == {"my_reward": 1.0, "my_group_reward": 0.0, "<lambda>": 1.0}
    assert states[1]["metrics"] == {"my_reward": 0.0, "my_group_reward": 1.0, "<lambda>": 0.0}


async def test_seed_001_judge_math_and_rubric_group(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    async def judged(judge: Any, prompt: Any, completion: Any, answer: Any, state: vf.State) -> float:
        return float((await judge(prompt, completion, answer, state)).startswith("yes"))

    with MockModelServer(lambda request: Reply.text("yes" if "0.5" in request.last_user_text else "no")) as judge:
        judge_rubric = vf.JudgeRubric(funcs=[judged], judge_client=vf.ClientConfig(api_base_url=judge.url), judge_model="j")
        group = vf.RubricGroup([vf.MathRubric(), judge_rubric])
        mock.script(Reply.text("<think>half</think>\\boxed{\\frac{1}{2}}"))
        env = vf.SingleTurnEnv(dataset=[{"question": "half?", "answer": "0.5"}], rubric=group)
        state = await env.rollout({"question": "half?", "answer": "0.5", "example_id": 0}, client_config, "mock")
        assert judge.requests[0].body["model"] == "j"
    assert state["metrics"] == {"correct_answer": 1.0, "judged": 1.0} and state["reward"] == 2.0


async def test_seed_001_env_group_routes_rows_by_env_id(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverse
    env1 = vf.SingleTurnEnv(dataset=ROWS[:1], rubric=vf.Rubric([exact]))
    env2 = vf.Env(vf.Taskset(source=ROWS[1:], rewards=[exact]))
    env3 = vf.SingleTurnEnv(dataset=[{"question": "xyz", "answer": "nope"}], rubric=vf.Rubric([exact]))
    env_group = vf.EnvGroup(
        envs=[env1, env2, env3],
        env_names=["math", "code", "qa"],  # optional
    )
    dataset = env_group.get_dataset()
    assert [row["info"]["env_id"] for row in dataset] == ["math", "code", "qa"]
    outputs = await env_group.generate(dataset, client_config, "mock")
    rewards = {o["example_id"]: o["reward"] for o in outputs["outputs"]}
    assert rewards == {"math/0": 1.0, "code/0": 1.0, "qa/0": 0.0}
    assert all("env_id" not in o for o in outputs["outputs"])  # routing metadata, not a top-level field


async def test_seed_001_harness_run_and_state_for_task_borrow(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverse
    harness = vf.Harness(client=client_config, model="mock", max_turns=1)
    task = vf.Task({"prompt": [{"role": "user", "content": "abc"}], "answer": "cba"})
    state = await harness.run(task, state=None)
    assert state["completion"][-1]["content"] == "cba" and state["is_completed"]

    async def program(task: vf.Task, state: vf.State) -> None:
        child_task = vf.Task({"prompt": [{"role": "user", "content": "xyz"}]})  # filled in: the seed names no child
        child_state = state.for_task(child_task, borrow=["model"])  # no sandbox here: see the module docstring
        child_state = await child_harness.run(child_task, child_state)
        state["child_answer"] = child_state["completion"][-1]["content"]

    child_harness = vf.Harness(max_turns=1)  # no client or model of its own: both borrowed
    parent = await vf.Harness(program=program, client=client_config, model="mock").run(task)
    assert parent["child_answer"] == "zyx" and mock.requests[-1].body["model"] == "mock"


async def test_seed_001_env_without_harness_uses_the_base_harness(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverse
    env = vf.Env(vf.Taskset(source=ROWS, rewards=[exact]))
    assert isinstance(env, vf.Environment) and isinstance(env.harness, vf.Harness)
    outputs = await env.generate(env.get_dataset(), client_config, "mock")
    assert [o["reward"] for o in outputs["outputs"]] == [1.0, 1.0]


async def test_seed_001_toolset_with_an_mcp_tool(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    def responder(request: MockRequest) -> Reply:
        if request.last_message.get("role") == "tool":
            return Reply.text(str(request.last_message["content"]))
        return Reply.tool("add", {"a": 2, "b": 3})

    mock.responder = responder
    toolset = vf.Toolset(tools=[vf.MCPTool(sys.executable, args=[MCP_SERVER], env=None, cwd=None)], show=["add"])
    harness = vf.Harness(client=client_config, model="mock", toolsets=[toolset], max_turns=3)
    state = await harness.run({"prompt": [{"role": "user", "content": "2+3?"}]})
    assert [t["function"]["name"] for t in mock.requests[0].tools] == ["add"]
    assert state["completion"][-1]["content"] == "5"


async def test_seed_001_client_get_response_and_close(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverse
    client = vf.OpenAIChatCompletionsClient(client_config)
    assert isinstance(client, vf.Client) and isinstance(client.client, AsyncOpenAI)
    tool = vf.Tool(name="noop", description="Does nothing.", parameters={"type": "object", "properties": {}})
    response = await client.get_response([{"role": "user", "content": "abc"}], "mock", {"max_tokens": 8}, tools=[tool])
    await client.close()
    assert isinstance(response, vf.Response) and response.message.content == "cba"
    assert response.message.finish_reason == "stop" and response.model
    assert mock.requests[0].body["max_tokens"] == 8 and mock.requests[0].tools[0]["function"]["name"] == "noop"
    assert vf.RendererClient.__name__ == "RendererClient"  # seed 001 names it at the top level (issue 33)


async def test_seed_001_utility_functions(
    mock: MockModelServer, client_config: vf.ClientConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = vf.load_example_dataset("gsm8k")
    assert dataset[0]["answer"] == "12" and vf.extract_hash_answer(dataset[0]["info"]["solution"]) == "12"
    assert vf.extract_boxed_answer("so \\boxed{42}") == "42"
    assert vf.extract_boxed_answer("no box", strict=True) == "" and vf.extract_boxed_answer("no box") == "no box"
    assert vf.extract_hash_answer("no marker") is None
    env = vf.load_environment("primeintellect/gsm8k")  # the owner prefix of a hub id; gsm8k is bundled
    assert isinstance(env, vf.Environment) and env.get_dataset()[0]["answer"] == "12"
    mock.script(Reply.text("\\boxed{12}"))
    outputs = await env.generate(env.get_dataset(n=1), client_config, "mock")
    vf.print_prompt_completions_sample(outputs, n=3)
    printed = capsys.readouterr().out
    assert "muffins" in printed and "\\boxed{12}" in printed and outputs["outputs"][0]["reward"] == 1.0
    logger = vf.setup_logging(level="INFO")
    assert logger.getEffectiveLevel() == 20


async def test_seed_000_chatan_run_rollout_both_forms(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverse
    env = vf.SingleTurnEnv(dataset=ROWS, rubric=vf.Rubric([exact]))
    client = AsyncOpenAI(base_url=mock.url, api_key="x")
    input_data = {"prompt": [{"role": "user", "content": "abc"}], "example_id": 0, "task": env.env_id, "answer": "cba"}
    result = await env.run_rollout(input_data, client, "mock", gen_sampling_args={"temperature": 0.7})
    assert result["completion"] == [{"role": "assistant", "content": "cba"}] and result["reward"] == 1.0
    assert mock.requests[0].body["temperature"] == 0.7
    gen_sem = asyncio.Semaphore(1)  # "the verifiers API requires a gen_sem async context manager"
    again = await env.run_rollout(gen_sem, input_data, client_config, "mock", {"temperature": 0.2})
    assert again["reward"] == 1.0 and mock.requests[1].body["temperature"] == 0.2
    with pytest.raises(vf.ConfigError, match="pass sampling_args or gen_sampling_args, not both"):
        await env.run_rollout(input_data, client, "mock", {"temperature": 1}, gen_sampling_args={"temperature": 0})


async def test_seed_003_tinker_style_rollout_then_rubric_score(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverse
    vf_env = vf.load_environment("reverse-text")
    assert isinstance(vf_env, vf.Environment) and vf_env.get_dataset(n=1)
    prompt, answer = [{"role": "user", "content": "abc"}], "cba"
    local_client = AsyncOpenAI(base_url=mock.url, api_key="x")  # stands in for TinkerAsyncOpenAIClient
    older_completion, _ = await vf_env.rollout(client=local_client, model="tinker", prompt=prompt, answer=answer)
    assert older_completion == [{"role": "assistant", "content": "cba"}]
    # Seed 001's form, on a classic env first.
    classic = vf.SingleTurnEnv(dataset=ROWS, rubric=vf.Rubric([exact]))
    state = await classic.rollout({"prompt": prompt, "answer": answer, "example_id": 0}, local_client, "tinker")
    completion = state["completion"]
    rs = await classic.rubric.score_rollout(prompt=prompt, completion=completion, answer=answer, state=state)
    assert rs == {"reward": 1.0, "metrics": {"exact": 1.0}}
    wrong = await classic.rubric.score_rollout(prompt=prompt, completion=[{"role": "assistant", "content": "x"}], answer=answer)
    assert wrong["reward"] == 0.0
    # ...and on the Taskset/Harness Env itself, as the cookbook calls it: its rubric is the taskset's rewards.
    rs = await vf_env.rubric.score_rollout(prompt=prompt, completion=completion, answer=answer, state=state)
    assert rs["reward"] == 1.0 and set(rs["metrics"]) == set(vf_env.rubric.names()) != set()
    wrong = await vf_env.rubric.score_rollout(prompt=prompt, completion=[{"role": "assistant", "content": "x"}], answer=answer)
    assert wrong["reward"] < 0.5
    with pytest.raises(vf.ConfigError, match="add a reward there"):
        vf_env.rubric.add_reward_func(exact)


def test_seed_003_and_004_older_judge_rubric_names_are_accepted() -> None:
    rubric = vf.JudgeRubric(model="gpt-4o-mini", prompt_template="Evaluate the answer...")
    assert rubric.judge_model == "gpt-4o-mini" and rubric.judge_prompt == "Evaluate the answer..."
    older = vf.JudgeRubric(judge_models="m", client=AsyncOpenAI(api_key="x"), template="t")
    assert older.judge_model == "m" and older.judge_prompt == "t" and older.judge_client is not None


class MyCustomEnv(vf.MultiTurnEnv):
    """Seed 004's custom env; its ``is_completed(messages, state)`` is a ``@vf.stop`` here (see the report)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Add custom initialization
        self.reply = "more"  # filled in

    @vf.stop
    async def some_condition(self, state: vf.State) -> bool:
        """Define completion criteria."""
        return len(state["trajectory"]) >= 2  # filled in: the seed's `some_condition`

    def env_response(self, messages: Any, state: vf.State, **kwargs: Any) -> Any:  # type: ignore[override]
        """Define environment responses."""
        state["env_turns"] = state.get("env_turns", 0) + 1  # filled in
        response_message, updated_state = {"role": "user", "content": self.reply}, state
        return response_message, updated_state


class MyCustomRubric(vf.Rubric):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_reward_func(self.custom_reward)  # filled in: the seed defines it without adding it

    def custom_reward(self, completion: Any, answer: str, **kwargs: Any) -> float:
        """Custom reward function."""
        # Your evaluation logic here
        reward_score = float(completion[-1]["content"] == answer)  # filled in
        return reward_score


async def test_seed_004_custom_env_and_rubric(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverse
    env = MyCustomEnv(dataset=ROWS, rubric=MyCustomRubric(), max_turns=5)
    state = await env.rollout(ROWS[1] | {"example_id": 0}, client_config, "mock")
    assert state["stop_condition"] == "some_condition" and state["env_turns"] == 1 and state["error"] is None
    assert mock.requests[1].last_user_text == "more" and state["reward"] == 0.0  # the last answer is "erom"
    assert state["metrics"] == {"custom_reward": 0.0}
    first = await MyCustomRubric().score_rollout(
        prompt=ROWS[1]["question"], completion=state["trajectory"][0]["completion"], answer="cba"
    )
    assert first["reward"] == 1.0


def test_seed_004_is_completed_override_is_a_stop_condition() -> None:
    class MyCustomEnv(vf.MultiTurnEnv):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            # Add custom initialization

        def is_completed(self, messages: Any, state: vf.State, **kwargs: Any) -> bool:  # type: ignore[override]
            """Define completion criteria."""
            return len(state["trajectory"]) >= 2  # filled in: the seed's `some_condition`

        def env_response(self, messages: Any, state: vf.State, **kwargs: Any) -> Any:  # type: ignore[override]
            """Define environment responses."""
            return {"role": "user", "content": "more"}, state  # filled in

    env = MyCustomEnv(dataset=ROWS)  # issue 33: the override runs as a stop condition
    assert "_is_completed_stop" in [handler.name for handler in env.classic_handlers()]


def test_seed_004_older_constructors_keep_their_keywords() -> None:
    assert vf.SingleTurnEnv(dataset=ROWS, client=AsyncOpenAI(api_key="x"), model="m").model == "m"  # seed 001: attributes
    assert vf.ToolEnv(tools=[len], max_steps=3).max_turns == 3
