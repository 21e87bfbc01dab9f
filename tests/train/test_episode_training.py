"""Training on episodes of roles (#46): two RL steps on an episode whose policy and critic both run on the trained
model, and the trainer learns from the policy's tokens only."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import v1 as vf  # noqa: E402
from v1.inference import InferenceServer, build_tiny_model  # noqa: E402
from v1.testing import MockModelServer, MockRequest, Reply  # noqa: E402
from v1.train import TrainConfig, samples_from_state, train  # noqa: E402
from v1.train._run import TOKEN_SAMPLING_ARGS  # noqa: E402

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "train" / "tiny_first_letter.toml"

CONTROL = '''
def odd_length(completion):
    """1.0 when the last answer's length is odd: it varies within a group even where a barely trained model
    gets no answer right, so every step has a gradient."""
    return float(len(str(completion[-1]["content"])) % 2) if completion else 0.0


async def attempt_then_critique(episode):
    """The policy answers; the critic (not trained) comments on the answer, on the same model."""
    attempt = await episode.run("policy")
    answer = str(attempt["completion"][-1]["content"])
    await episode.run("critic", "Critique this answer: " + answer)
    episode.set_completion(attempt)
    episode.set_reward(odd_length(attempt["completion"]))
'''

TASKSET = """
[env]
name = "first_letter_episodes"

[env.taskset]
taskset_id = "first_letter"
source = "tasksets.first_letter:train_rows"
eval_source = "tasksets.first_letter:eval_rows"
rewards = [{ fn = "episode_controls:odd_length", weight = 1.0 }]
"""

EPISODE = (
    TASKSET
    + """
[env.harness]
loader = "v1:EpisodeHarness"
control = "episode_controls:attempt_then_critique"

[env.harness.roles.policy]
max_turns = 1

[env.harness.roles.critic]
max_turns = 1
"""
)

ON_THE_MOCK = 'client = {{ api_base_url = "{url}", max_retries = 0 }}\nmodel = "mock-model"'

BUILT_IN = {
    "judge": """
[env.harness]
loader = "v1:EpisodeHarness"
control = {{ kind = "judge", criteria = {{ odd = "the answer has an odd length" }} }}

[env.harness.roles.policy]
max_turns = 1

[env.harness.roles.judge]
max_turns = 1
"""
    + ON_THE_MOCK,
    "user": """
[env.harness]
loader = "v1:EpisodeHarness"
control = {{ kind = "user", max_turns = 2 }}

[env.harness.roles.policy]
max_turns = 3

[env.harness.roles.user]
max_turns = 1
"""
    + ON_THE_MOCK,
    "best_of_n": """
[env.harness]
loader = "v1:EpisodeHarness"
control = {{ kind = "best_of_n", n = 4 }}

