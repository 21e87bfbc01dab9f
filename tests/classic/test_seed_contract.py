"""The seed's classic contract as code written for it uses it (issue #33, items 1-12).

Each test is a call form from seed 001 (or seed 004/003 where 001 does not contradict it, seed
000 for chatan's `run_rollout`) or from verifiers' published example environments, run over real
HTTP against `v1.testing`'s mock model server.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from classic_reverse import reversed_exactly, rows

import v1 as vf
from tests.tools.patience import HANG_S
from v1.classic._verifiers_alias import install_verifiers_alias, uninstall_verifiers_alias
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


@pytest.fixture
def client(mock: MockModelServer) -> vf.ClientConfig:
    return vf.ClientConfig(api_base_url=mock.url, max_retries=0)


@pytest.fixture
def verifiers() -> Iterator[Any]:
    """``import verifiers as vf`` through the opt-in alias, removed afterwards."""
    install_verifiers_alias()
    import verifiers

    yield verifiers
    uninstall_verifiers_alias()


def single(**kwargs: Any) -> vf.SingleTurnEnv:
    kwargs.setdefault("dataset", rows())
    kwargs.setdefault("rubric", vf.Rubric([reversed_exactly]))
    return vf.SingleTurnEnv(**kwargs)


def first_input() -> dict[str, Any]:
    return {"prompt": [{"role": "user", "content": "hello"}], "answer": "olleh", "example_id": 0, "info": {"k": 1}}


# 1. Constructor keywords become attributes (set_kwargs), one warning on a near miss.


def test_unknown_constructor_keywords_become_attributes(client: vf.ClientConfig) -> None:
    env = vf.SingleTurnEnv(client=client, model="m", dataset=rows(), parser=vf.Parser(), rubric=vf.Rubric())
    assert env.client is client
    assert env.model == "m"


def test_a_near_miss_of_a_known_setting_warns_once() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = single(sytem_prompt="x")
    near = [w for w in caught if "sytem_prompt" in str(w.message)]
    assert len(near) == 1 and "system_prompt" in str(near[0].message)
    assert env.sytem_prompt == "x"


# 2-3. The classic State is the seed's free dict; INPUT_FIELDS forward to the nested input.


def test_classic_state_is_a_free_dict(verifiers: Any) -> None:
    from verifiers.types import RolloutInput, State

    state = State(input=RolloutInput(prompt=[{"role": "user", "content": "1+1"}], answer="2", example_id=0))
    state["trajectory"] = []
    state["is_completed"] = True
    state["error"] = None
    state["reward"] = 1.0
    assert state["is_completed"] is True and state["trajectory"] == []


def test_input_fields_forward_to_the_nested_input(verifiers: Any) -> None:
    from verifiers.types import RolloutInput, State

    state = State(input=RolloutInput(prompt=[{"role": "user", "content": "1+1"}], answer="2", example_id=0))
    assert state["answer"] == "2" and state["example_id"] == 0
    state["answer"] = "3"
    assert state["input"]["answer"] == "3"
    assert "answer" not in dict.keys(state)
    assert json.loads(json.dumps(state))["input"]["answer"] == "3"


def test_env_response_reads_answer_and_info_from_state(client: vf.ClientConfig) -> None:
    class Peek(vf.MultiTurnEnv):
        async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
            state["seen"] = [state["answer"], state["info"]["k"]]
            state["final_env_response"] = [{"role": "user", "content": "done"}]
            return state["final_env_response"]

    env = Peek(dataset=[{"question": "hello", "answer": "olleh", "info": {"k": 1}}], rubric=vf.Rubric([reversed_exactly]))
    state = asyncio.run(env.rollout(env.get_dataset()[0], client, "m"))
    assert state["error"] is None
    assert state["seen"] == ["olleh", 1]


def test_a_rollout_writing_answer_reaches_the_rubric_once(client: vf.ClientConfig) -> None:
    class Fix(vf.MultiTurnEnv):
        async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
            state["answer"] = "olleh"
            state["final_env_response"] = [{"role": "user", "content": "done"}]
            return state["final_env_response"]

    def last_reply_reversed(completion: Any, answer: str) -> float:
        return float(completion[0]["content"] == answer)

    env = Fix(dataset=[{"question": "hello", "answer": "wrong"}], rubric=vf.Rubric([last_reply_reversed]))
    output = env.generate_sync(env.get_dataset(), client, "m")["outputs"][0]
    assert output["reward"] == 1.0 and output["answer"] == "wrong"  # the saved row is the task's, held once
    assert "input" not in output


# 4-6. Direct calls outside an eval; init_state's fields; the seed's record types.


def test_a_subclass_that_implements_rollout_calls_the_model_directly(client: vf.ClientConfig) -> None:
    class Direct(vf.Environment):
        async def rollout(self, input: Any, client: Any, model: str, sampling_args: Any = None) -> Any:
            state = await self.init_state(input, client, model, sampling_args)
            response = await self.get_model_response(state, state["prompt"])
            state["completion"] = [{"role": "assistant", "content": response.message.content}]
            return state

    env = Direct(dataset=rows(), rubric=vf.Rubric([reversed_exactly]))
    outputs = env.generate_sync(env.get_dataset(n=2), client, "m")["outputs"]
    assert [o["reward"] for o in outputs] == [1.0, 1.0]
    assert [len(o["trajectory"]) for o in outputs] == [1, 1]  # the call went through the rollout's endpoint
    assert outputs[0]["trajectory"][0]["extras"]["dialect"] == "chat_completions"


def test_an_own_rollout_calling_the_base_rollout_is_one_clear_error(client: vf.ClientConfig) -> None:
    class Wrapper(vf.Environment):
        async def rollout(self, input: Any, client: Any, model: str, sampling_args: Any = None) -> Any:
            await self.init_state(input, client, model, sampling_args)
            return await super().rollout(input, client, model, sampling_args)

    env = Wrapper(dataset=rows(), rubric=vf.Rubric([reversed_exactly]))
    output = env.generate_sync(env.get_dataset(n=1), client, "m")["outputs"][0]
    assert output["error"]["type"] == "NotImplementedError" and "calls the base rollout" in output["error"]["message"]


def test_init_state_and_get_model_response_outside_an_eval(client: vf.ClientConfig) -> None:
    env = single()

    async def direct() -> tuple[Any, Any]:
        state = await env.init_state(first_input(), client, "m")
        return state, await env.get_model_response(state, state["prompt"])

    state, response = asyncio.run(direct())
    for field in ("input", "client", "model", "sampling_args", "tool_defs", "timing", "trajectory"):
        assert field in state, field
    assert state["model"] == "m" and state["answer"] == "olleh"
    assert isinstance(response, vf.Response) and response.message.content == "olleh"
    assert len(state["trajectory"]) == 1 and state["trajectory"][0]["response"]["id"] == response.id


def test_a_directly_driven_rollout_closes_its_endpoint(client: vf.ClientConfig) -> None:
    from v1.interception import get_endpoint

    env = single()

    async def drive(finish: bool) -> tuple[Any, int, int]:
        endpoint = await get_endpoint()
        state = await env.init_state(first_input(), client, "m")
        await env.get_model_response(state, state["prompt"])
        opened = len(endpoint.sessions)
        if finish:
            await env.finish_state(state)
        else:
            await env.teardown()
        return state, opened, len(endpoint.sessions)

    for finish in (True, False):
        state, opened, left = asyncio.run(drive(finish))
        assert (opened, left) == (1, 0)
        assert state.runtime.finalized and json.loads(json.dumps(state))["trajectory"][0]["response"]["id"]
        assert state["is_completed"] is True


def test_an_env_group_drives_a_rollout_on_its_rows_environment(client: vf.ClientConfig) -> None:
    from v1.interception import get_endpoint

    first, second = single(), single()
    group = vf.EnvGroup([first, second], env_names=["a", "b"])
    row = next(r for r in group.get_dataset() if r["info"]["env_id"] == "b")

    async def drive() -> tuple[Any, Any, int]:
        state = await group.init_state(row, client, "m")
        response = await group.get_model_response(state, state["prompt"])
        await group.teardown()
        return state, response, len((await get_endpoint()).sessions)

    state, response, left = asyncio.run(drive())
    assert response.message.content == row["answer"] and left == 0 and state.runtime.finalized
    assert second._direct == {} and first._direct == {}


def test_saved_outputs_keep_json_records(client: vf.ClientConfig) -> None:
    def reverse_text(text: str) -> str:
        """Reverse a text."""
        raise ValueError("broken tool")

    env = vf.ToolEnv(tools=[reverse_text], dataset=rows(), rubric=vf.Rubric([reversed_exactly]), stop_errors=[ValueError])
    output = env.generate_sync(env.get_dataset(n=1), client, "m")["outputs"][0]
    assert isinstance(output["timing"], dict) and isinstance(output["error"], dict)
    assert isinstance(output["trajectory"][0]["response"], dict)
    json.dumps(output)


def test_records_are_the_seed_types(client: vf.ClientConfig) -> None:
    def reverse_text(text: str) -> str:
        """Reverse a text."""
        raise ValueError("broken tool")

    env = vf.ToolEnv(tools=[reverse_text], dataset=rows(), rubric=vf.Rubric([reversed_exactly]), stop_errors=[ValueError])
    state = asyncio.run(env.rollout(first_input(), client, "m"))
    assert isinstance(state["timing"], vf.RolloutTiming) and isinstance(state["timing"].model.spans, list)
    assert isinstance(state["error"], vf.Error)
    assert isinstance(state["trajectory"][0]["response"], vf.Response)
    assert state["trajectory"][0]["response"].message.tool_calls


# 7-9. EnvGroup without names; load_environment keywords; top-level exports.


def test_env_group_of_two_envs_of_one_class_without_names(client: vf.ClientConfig) -> None:
    group = vf.EnvGroup([single(), single()])
    assert len(group.env_names) == 2 and len(set(group.env_names)) == 2


def test_load_environment_forwards_keyword_arguments() -> None:
    env = vf.load_environment("classic_reverse", kind="multi")
    assert env.env_id == "classic_multi"


@pytest.mark.parametrize(
    "name", ["RendererClient", "NeMoRLChatCompletionsClient", "Endpoint", "Endpoints", "VersionInfo", "MessageType"]
)
def test_seed_names_are_exported_at_the_top_level(name: str) -> None:
    assert hasattr(vf, name)


# 10. What the published environments use beyond the seed's text.


def test_a_dataset_builder_is_called_lazily_and_once(client: vf.ClientConfig) -> None:
    calls = []

    def build() -> list[dict[str, Any]]:
        calls.append(1)
        return rows()

    env = vf.SingleTurnEnv(dataset=build, eval_dataset=build, rubric=vf.Rubric([reversed_exactly]))
    assert calls == []
    assert len(env.get_dataset(n=2)) == 2
    env.get_dataset()
    assert calls == [1]
    outputs = env.evaluate_sync(client, "m", num_examples=1)["outputs"]
    assert outputs[0]["reward"] == 1.0


def test_the_published_environments_helpers_import(verifiers: Any) -> None:
    from verifiers.utils.data_utils import BOXED_SYSTEM_PROMPT, extract_boxed_answer, load_example_dataset

    assert "\\boxed{}" in BOXED_SYSTEM_PROMPT and extract_boxed_answer("\\boxed{4}") == "4"
    assert len(load_example_dataset("gsm8k", "test", n=3)) == 3
    assert verifiers.get_messages([{"role": "assistant", "content": "hi"}], role="assistant")[0].content == "hi"
    for name in ("ConfigData", "ConfigMap", "Handler", "CodeMathEnv", "ReasoningGymEnv"):
        assert hasattr(verifiers, name), name


def test_reasoning_gym_env_without_the_extra_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    with pytest.raises(vf.NotSupportedError, match=r"needs reasoning-gym, which is not installed: pip install 'v1\[rg\]'"):
        vf.ReasoningGymEnv(gym="arc_1d")


def test_reasoning_gym_env_runs_with_the_extra(client: vf.ClientConfig) -> None:
    env = vf.ReasoningGymEnv(gym="arc_1d", num_train_examples=2, num_eval_examples=2)
    outputs = env.evaluate_sync(client, "m", num_examples=2)["outputs"]
    assert len(outputs) == 2 and all(o.get("error") is None for o in outputs)


def test_a_v1_tool_asking_for_state_gets_the_rollout_state(client: vf.ClientConfig) -> None:
    async def reverse_text(text: str, state: Any) -> str:
        """Reverse a text."""
        state["tool_saw_state"] = True
        return text[::-1]

    taskset = vf.Taskset(
        source=[{"prompt": [{"role": "user", "content": "abc"}], "answer": "cba"}], toolsets=[vf.Toolset(tools=[reverse_text])]
    )
    env = vf.Env(taskset, vf.Harness(max_turns=3))
    state = asyncio.run(env.rollout(env.get_dataset()[0], client, "m"))
    assert state["error"] is None and state["tool_saw_state"] is True
    assert "state" not in json.dumps(state["tool_defs"])


# 11. Hidden checks: RubricGroup with two lambdas; MathRubric parses \boxed{}.


def test_rubric_group_of_two_rubrics_with_lambdas(client: vf.ClientConfig) -> None:
    group = vf.RubricGroup([vf.Rubric([lambda completion: 1.0]), vf.Rubric([lambda completion: 0.5])])
    env = single(rubric=group)
    assert env.generate_sync(env.get_dataset(n=1), client, "m")["outputs"][0]["reward"] == 1.5


@pytest.mark.parametrize(("text", "reward"), [("The answer is 4", 0.0), ("so \\boxed{4}", 1.0)])
def test_math_rubric_reads_the_boxed_answer(client: vf.ClientConfig, text: str, reward: float) -> None:
    rubric = vf.MathRubric()
    score = asyncio.run(
        rubric.score_rollout(prompt=[], completion=[{"role": "assistant", "content": text}], answer="4", state={})
    )
    assert score["reward"] == reward


# 12. Seed 004/003 and chatan (seed 000) call forms.


def test_seed_003_rollout_form_and_001_form_side_by_side(client: vf.ClientConfig) -> None:
    env = single()
    completion, older = asyncio.run(
        env.rollout(client=client, model="m", prompt=[{"role": "user", "content": "abc"}], answer="cba")
    )
    assert completion[-1]["content"] == "cba" and older["reward"] == 1.0
    state = asyncio.run(env.rollout(first_input(), client=client, model="m"))
    assert state["completion"][-1]["content"] == "olleh"


def test_judge_rubric_old_keywords() -> None:
    rubric = vf.JudgeRubric(model="judge-model", prompt_template="Q {question} A {answer} R {response}")
    assert rubric.judge_model == "judge-model" and rubric.judge_prompt.startswith("Q ")


def test_tool_env_max_steps_is_max_turns() -> None:
    def echo(text: str) -> str:
        """Echo."""
        return text

    assert vf.ToolEnv(tools=[echo], dataset=rows(), max_steps=3).max_turns == 3


def test_overridden_is_completed_stops_the_rollout(client: vf.ClientConfig) -> None:
    class Echo(vf.MultiTurnEnv):
        async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
            return [{"role": "user", "content": "again"}]

        async def is_completed(self, state: Any, **kwargs: Any) -> bool:
            return len(state["trajectory"]) >= 2

    env = Echo(dataset=rows(), rubric=vf.Rubric([reversed_exactly]), max_turns=10)
    state = asyncio.run(env.rollout(first_input(), client, "m"))
    assert len(state["trajectory"]) == 2


def test_rubric_old_methods_and_extra_keywords() -> None:
    def a(completion: Any) -> float:
        return 1.0

    def b(completion: Any) -> float:
        return 0.5

    rubric = vf.Rubric([a, b], [1.0, 2.0], vf.Parser(), judge="j")
    assert rubric.judge == "j"
    assert rubric.get_reward_func_names() == ["a", "b"]
    assert rubric.get_reward_funcs() == [a, b] and rubric.get_reward_weights() == [1.0, 2.0]
    assert asyncio.run(rubric.call_reward_func(b, prompt=[], completion=[], answer="", state={})) == 0.5
    group = vf.RubricGroup([rubric, vf.Rubric([lambda completion: 0.0])])
    assert group.get_reward_func_names() == ["a", "b", "<lambda>"]


def test_generate_with_score_rollouts_false(client: vf.ClientConfig) -> None:
    env = single()
    outputs = env.generate_sync(env.get_dataset(n=1), client, "m", score_rollouts=False)["outputs"]
    assert outputs[0]["reward"] in (None, 0.0) and outputs[0]["completion"]


def test_chatan_run_rollout_with_gen_sem(client: vf.ClientConfig) -> None:
    env = single()

    async def run() -> Any:
        return await env.run_rollout(
            first_input(), client, "m", gen_sampling_args={"temperature": 0}, gen_sem=asyncio.Semaphore(1)
        )

    state = asyncio.run(run())
    assert state["completion"][-1]["content"] == "olleh"


# The opt-in never shadows a real verifiers.


def test_the_alias_refuses_when_a_real_verifiers_is_importable(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "verifiers").mkdir()
    (tmp_path / "verifiers" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(vf.ConfigError, match="real 'verifiers' package is installed"):
        install_verifiers_alias()


def test_v1_eval_compat_verifiers_runs_an_unedited_verifiers_module(mock: MockModelServer, tmp_path: Any) -> None:
    (tmp_path / "plain_vf_env.py").write_text(
        "import verifiers as vf\n"
        "from verifiers.utils.data_utils import BOXED_SYSTEM_PROMPT\n\n\n"
        "def load_environment(n: int = 2):\n"
        "    rows = [{'question': w, 'answer': w[::-1]} for w in ['abc', 'hello'][:n]]\n"
        "    rubric = vf.Rubric([lambda completion, answer: float(completion[-1]['content'] == answer)])\n"
        "    return vf.SingleTurnEnv(dataset=rows, system_prompt=BOXED_SYSTEM_PROMPT, rubric=rubric)\n"
    )
    command = [
        sys.executable,
        "-m",
        "v1.cli",
        "eval",
        "plain_vf_env",
        "-b",
        mock.url,
        "-m",
        "m",
        "-n",
        "2",
        "-r",
        "1",
        "--no-save",
        "-d",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    without = subprocess.run(command, capture_output=True, text=True, timeout=HANG_S, env=env, cwd=tmp_path)
    assert without.returncode != 0 and "No module named 'verifiers'" in without.stderr
    done = subprocess.run(
        [*command, "--compat", "verifiers"], capture_output=True, text=True, timeout=HANG_S, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1.000" in done.stdout


def test_reward_functions_get_the_seeds_message_objects(client: vf.ClientConfig) -> None:
    def reverse_text(text: str) -> str:
        """Reverse a text."""
        return text[::-1]

    def called_reverse(completion: Any) -> float:
        calls = completion[0].tool_calls if completion[0].role == "assistant" else []
        return float([call.name for call in calls or []] == ["reverse_text"] and completion[-1]["role"] == "assistant")

    env = vf.ToolEnv(tools=[reverse_text], dataset=rows(), rubric=vf.Rubric([called_reverse]))
    assert env.generate_sync(env.get_dataset(n=1), client, "m")["outputs"][0]["reward"] == 1.0


def test_handler_decorators_take_verifiers_stage_and_check_it() -> None:
    @vf.update(stage="group", priority=10)
    async def summarize(tasks: Any, states: Any) -> None: ...

    @vf.metric(stage="rollout")
    async def one(task: Any, state: Any) -> float:
        return 1.0

    with pytest.raises(
        vf.ConfigError, match=r"@vf.cleanup\(stage='group'\) on 'per_rollout': its arguments make it a rollout handler"
    ):

        @vf.cleanup(stage="group")
        async def per_rollout(task: Any, state: Any) -> None: ...


def test_classic_state_for_task_gives_the_core_state(verifiers: Any) -> None:
    from v1.rollout import State as CoreState

    state = verifiers.State.for_task(verifiers.Task({"prompt": "abc"}).freeze())
    assert isinstance(state, CoreState) and state.task["prompt"][0]["content"] == "abc"


# What verifiers' published example environments call (commit 9c7b82793), beyond the seed's text.


@pytest.mark.parametrize("api", ["chat", "openai_chat_completions"])
def test_endpoint_config_takes_verifiers_api_names_and_gives_api_base(client: vf.ClientConfig, api: str) -> None:
    """dspy_rlm and openai_agents_env: ``get_endpoint_config(api="chat")["api_base"]`` for an OpenAI client."""

    async def program(task: vf.Task, state: vf.State) -> None:
        from openai import AsyncOpenAI

        config = state.get_endpoint_config(api=api)
        sdk = AsyncOpenAI(base_url=config["api_base"], api_key=config["api_key"])
        reply = await sdk.chat.completions.create(model=config["model"], messages=[{"role": "user", "content": "abc"}])
        state["completion"] = [{"role": "assistant", "content": reply.choices[0].message.content}]

    env = vf.Env(vf.Taskset(source=[{"prompt": "abc", "answer": "cba"}]), vf.Harness(program=program))
    outputs = env.evaluate_sync(client, "m", num_examples=1)["outputs"]
    assert outputs[0].get("error") is None and outputs[0]["completion"][-1]["content"] == "cba"


def test_selecting_more_example_rows_than_are_bundled_keeps_the_bundled_ones(verifiers: Any) -> None:
    """math_group: ``load_example_dataset("gsm8k", split="train").select(range(1000))`` (the Hub split has 7473)."""
    from verifiers.utils.data_utils import load_example_dataset

    bundled = load_example_dataset("gsm8k", split="train")
    with pytest.warns(UserWarning, match=rf"has {len(bundled)} rows; select\(\) keeps them"):
        chosen = bundled.select(range(1000))
    with pytest.warns(UserWarning, match=r"select\(\) keeps them"):
        picked = bundled.select([1, 0, 5000])
    assert chosen["question"] == bundled["question"] and picked["question"] == bundled["question"][1::-1]
    assert verifiers.load_example_dataset is load_example_dataset


def test_openenv_env_finds_its_project_beside_the_calling_module(tmp_path: Any) -> None:
    """openenv_echo/openenv_textarena: ``vf.OpenEnvEnv(prompt_renderer=...)`` with ``proj/`` beside the module."""
    import importlib.util

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / ".build.json").write_text(json.dumps({"image": "x", "start_command": "true"}))
    (tmp_path / "my_openenv.py").write_text(
        "import v1 as vf\n\ndef load_environment():\n    return vf.OpenEnvEnv(prompt_renderer=lambda o, **k: [], num_eval_examples=0)\n"
    )
    spec = importlib.util.spec_from_file_location("my_openenv", tmp_path / "my_openenv.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.load_environment().project == (tmp_path / "proj").resolve()
    with pytest.raises(vf.ConfigError, match=r"no openenv_project given, and no 'proj' directory beside .*test_seed_contract.py"):
        vf.OpenEnvEnv(prompt_renderer=lambda o, **k: [])


def test_a_verifiers_name_v1_does_not_provide_is_one_clear_line(verifiers: Any) -> None:
    """hello_rlm_v1 (``vf.RLMConfig``), wordle and gem_wordle (``verifiers.envs...``): named as the alias's gap."""
    with pytest.raises(AttributeError, match=r"^verifiers\.RLMConfig: v1's verifiers alias does not provide this name$"):
        verifiers.RLMConfig  # noqa: B018
    assert not hasattr(verifiers, "GymEnv") and verifiers.Rubric is vf.Rubric
    with pytest.raises(ModuleNotFoundError, match=r"^verifiers\.envs: v1's verifiers alias does not provide this module$"):
        import verifiers.envs.integrations.textarena_env
