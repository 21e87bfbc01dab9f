"""Episodes of roles end to end: a policy with a judge, a simulated user and best-of-n, against the
mock model server over HTTP and real local sandboxes; each role on an endpoint session of its own."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.env import ResultsWriter
from v1.sandbox import list_sandboxes
from v1.testing import MockModelServer, MockRequest, Reply
from v1.train import samples_from_state

JUDGE_MARK = "You are judging an attempt"


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


async def bash(command: str, sandbox: Any) -> str:
    """Run a shell command in the sandbox."""
    result = await sandbox.exec(["sh", "-c", command], timeout=HANG_S)
    return result.stdout + result.stderr


def sandboxed_harness(**kwargs: Any) -> vf.Harness:
    """A base-loop harness with a bash tool in its own rollout sandbox (and the episode's client and model)."""
    return vf.Harness(sandbox={}, toolsets=[vf.Toolset([bash], sandbox="program")], **kwargs)


def prompts_of(record: dict[str, Any]) -> str:
    return json.dumps([step["prompt"] for step in record["trajectory"]])


def completions_of(record: dict[str, Any]) -> str:
    return json.dumps([step["completion"] for step in record["trajectory"]])


def judge_and_policy(request: MockRequest) -> Reply:
    """The policy writes answer.txt; the judge reads it in its own sandbox and scores what it read."""
    first_user = next(m for m in request.messages if m["role"] == "user")
    if JUDGE_MARK in str(first_user["content"]):
        if request.last_message["role"] != "tool":
            return Reply.tool("bash", {"command": "cat answer.txt; ls"})
        seen = str(request.last_message["content"])
        correct = 1 if "42\n" in seen else 0
        return Reply.text(f'I read the file. {{"correct": {correct}, "tidy": 0.5}}')
    if request.last_message["role"] != "tool":
        return Reply.tool("bash", {"command": "echo 42 > answer.txt; echo scratch > notes.txt"})
    return Reply.text("The answer is in answer.txt")


def judged_env(mode: str = "isolated") -> vf.Env:
    control = vf.JudgeControl(
        criteria={"correct": "answer.txt holds the right answer", "tidy": "the workspace is tidy"},
        weights={"correct": 1.0, "tidy": 2.0},
        mode=mode,
        files=["answer.txt"] if mode == "isolated" else [],
    )
    roles = {"policy": sandboxed_harness(max_turns=4), "judge": sandboxed_harness(max_turns=4)}
    taskset = vf.Taskset(source=[{"prompt": "Write the answer to 6*7 into answer.txt", "answer": "42"}])
    return vf.Env(taskset, vf.EpisodeHarness(roles, control))


async def test_an_isolated_judge_reads_the_policys_file_in_its_own_sandbox_and_its_verdict_is_the_reward(
    mock: MockModelServer, tmp_path: Path
) -> None:
    mock.responder = judge_and_policy
    env = judged_env()
    writer = ResultsWriter(tmp_path / "run")
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    outputs = await env.evaluate(client, "test-model", results=writer)
    [output] = outputs["outputs"]
    assert output["error"] is None, output["error"]
    assert output["metrics"]["judge/correct"] == 1.0 and output["metrics"]["judge/tidy"] == 0.5
    assert output["reward"] == 1.0 * 1.0 + 2.0 * 0.5
    policy, judge = output["roles"]["policy"], output["roles"]["judge"]
    assert (policy["trainable"], judge["trainable"]) == (True, False)
    # each role on its own endpoint session: the judge's calls are in its trajectory only
    assert JUDGE_MARK not in prompts_of(policy) and JUDGE_MARK in prompts_of(judge)
    assert "cat answer.txt" not in completions_of(policy) and "cat answer.txt" in completions_of(judge)
    assert len(policy["trajectory"]) == 2 and len(judge["trajectory"]) == 2
    assert policy["trajectory_id"] != judge["trajectory_id"]
    # isolated: only the named file was restored; the policy's scratch file stayed behind
    judge_tool_output = judge["trajectory"][1]["prompt"][-1]["content"]
    assert judge_tool_output.splitlines() == ["42", "answer.txt"]
    assert output["completion"][-1]["content"] == "The answer is in answer.txt"
    saved = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert set(saved[0]["roles"]) == {"policy", "judge"}
    assert saved[0]["roles"]["judge"]["trajectory"] == judge["trajectory"]
    assert list_sandboxes() == []


async def test_a_shared_judge_works_in_the_policys_sandbox_after_the_policy_ended(mock: MockModelServer) -> None:
    mock.responder = judge_and_policy
    env = judged_env("shared")
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    state: Any = await env.rollout(env.get_dataset()[0], client, "test-model")
    assert state["error"] is None, state["error"]
    judge = state["roles"]["judge"]
    # shared: the judge sees the policy's whole workspace, scratch file included
    assert judge["trajectory"][1]["prompt"][-1]["content"].splitlines() == ["42", "answer.txt", "notes.txt"]
    assert state["metrics"]["judge/correct"] == 1.0
    assert JUDGE_MARK not in prompts_of(state["roles"]["policy"])
    assert list_sandboxes() == []


async def where(sandbox: Any) -> str:
    """Say which sandbox this is."""
    await sandbox.write_file("mine.txt", b"x")
    listing = await sandbox.exec(["ls"], timeout=HANG_S)
    return f"{sandbox.id} {listing.stdout.split()}"


def attempt(request: MockRequest) -> Reply:
    """Each attempt asks which sandbox it is in, then answers with its seed: only seed 2 is right."""
    if request.last_message["role"] != "tool":
        return Reply.tool("where", {})
    return Reply.text(f"answer-{request.body.get('seed')}")


def right_answer(completion: vf.Messages, answer: str) -> float:
    return 1.0 if completion and completion[-1]["content"] == answer else 0.0


async def test_best_of_4_runs_each_attempt_in_its_own_sandbox_with_its_own_seed(mock: MockModelServer) -> None:
    mock.responder = attempt
    policy = vf.Harness(sandbox={}, toolsets=[vf.Toolset([where], sandbox="program")], max_turns=3)
    taskset = vf.Taskset(source=[{"prompt": "answer", "answer": "answer-2"}], rewards=[right_answer])
    env = vf.Env(taskset, vf.EpisodeHarness({"policy": policy}, vf.BestOfN(n=4, seed=0)))
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    state: Any = await env.rollout(env.get_dataset()[0], client, "test-model")
    assert state["error"] is None, state["error"]
    attempts = [state["roles"][f"policy/{i}"] for i in range(4)]
    assert [a["seed"] for a in attempts] == [0, 1, 2, 3]
    assert [a["reward"] for a in attempts] == [0.0, 0.0, 1.0, 0.0]
    assert state["metrics"]["pass@4"] == 1.0 and state["metrics"]["best"] == 1.0 and state["reward"] == 1.0
    assert state["completion"][-1]["content"] == "answer-2"
    # each attempt in a sandbox of its own: four ids, and each saw only its own file
    seen = [a["trajectory"][1]["prompt"][-1]["content"] for a in attempts]
    assert len({text.split()[0] for text in seen}) == 4
    assert all(text.endswith("['mine.txt']") for text in seen)
    # each attempt on its own endpoint session, with its own seed upstream
    assert len({a["trajectory_id"] for a in attempts}) == 4
    assert sorted(request.body["seed"] for request in mock.requests) == [0, 0, 1, 1, 2, 2, 3, 3]
    for i, record in enumerate(attempts):
        assert record["completion"][-1]["content"] == f"answer-{i}" and len(record["trajectory"]) == 2
    assert list_sandboxes() == []


async def test_best_of_n_without_a_seed_gives_each_episode_of_a_task_its_own_seeds(mock: MockModelServer) -> None:
    env = vf.Env(vf.Taskset(source=[{"prompt": "q"}]), vf.EpisodeHarness({"policy": vf.Harness(max_turns=1)}, vf.BestOfN(n=2)))
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    row = env.get_dataset()[0]
    episodes: list[Any] = [await env.rollout(row, client, "test-model") for _ in range(3)]
    bases = [state["roles"]["policy/0"]["seed"] for state in episodes]
    assert all(state["roles"]["policy/1"]["seed"] == base + 1 for state, base in zip(episodes, bases, strict=True))
    assert len(set(bases)) == 3  # a group's episodes sample apart: a fixed base made every one alike


async def test_best_of_n_refuses_a_sandbox_its_attempts_would_share(mock: MockModelServer) -> None:
    shared = vf.Harness(sandbox={"scope": "group"}, max_turns=1)
    env = vf.Env(vf.Taskset(source=[{"prompt": "x"}]), vf.EpisodeHarness({"policy": shared}, vf.BestOfN(n=2)))
    state: Any = await env.rollout(env.get_dataset()[0], vf.ClientConfig(api_base_url=mock.url, max_retries=0), "m")
    assert state["error"]["type"] == "ConfigError" and "would share it" in state["error"]["message"]
    assert mock.requests == []


USER_MARK = "You play the user"


def dialogue(request: MockRequest) -> Reply:
    """The user role asks two follow-ups, then ends; the policy answers each user message it got."""
    first = request.messages[0] if request.messages[0]["role"] != "system" else request.messages[1]
    if USER_MARK in str(first["content"]):
        answers = [m for m in request.messages if m["role"] == "user"][1:]
        return Reply.text(f"follow-up {len(answers)}" if len(answers) < 3 else "thanks [END]")
    asked = [m for m in request.messages if m["role"] == "user"]
    return Reply.text(f"policy answer {len(asked)}")


async def test_a_user_role_speaks_the_policys_user_turns_and_ends_the_dialogue(mock: MockModelServer) -> None:
    mock.responder = dialogue
    taskset = vf.Taskset(source=[{"prompt": "help me"}], rewards=[lambda completion: float(len(completion))])
    roles = {"policy": vf.Harness(max_turns=10), "user": vf.Harness(max_turns=1)}
    env = vf.Env(taskset, vf.EpisodeHarness(roles, vf.UserControl(max_turns=5)))
    state: Any = await env.rollout(env.get_dataset()[0], vf.ClientConfig(api_base_url=mock.url, max_retries=0), "m")
    assert state["error"] is None, state["error"]
    policy, user = state["roles"]["policy"], state["roles"]["user"]
    assert policy["stop_condition"] == "user_ended"
    assert [m["content"] for m in policy["completion"]] == [
        "policy answer 1",
        "follow-up 1",
        "policy answer 2",
        "follow-up 2",
        "policy answer 3",
    ]
    # the user's words are user messages of the policy, never its model output
    assert [m["role"] for m in policy["completion"]] == ["assistant", "user", "assistant", "user", "assistant"]
    assert "follow-up" not in completions_of(policy) and "follow-up 2" in prompts_of(policy)
    assert len(policy["trajectory"]) == 3
    # the user role: one rollout per turn on sessions of its own, kept together, never trained
    assert user["runs"] == 3 and len(user["trajectory"]) == 3 and user["trainable"] is False
    assert "policy answer" not in completions_of(user) and "thanks [END]" in completions_of(user)
    assert user["trajectory"][0]["prompt"][-1] == {"role": "user", "content": "policy answer 1"}
    assert state["metrics"]["user_turns"] == 3.0 and state["reward"] == 5.0 == policy["reward"]


async def test_training_samples_come_from_the_trainable_roles_only(mock: MockModelServer) -> None:
    mock.responder = judge_and_policy
    env = judged_env()
    client = vf.ClientConfig(client_type="openai_chat_completions_token", api_base_url=mock.url, max_retries=0)
    [output] = (await env.evaluate(client, "test-model"))["outputs"]
    assert output["error"] is None, output["error"]
    policy, judge = output["roles"]["policy"], output["roles"]["judge"]
    assert all(step["tokens"] for step in policy["trajectory"] + judge["trajectory"])
    built = samples_from_state(output)
    policy_ids = [id for step in policy["trajectory"] for id in step["tokens"]["completion_ids"]]
    judge_ids = [id for step in judge["trajectory"] for id in step["tokens"]["completion_ids"]]
    trained = [id for sample in built.samples for id, mask in zip(sample.input_ids, sample.loss_mask) if mask]
    assert trained == policy_ids and trained != judge_ids
    assert all(sample.advantages[-1] == output["advantage"] for sample in built.samples)
    # marked trainable, the judge's tokens are trained too
    output["roles"]["judge"]["trainable"] = True
    both = [id for sample in samples_from_state(output).samples for id, mask in zip(sample.input_ids, sample.loss_mask) if mask]
    assert both == policy_ids + judge_ids


JUDGED_TOML = """
[env]
name = "judged"

[env.taskset]
source = [{ prompt = "Write the answer to 6*7 into answer.txt", answer = "42" }]

[env.harness]
loader = "v1:EpisodeHarness"
control = { kind = "judge", files = ["answer.txt"], criteria = { correct = "answer.txt holds 42", tidy = "no stray files" }, weights = { tidy = 2.0 } }

[env.harness.roles.policy]
sandbox = {}
toolsets = [{ tools = ["toolsets.bash:bash"], sandbox = "program" }]

[env.harness.roles.judge]
sandbox = {}
toolsets = [{ tools = ["toolsets.bash:bash"], sandbox = "program" }]
"""


async def test_a_toml_episode_declares_its_roles_and_a_built_in_control(mock: MockModelServer, tmp_path: Path) -> None:
    mock.responder = judge_and_policy
    path = tmp_path / "judged.toml"
    path.write_text(JUDGED_TOML)
    env = vf.load_environment(str(path))
    assert isinstance(env.harness, vf.EpisodeHarness) and sorted(env.harness.roles) == ["judge", "policy"]
    state: Any = await env.rollout(env.get_dataset()[0], vf.ClientConfig(api_base_url=mock.url, max_retries=0), "m")
    assert state["error"] is None, state["error"]
    assert state["metrics"]["judge/correct"] == 1.0 and state["reward"] == 2.0
    assert state["roles"]["judge"]["trainable"] is False and state["roles"]["policy"]["trainable"] is True
    assert list_sandboxes() == []


@pytest.mark.parametrize(
    ("harness", "control", "message"),
    [
        ({}, "policy", "an episode needs roles"),
        ({"policy": {}}, vf.JudgeControl(criteria={"ok": "fine"}), "needs the role(s) ['judge']"),
        ({"policy": {}}, "judge", "a built-in with settings"),
        ({"policy": {}, "": {}}, "policy", "is not a name"),
        ({"policy": {}}, "no_such_module_xyz:control", "cannot import module"),
    ],
)
def test_bad_episodes_fail_in_one_line(harness: dict[str, Any], control: Any, message: str) -> None:
    with pytest.raises(vf.ConfigError, match=re.escape(message)):
        vf.EpisodeHarness(harness, control)


@pytest.mark.parametrize(
    ("control", "message"),
    [
        ({"kind": "best_of_n", "n": 0}, "greater than 0"),
        ({"kind": "best_of_n", "n": 10**9}, "less than or equal to 64"),
        ({"kind": "judge", "criteria": {}}, "at least 1 item"),
        ({"kind": "judge", "criteria": {"ok": "x"}, "files": ["../etc/passwd"]}, "plain relative path"),
        ({"kind": "judge", "criteria": {"ok": "x"}, "files": ["/etc/passwd"]}, "plain relative path"),
        ({"kind": "user", "max_turns": -1}, "greater than 0"),
        ({"kind": "vote"}, "kind"),
    ],
)
def test_bad_control_tables_fail_in_one_line(control: dict[str, Any], message: str) -> None:
    with pytest.raises(vf.ConfigError, match=re.escape(message)):
        vf.EpisodeHarness(config={"roles": {"policy": {}, "judge": {}, "user": {}}, "control": control})


def verdict_only(request: MockRequest) -> Reply:
    return Reply.text('{"correct": true}')


async def test_a_judge_with_a_client_and_model_of_its_own_calls_them_not_the_policys(mock: MockModelServer) -> None:
    mock.responder = lambda request: Reply.text("the policy's answer")
    with MockModelServer(verdict_only) as judge_server:
        judge = vf.Harness(client=vf.ClientConfig(api_base_url=judge_server.url, max_retries=0), model="judge-model")
        roles = {"policy": vf.Harness(max_turns=1), "judge": vf.Role(judge, trainable=False, attempts_task=False)}
        control = vf.JudgeControl(criteria={"correct": "the answer is right"})
        env = vf.Env(vf.Taskset(source=[{"prompt": "q"}]), vf.EpisodeHarness(roles, control))
        client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
        state: Any = await env.rollout(env.get_dataset()[0], client, "policy-model")
        judge_requests = list(judge_server.requests)
    assert state["error"] is None, state["error"]
    assert [r.body["model"] for r in mock.requests] == ["policy-model"]
    assert [r.body["model"] for r in judge_requests] == ["judge-model"]
    assert JUDGE_MARK in judge_requests[0].last_user_text and "the policy's answer" in judge_requests[0].last_user_text
    assert state["roles"]["judge"]["model"] == "judge-model" and state["roles"]["policy"]["model"] == "policy-model"
    assert state["metrics"]["judge/correct"] == 1.0 and state["reward"] == 1.0


async def test_a_failed_judge_is_the_episodes_error_not_a_zero_score(mock: MockModelServer) -> None:
    def failing_judge(request: MockRequest) -> Reply:
        return Reply.fail(400, "judge refused") if JUDGE_MARK in request.last_user_text else Reply.text("answer")

    mock.responder = failing_judge
    roles = {"policy": vf.Harness(max_turns=1), "judge": vf.Harness(max_turns=1)}
    env = vf.Env(vf.Taskset(source=[{"prompt": "q"}]), vf.EpisodeHarness(roles, vf.JudgeControl(criteria={"ok": "fine"})))
    state: Any = await env.rollout(env.get_dataset()[0], vf.ClientConfig(api_base_url=mock.url, max_retries=0), "m")
    assert state["roles"]["judge"]["error"] is not None and state["roles"]["policy"]["error"] is None
    assert state["error"]["type"] == state["roles"]["judge"]["error"]["type"]
    assert state["error"]["where"].startswith("role:judge:") and "role 'judge' failed" in state["error"]["message"]
    assert "judge/ok" not in state["metrics"]


async def test_an_unknown_role_in_a_custom_control_fails_the_episode_in_one_line(mock: MockModelServer) -> None:
    async def control(episode: vf.Episode) -> None:
        await episode.run("critic")

    env = vf.Env(vf.Taskset(source=[{"prompt": "q"}]), vf.EpisodeHarness({"policy": vf.Harness()}, control))
    state: Any = await env.rollout(env.get_dataset()[0], vf.ClientConfig(api_base_url=mock.url, max_retries=0), "m")
    assert state["error"]["type"] == "ConfigError"
    assert state["error"]["message"] == "the episode has no role 'critic'; its roles are ['policy']"


async def test_best_of_n_seeds_a_policy_with_a_client_of_its_own(mock: MockModelServer) -> None:
    with MockModelServer(lambda request: Reply.text("a")) as own:
        policy = vf.Harness(client=vf.ClientConfig(api_base_url=own.url, max_retries=0), model="own", sampling_args={"seed": 99})
        env = vf.Env(vf.Taskset(source=[{"prompt": "q"}]), vf.EpisodeHarness({"policy": policy}, vf.BestOfN(n=3, seed=5)))
        state: Any = await env.rollout(env.get_dataset()[0], vf.ClientConfig(api_base_url=mock.url, max_retries=0), "m")
        seeds = sorted(request.body["seed"] for request in own.requests)
    assert state["error"] is None, state["error"]
    assert seeds == [5, 6, 7] and mock.requests == []
    assert [state["roles"][f"policy/{i}"]["seed"] for i in range(3)] == [5, 6, 7]
