"""`nemorl_chat_completions`: Chat Completions as NeMo-RL's server (NeMo Gym's `vllm_model`) speaks it.

That server fixes re-tokenization server-side: every earlier assistant message of the
prompt carries the token ids it was generated with (`prompt_token_ids`,
`generation_token_ids`, `generation_log_probs`), and the server splices them in
instead of re-tokenizing the assistant's text. Its answer carries the new turn's ids on
the message (`message.prompt_token_ids`, `message.generation_token_ids`,
`message.generation_log_probs`).

This client attaches to each earlier assistant message the ids of the trajectory step
that produced it (the step whose prompt is the messages before it, whose completion is
that message), and reads the answer's message-level ids into the response's tokens.
The built-in server speaks this dialect too (`InferenceServer(nemo_token_fields=True)`).
"""

from __future__ import annotations

from typing import Any

from v1.clients._openai_chat_completions import NativeMessage, NativeResponse, NativeTool, OpenAIChatCompletionsClient
from v1.clients._token_history import step_for_assistant_message, step_token_ids, trajectory_of
from v1.types import SamplingArgs

TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


def with_token_fields(messages: list[NativeMessage], trajectory: list[Any]) -> list[NativeMessage]:
    """`messages`, each earlier assistant message carrying the ids it was generated with (copies; the input is unchanged)."""
    attached: list[NativeMessage] = []
    for index, message in enumerate(messages):
        step = step_for_assistant_message(trajectory, messages, index) if message.get("role") == "assistant" else None
        ids = step_token_ids(step) if step is not None else None
        if ids is None:
            attached.append(message)
            continue
        prompt_ids, completion_ids, logprobs = ids
        attached.append(
            {**message, "prompt_token_ids": prompt_ids, "generation_token_ids": completion_ids, "generation_log_probs": logprobs}
        )
    return attached


def lift_token_fields(response: NativeResponse) -> NativeResponse:
    """Move the message-level token ids of NeMo-RL's answer to where vLLM puts them (`prompt_token_ids`, `token_ids`, `logprobs`)."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if not choices or not isinstance(choices[0], dict) or not isinstance(choices[0].get("message"), dict):
        return response
    choice, message = choices[0], choices[0]["message"]
    prompt_ids, generation_ids = message.pop("prompt_token_ids", None), message.pop("generation_token_ids", None)
    logprobs = message.pop("generation_log_probs", None)
    if prompt_ids is not None:
        response["prompt_token_ids"] = prompt_ids
    if generation_ids is not None:
        choice["token_ids"] = generation_ids
        if logprobs is not None:
            choice["logprobs"] = {
                "content": [
                    {"token": f"token_id:{t}", "logprob": lp, "top_logprobs": []} for t, lp in zip(generation_ids, logprobs)
                ]
            }
    return response


class NeMoRLChatCompletionsClient(OpenAIChatCompletionsClient):
    """Chat Completions with NeMo-RL's message-level token ids, both ways."""

    client_type = "nemorl_chat_completions"

    async def get_native_response(
        self,
        prompt: list[NativeMessage],
        model: str,
        sampling_args: SamplingArgs,
        tools: list[NativeTool] | None,
        **kwargs: Any,
    ) -> NativeResponse:
        prompt = with_token_fields(prompt, trajectory_of(kwargs.get("state")))
        return lift_token_fields(await super().get_native_response(prompt, model, sampling_args, tools, **kwargs))


__all__ = ["NeMoRLChatCompletionsClient", "lift_token_fields", "with_token_fields"]
