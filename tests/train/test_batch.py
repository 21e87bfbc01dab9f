"""Training samples from real rollouts: two-turn trajectories recorded by the endpoint from the mock server."""

from __future__ import annotations

from typing import Any

import v1 as vf
from v1.testing import MockModelServer, Reply, mock_token_ids
from v1.train._batch import collate, micro_batches, samples_from_state, samples_from_states


def ids(text: str) -> list[int]:
    return mock_token_ids(text)


async def run_two_turns(mock: MockModelServer, *, rewrite_history: bool) -> vf.State:
    # The mock's prompt ids are one id per word of "role: content" lines; a completion whose ids are
    # those of "assistant: <text>" makes the next prompt extend prompt + completion, like a real template.
    mock.script(
        Reply.text("first answer", completion_ids=ids("assistant: first answer"), logprobs=[-0.1, -0.2, -0.3]),
        Reply.text("second answer", completion_ids=ids("assistant: second answer"), logprobs=[-0.4, -0.5, -0.6]),
    )

    async def program(task: vf.Task, state: vf.State) -> None:
        client = state.get_client()
        messages = list(state["prompt"])
        first = await client.chat.completions.create(model="m", messages=messages)
        if rewrite_history:
            messages = [{"role": "user", "content": "summary of the first turn"}]
        else:
            messages += [{"role": "assistant", "content": first.choices[0].message.content}]
        messages += [{"role": "user", "content": "now once more"}]
        await client.chat.completions.create(model="m", messages=messages)

    client = vf.ClientConfig(client_type="openai_chat_completions_token", api_base_url=mock.url, api_key_var="NONE")
    harness = vf.Harness(program=program, client=client, model="m")
    state = await harness.run({"prompt": "say something", "answer": "x"})
    state["advantage"] = 0.5
    return state


async def test_a_two_turn_trajectory_is_one_sample_with_loss_on_completion_tokens_only() -> None:
    with MockModelServer() as mock:
        state = await run_two_turns(mock, rewrite_history=False)
    assert state["error"] is None and len(state["trajectory"]) == 2
    built = samples_from_state(state)
    assert built.counts.new_sample_splits == 0 and built.counts.samples == 1
    (sample,) = built.samples
    prompt1 = ids("user: say something")
    completion1 = ids("assistant: first answer")
    user2 = ids("user: now once more")
    completion2 = ids("assistant: second answer")
    assert sample.input_ids == prompt1 + completion1 + user2 + completion2
    assert sample.loss_mask == [0] * 3 + [1] * 3 + [0] * 4 + [1] * 3
    assert sample.inference_logprobs == [0.0] * 3 + [-0.1, -0.2, -0.3] + [0.0] * 4 + [-0.4, -0.5, -0.6]
    assert sample.advantages == [0.0] * 3 + [0.5] * 3 + [0.0] * 4 + [0.5] * 3
    batch = collate([sample])
    # shifted for next-token prediction: position i predicts token i + 1
    assert batch.targets[0].tolist() == sample.input_ids[1:]
    assert batch.loss_mask[0].tolist() == [float(m) for m in sample.loss_mask[1:]]


async def test_a_prompt_that_does_not_extend_the_history_starts_a_new_sample_and_is_counted() -> None:
    with MockModelServer() as mock:
        state = await run_two_turns(mock, rewrite_history=True)
    built = samples_from_state(state)
    assert built.counts.new_sample_splits == 1 and built.counts.samples == 2
    first, second = built.samples
    assert first.input_ids == ids("user: say something") + ids("assistant: first answer")
    # the second sample is exactly the server's tokens of turn 2: nothing spliced, nothing retokenized
    step2 = state["trajectory"][1]["tokens"]
    assert second.input_ids == step2["prompt_ids"] + step2["completion_ids"]
    assert second.loss_mask == [0] * len(step2["prompt_ids"]) + [1] * 3


