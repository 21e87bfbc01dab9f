"""An LLM-as-judge reward: the rollout's model grades the answer through the rollout's endpoint.

The judge's call is made after the program ends, so the endpoint forwards it
(with the harness's model and sampling args) without recording it as a step of
the trajectory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from v1._message_text import last_assistant_text
from v1.state import State
from v1.task import Task
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


def _question(task: Task) -> str:
    for message in reversed(list(task.get("prompt") or [])):
        if message.get("role") == "user":
            return str(last_assistant_text([{"role": "assistant", "content": message.get("content")}]) or "")
    return str(task.get("question") or "")


def judge_reward(
    prompt: str = JUDGE_PROMPT,
    *,
    parser: AnswerParser | None = None,
    name: str = "judge",
    sampling_args: Mapping[str, Any] | None = None,
) -> Callable[..., Awaitable[float]]:
    """A reward asking the model whether the response is right: 1.0 when its reply starts with "yes".

    Args:
        prompt: the judge's prompt, with ``{question}``, ``{answer}`` and ``{response}`` fields.
        parser: picks the response out of the completion (default: the last assistant message).
        name: the reward's name in `state["metrics"]` and in ``scoring`` overrides.
        sampling_args: sent with the judge's call (the harness's own still win at the endpoint).

    The judge's verdict text is kept in ``state["judge_responses"][name]``.
    """

    async def judge(task: Task, state: State, completion: Any, answer: Any) -> float:
        response = (parser.parse_answer(completion) if parser is not None else last_assistant_text(completion)) or ""
        content = prompt.format(question=_question(task), answer="" if answer is None else answer, response=response)
        reply = await state.get_client().chat.completions.create(
            model=state.get_model(), messages=[{"role": "user", "content": content}], **dict(sampling_args or {})
        )
        verdict = (reply.choices[0].message.content or "").strip()
        state.setdefault("judge_responses", {})[name] = verdict
        return float(verdict.lower().startswith("yes"))

    judge.__name__ = judge.__qualname__ = name
    return judge


__all__ = ["JUDGE_PROMPT", "AnswerParser", "judge_reward"]
