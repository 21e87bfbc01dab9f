"""The LLM judge: `ask_judge` (one judge call, its reply kept on the state) and the `judge_reward` built on it.

The classic `JudgeRubric` asks through `ask_judge` too. By default the judge is the rollout's own
model: the call is made after the program ends, so the endpoint forwards it (with the harness's
model and sampling args) without recording it as a step of the trajectory. Every reply is kept in
``state["judge_responses"][name]`` (`judge_reward`'s name, ``"judge"`` for a `JudgeRubric`), and a
judge asked twice in one rollout under one name for the same prompt answers from there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from v1._util.message_text import last_assistant_text
from v1.clients import resolve_client
from v1.config import ClientConfig
from v1.rollout._state import State
from v1.rollout._task import Task
from v1.types import Messages

JUDGE_PROMPT = """Given a question, its ground-truth answer and a response, decide whether the response is correct.

Question:
{question}

Ground-truth answer:
{answer}

Response:
{response}

Reply with "yes" if the response is correct and "no" if it is not."""


class AnswerParser(Protocol):
    """What picks the response out of a completion (a classic `vf.Parser` is one)."""

    def parse_answer(self, completion: Messages | None) -> str | None: ...


def judge_question(prompt: Messages | None) -> str:
    """The question a judge is shown: a string prompt as is, else the text of its last user message."""
    if isinstance(prompt, str):
        return prompt
    for message in reversed(list(prompt or [])):
        if message.get("role") == "user":
            return last_assistant_text([{"role": "assistant", "content": message.get("content")}]) or ""
    return ""


async def ask_judge(
    state: State,
    content: str,
    *,
    name: str = "judge",
    client: Any = None,
    model: str | None = None,
    sampling_args: Mapping[str, Any] | None = None,
) -> str:
    """The judge's reply to `content` (one user message), kept in ``state["judge_responses"][name]``.

    Args:
        state: the rollout's state.
        content: the judge prompt, filled in.
        name: the key of the reply in ``state["judge_responses"]``.
        client: an `AsyncOpenAI`-like client, a v1 `Client`, a `ClientConfig` (or its fields), or None
            for the rollout's own model through its endpoint.
        model: the judge's model (None: the rollout's).
        sampling_args: sent with the judge's call.
    """
    responses = state.setdefault("judge_responses", {})
    runtime = getattr(state, "runtime", None)  # a classic rubric may score a plain dict
    prompts: dict[str, str] = runtime.judge_prompts if runtime is not None else {}
    if prompts.get(name) != content or name not in responses:
        responses[name] = await _ask(state, [{"role": "user", "content": content}], client, model, dict(sampling_args or {}))
        prompts[name] = content
    return str(responses[name])


async def _ask(
    state: State, messages: list[dict[str, Any]], client: Any, model: str | None, sampling_args: dict[str, Any]
) -> str:
    if client is None or hasattr(getattr(getattr(client, "chat", None), "completions", None), "create"):
        sdk = client if client is not None else state.get_client()
        reply = await sdk.chat.completions.create(model=model or state.get_model(), messages=messages, **sampling_args)
        return str(reply.choices[0].message.content or "")
    resolved = await resolve_client(client if not isinstance(client, Mapping) else ClientConfig(**client))
    answer = await resolved.get_response(messages, str(model), sampling_args)
    return str(answer.message.content or "")


def judge_reward(
    prompt: str = JUDGE_PROMPT,
    *,
    parser: AnswerParser | None = None,
    name: str = "judge",
    sampling_args: Mapping[str, Any] | None = None,
    client: Any = None,
    model: str | None = None,
) -> Callable[..., Awaitable[float]]:
    """A reward asking the model whether the response is right: 1.0 when its reply starts with "yes".

    Args:
        prompt: the judge's prompt, with ``{question}``, ``{answer}`` and ``{response}`` fields.
        parser: picks the response out of the completion (default: the last assistant message).
        name: the reward's name in `state["metrics"]` and in ``scoring`` overrides.
        sampling_args: sent with the judge's call (the harness's own still win at the endpoint).
        client: the judge's own client (as `ask_judge` takes it); None asks the rollout's model, which
            `v1 rescore` never calls: give a judge its own client to re-score with it.
        model: the judge's model (with `client`).

    The judge's verdict text is kept in ``state["judge_responses"][name]``.
    """

    async def judge(task: Task, state: State, completion: Any, answer: Any) -> float:
        response = (parser.parse_answer(completion) if parser is not None else last_assistant_text(completion)) or ""
        question = judge_question(task.get("prompt")) or str(task.get("question") or "")
        content = prompt.format(question=question, answer="" if answer is None else answer, response=response)
        verdict = await ask_judge(state, content, name=name, client=client, model=model, sampling_args=sampling_args)
        return float(verdict.strip().lower().startswith("yes"))

    judge.__name__ = judge.__qualname__ = name
    return judge


__all__ = ["JUDGE_PROMPT", "AnswerParser", "ask_judge", "judge_question", "judge_reward"]