def step(
    prompt: list[int], completion: list[int], mask: list[int] | None = None, advantage: float | None = None
) -> dict[str, Any]:
    tokens = {
        "prompt_ids": prompt,
        "prompt_mask": [0] * len(prompt),
        "completion_ids": completion,
        "completion_mask": mask if mask is not None else [1] * len(completion),
        "completion_logprobs": [-1.0] * len(completion),
        "overlong_prompt": False,
        "is_truncated": False,
        "routed_experts": None,
    }
    return {"tokens": tokens, "advantage": advantage}


def test_steps_without_tokens_are_counted_and_masked_tokens_carry_no_loss() -> None:
    state = {
        "advantage": 1.0,
        "trajectory": [{"tokens": None}, step([1, 2], [3, 4], mask=[1, 0]), step([1, 2, 3, 4, 5], [6], advantage=-2.0)],
    }
    built = samples_from_state(state)
    assert built.counts.steps_without_tokens == 1
    (sample,) = built.samples
    assert sample.loss_mask == [0, 0, 1, 0, 0, 1]
    assert sample.advantages == [0.0, 0.0, 1.0, 0.0, 0.0, -2.0]


def test_max_seq_len_cuts_and_counts_and_samples_without_loss_are_dropped() -> None:
    states = [{"advantage": 1.0, "trajectory": [step([1, 2, 3], [4, 5, 6])]}, {"trajectory": [step([1, 2, 3], [4], mask=[0])]}]
    built = samples_from_states(states, max_seq_len=5)
    assert built.counts.truncated_samples == 1 and built.counts.samples == 1
    assert built.samples[0].input_ids == [1, 2, 3, 4, 5]
    assert [len(b) for b in micro_batches(built.samples * 5, 2)] == [2, 2, 1]


def test_collate_pads_right_and_masks_padding() -> None:
    short = samples_from_state({"advantage": 1.0, "trajectory": [step([1], [2])]}).samples[0]
    long = samples_from_state({"advantage": 1.0, "trajectory": [step([1, 2], [3, 4])]}).samples[0]
    batch = collate([short, long], pad_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 0, 0], [1, 2, 3, 4]]
    assert batch.attention_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert batch.loss_mask.tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
    assert batch.num_tokens == 6


async def test_mask_truncated_completions_leaves_a_rollout_cut_by_max_tokens_without_loss() -> None:
    with MockModelServer() as mock:
        mock.script(
            Reply.text("cut", completion_ids=ids("assistant: cut"), logprobs=[-0.1, -0.2], finish_reason="length"),
            Reply.text("whole", completion_ids=ids("assistant: whole"), logprobs=[-0.3, -0.4]),
        )
        client = vf.ClientConfig(client_type="openai_chat_completions_token", api_base_url=mock.url, api_key_var="NONE")
        harness = vf.Harness(client=client, model="m", max_turns=1)
        cut = await harness.run({"prompt": "go", "answer": "x"})
        whole = await harness.run({"prompt": "go", "answer": "x"})
    for state in (cut, whole):
        state["advantage"] = 1.0
    assert cut["is_truncated"] and not whole["is_truncated"]
    kept = samples_from_states([cut, whole])
    assert kept.counts.samples == 2 and kept.counts.masked_truncated == 0
    masked = samples_from_states([cut, whole], mask_truncated=True)
    assert masked.counts.samples == 1 and masked.counts.masked_truncated == 1
    assert masked.samples[0].inference_logprobs[-2:] == [-0.3, -0.4]


def test_mask_truncated_completions_also_drops_a_rollout_the_trainers_max_seq_len_cuts() -> None:
    """8 prompt + 10 completion tokens cut at 12: the completion is truncated by the trainer, so it trains on nothing."""
    state = {"advantage": 1.0, "trajectory": [step(list(range(1, 9)), list(range(20, 30)))]}
    cut = samples_from_state(state, max_seq_len=12, mask_truncated=True)
    assert cut.samples == [] and cut.counts.masked_truncated == 1
    kept = samples_from_state(state, max_seq_len=12)
    assert kept.samples[0].loss_tokens == 4 and kept.counts.truncated_samples == 1, "without the mask: 4 tokens train"
    whole = samples_from_state(state, max_seq_len=18, mask_truncated=True)
    assert whole.samples[0].loss_tokens == 10 and whole.counts.masked_truncated == 0