[env.harness.roles.policy]
max_turns = 1
""",
}
"""Each built-in control's episode, its non-policy role (a judge, a user) on the mock server: a role the trainer must
never learn from."""

EPISODES_PER_STEP = 2 * 8  # examples x rollouts per example


def two_steps(tmp_path: Path, env_toml: str) -> TrainConfig:
    """The tiny recipe for 2 RL steps of 2 x 8 episodes (no warm-up, no eval) on the environment `env_toml`."""
    (tmp_path / "episode_controls.py").write_text(textwrap.dedent(CONTROL))
    (tmp_path / "episode.toml").write_text(env_toml)
    recipe = TrainConfig.load(RECIPE)
    return recipe.model_copy(
        update={
            "output_dir": str(tmp_path / "out"),
            "max_steps": 2,
            "micro_batch_size": 8,
            "env": recipe.env.model_copy(update={"id": str(tmp_path / "episode.toml"), "harness": {}}),
            "rollouts": recipe.rollouts.model_copy(
                update={"examples_per_step": 2, "rollouts_per_example": 8, "max_staleness": 0, "filter_zero_variance": False}
            ),
            "eval": recipe.eval.model_copy(update={"at_start": False, "at_end": False}),
            "sft": recipe.sft.model_copy(update={"warmup": False}),
        }
    )


def assert_trained_policy_samples_only(tmp_path: Path, samples_per_episode: int) -> None:
    """Each step trained `samples_per_episode` samples per episode, every one with tokens, and the weights moved."""
    lines = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    for line in lines:
        assert line["samples"] == EPISODES_PER_STEP * samples_per_episode + line["new_sample_splits"], line
        assert line["steps_without_tokens"] == 0 and line["filtered_errors"] == 0, line
    assert any(line["reward_std"] > 0 for line in lines)  # a gradient to follow
    from transformers import AutoModelForCausalLM

    start, end = (
        AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "checkpoints" / step / "model").state_dict()
        for step in ("step_0", "step_2")  # step_0: the weights RL started from
    )
    assert any(not torch.equal(end[name], tensor) for name, tensor in start.items())  # the RL steps moved the policy


async def test_two_steps_on_episodes_train_the_policys_tokens_and_not_the_critics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    result = await train(two_steps(tmp_path, EPISODE))
    assert result.steps == 2
    # one sample per episode: the policy's answer; the critic's turn, generated by the same model, is not trained on
    assert_trained_policy_samples_only(tmp_path, samples_per_episode=1)


def verdict_or_user_turn(request: MockRequest) -> Reply:
    """A judge's verdict (odd answers pass), or a simulated user's turn: one more question, then the end marker."""
    text = json.dumps(request.messages)
    if "odd length" in text:
        answer = text.rsplit("odd", 1)[0]  # the judge's prompt holds the policy's answer; the verdict varies with it
        return Reply.text(json.dumps({"odd": len(answer) % 2}))
    return Reply.text("[END]" if "Once more" in text else "Once more, please.")


@pytest.mark.parametrize(("control", "samples_per_episode"), [("judge", 1), ("user", 1), ("best_of_n", 4)])
async def test_two_steps_on_each_built_in_control_train_the_policy_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, control: str, samples_per_episode: int
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    with MockModelServer(verdict_or_user_turn) as mock:
        result = await train(two_steps(tmp_path, TASKSET + BUILT_IN[control].format(url=mock.url)))
        others = len(mock.requests)
    assert result.steps == 2
    # a judge's verdict or a user's turns for every episode of both steps (the run may start a third step's rollouts)
    assert others >= (0 if control == "best_of_n" else 2 * EPISODES_PER_STEP * (2 if control == "user" else 1))
    # best-of-4: all four attempts are the policy's; a judge's or a user's turns (on the mock) never become samples
    assert_trained_policy_samples_only(tmp_path, samples_per_episode)


async def test_both_roles_of_an_episode_on_the_engine_carry_tokens_and_only_the_policys_become_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "episode_controls.py").write_text(textwrap.dedent(CONTROL))
    (tmp_path / "episode.toml").write_text(EPISODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    recipe = TrainConfig.load(RECIPE)
    model, tokenizer = build_tiny_model(recipe.model.tiny)
    env = vf.load_environment(str(tmp_path / "episode.toml"))
    async with InferenceServer(model, tokenizer, model_name="tiny") as server:
        client = vf.ClientConfig(api_base_url=server.url, client_type=recipe.inference.client_type, max_retries=0)
        state = await env.rollout(env.get_dataset()[0], client, "tiny", {"max_tokens": 4, **TOKEN_SAMPLING_ARGS})
    assert state["error"] is None, state["error"]
    for role in ("policy", "critic"):  # the critic's turn could be trained on: the role's flag alone says it isn't
        steps = state["roles"][role]["trajectory"]
        assert steps and all(step.get("tokens") for step in steps), role
    assert [record["trainable"] for record in (state["roles"]["policy"], state["roles"]["critic"])] == [True, False]
    samples = samples_from_state(state).samples
    assert len(samples) == 1
    policy_step = state["roles"]["policy"]["trajectory"][0]["tokens"]
    assert samples[0].input_ids[-len(policy_step["completion_ids"]) :] == policy_step["completion_ids"]
