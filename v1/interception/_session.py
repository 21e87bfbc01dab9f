"""`RolloutSession`: one rollout's view of the endpoint.

It holds the rollout's secret and URL, enforces the turn limit, token budgets and stop
conditions before each program call, forwards to the upstream `Client` with
the harness's sampling args, and records each exchange as a `TrajectoryStep`
through the state's own setters.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from v1._util.calling import endpoint_calls
from v1._util.entropy import token_urlsafe
from v1._util.single_flight import SingleFlight
from v1._util.token_budgets import TOKEN_BUDGETS
from v1.clients import Client
from v1.errors import ModelError, NotSupportedError, OverlongPromptError, RolloutStopped
from v1.rollout import EndpointAccess, State
from v1.types import (
    Messages,
    Response,
    ResponseDelta,
    ResponseTokens,
    SamplingArgs,
    TimeSpan,
    Tool,
    TrajectoryStep,
    TrajectoryStepTokens,
)

StopCheck = Callable[[State], Awaitable[str | None]]

DEFAULT_MAX_TURNS = 10


LIMITS = frozenset({"max_seq_len", "max_total_completion_tokens"})
"""Harness settings that ride with its sampling args: enforced by the endpoint, never sent upstream."""
ALIASES = (frozenset({"max_tokens", "max_completion_tokens"}),)
"""Sampling args that mean the same thing: a harness setting any of them overrides the program's every one."""


def merge_sampling_args(requested: SamplingArgs, harness: SamplingArgs) -> SamplingArgs:
    """What the program asked for, with the harness's sampling args winning at every depth.

    The harness's `extra_body` is flattened into its top level first (the wire format has no
    nesting either), and every key the harness sets replaces the program's value whole, so no
    part of a program's nested value survives under a harness key. A harness `max_tokens`
    also removes a program's `max_completion_tokens` (and the other way round).
    """
    if not harness:
        return dict(requested)
    nested = harness.get("extra_body")
    settings = dict(nested) if isinstance(nested, dict) else {}
    for key, value in harness.items():
        if key != "extra_body":
            settings[key] = value
    settings = {key: value for key, value in settings.items() if value is not None}
    overridden = set(settings)
    for group in ALIASES:
        if not group.isdisjoint(overridden):
            overridden |= group
    merged = {key: value for key, value in requested.items() if key not in overridden}
    merged.update(settings)
    return merged


_BUDGET_FIELDS = frozenset(TOKEN_BUDGETS)
"""The task fields that set a token budget (`State.get_token_budget` reads them with the harness's)."""

API_ROOT = "/v1"
"""Where a rollout's base URL ends, under ``/r/<rollout id>``: the OpenAI-style routes are below it."""


def new_key() -> str:
    """A fresh rollout key: the endpoint's only credential for one rollout's calls."""
    return "v1-" + token_urlsafe(24)


def counted_tokens(response: Response, tokens: TrajectoryStepTokens | None) -> tuple[int, int]:
    """Input and output tokens of one recorded call: its reported usage, else its token ids, else none.

    Every call's prompt counts again (as providers bill it).
    """
    usage = response.usage
    if usage is not None:
        return usage.prompt_tokens, usage.completion_tokens
    if tokens is not None:
        return len(tokens["prompt_ids"]), len(tokens["completion_ids"])
    return 0, 0


def _response_json(response: Response) -> dict[str, Any]:
    """`response.model_dump(mode="json")`, written field by field: every step records one, and pydantic's
    serializer costs five times as much on an answer this small. `test_session_record.py` holds it to
    the serializer's output, so a field added to `Response` fails there until it is written here."""
    usage = response.usage
    message = response.message
    tokens = message.tokens
    calls = message.tool_calls
    return {
        "id": response.id,
        "created": response.created,
        "model": response.model,
        "usage": None
        if usage is None
        else {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
        },
        "message": {
            "content": message.content,
            "reasoning_content": message.reasoning_content,
            "reasoning_signature": message.reasoning_signature,
            "finish_reason": message.finish_reason,
            "is_truncated": message.is_truncated,
            "tokens": None if tokens is None else _tokens_json(tokens),
            "tool_calls": None
            if calls is None
            else [{"id": call.id, "name": call.name, "arguments": call.arguments} for call in calls],
        },
    }


def _tokens_json(tokens: ResponseTokens) -> dict[str, Any]:
    experts = tokens.routed_experts
    return {
        "prompt_ids": list(tokens.prompt_ids),
        "prompt_mask": list(tokens.prompt_mask),
        "completion_ids": list(tokens.completion_ids),
        "completion_mask": list(tokens.completion_mask),
        "completion_logprobs": list(tokens.completion_logprobs),
        "routed_experts": None if experts is None else [[list(token) for token in layer] for layer in experts],
    }


def step_tokens(response: Response) -> TrajectoryStepTokens | None:
    tokens = response.message.tokens
    if tokens is None:
        return None
    return TrajectoryStepTokens(
        prompt_ids=tokens.prompt_ids,
        prompt_mask=tokens.prompt_mask,
        completion_ids=tokens.completion_ids,
        completion_mask=tokens.completion_mask,
        completion_logprobs=tokens.completion_logprobs,
        overlong_prompt=False,
        is_truncated=bool(response.message.is_truncated),
        routed_experts=tokens.routed_experts,
    )


@dataclass(eq=False)
class UpstreamHandles:
    """A rollout's handles only the framework touches: the upstream client, the harness's sampling args
    (limits included) and the endpoint session. `v1.interception.upstream(state)` finds them."""

    client: Client | None = None
    sampling_args: dict[str, Any] = field(default_factory=dict)
    session: RolloutSession | None = None


class RolloutSession:
    """The endpoint's record of one open rollout."""

    def __init__(self, state: State, base_url_root: str, stop_check: StopCheck | None, upstream: UpstreamHandles) -> None:
        self.state = state
        self.upstream = upstream
        self.rollout_id = state["trajectory_id"]
        self.api_key = new_key()
        self.base_url = f"{base_url_root}/r/{self.rollout_id}{API_ROOT}"
        self.stop_check = stop_check
        self.recording = True
        self.closed = False
        self.turns_started = 0
        self.calls_in_flight = 0  # the endpoint's admission cap (`MAX_CALLS_IN_FLIGHT`)
        self.refused: str | None = None  # the stop condition under which the endpoint refused the program a call
        self.response_history: dict[str, list[dict[str, Any]]] = {}
        self.response_ids: dict[int, tuple[Response, str]] = {}
        self._flights: SingleFlight[bytes, Response] = SingleFlight()
        self._last_answer: tuple[bytes, Response] | None = None
        self._callers: dict[bytes, Callable[[], bool]] = {}  # per call in flight: has its caller gone away?
        self._undelivered: bytes | None = None  # the last answer's key, when its caller had gone before it came
        self._max_seq_len: int | None = None
        self.failing: BaseException | None = None  # the upstream failure a call in flight is retrying after
        self.last_step: TrajectoryStep | None = None  # what this session recorded last (a program may append after it)
        # what the recorded calls used (`counted_tokens`), kept here: a program holds the steps and may change them
        self.spent_inputs = 0
        self.spent_outputs = 0
        self._last_context = 0  # the last call's prompt and completion tokens, as its usage reported them
        # the MCP route's count against the last answer, kept here for the same reason (`_mcp_server._refusal`)
        self.tool_calls_asked = 0  # the tool calls the last recorded answer asked for natively
        self.tool_calls_made = 0  # the MCP tool calls made since that answer
        # The limits as the rollout opened (the harness's, narrowed by the task): the program holds the state, and
        # what it writes there later (`runtime.max_turns`, `runtime.token_budgets`, another `task`) can't widen them.
        self.max_turns = state.get_max_turns(DEFAULT_MAX_TURNS)
        self.token_budgets: dict[str, int] = {}  # with the harness's `max_total_completion_tokens`
        if state.runtime.token_budgets or not _BUDGET_FIELDS.isdisjoint(state.task):  # most rollouts set no budget
            self.token_budgets = {name: limit for name in TOKEN_BUDGETS if (limit := state.get_token_budget(name))}
        total_completion = upstream.sampling_args.get("max_total_completion_tokens")
        if total_completion:
            self.token_budgets["max_total_completion_tokens"] = int(total_completion)
        self.program_context: contextvars.Context | None = None
        """The context the rollout's program runs in, while it runs (set by the harness): the MCP route runs a tool
        in a copy of it, as the built-in loop would (a nested `Harness.run` borrows this rollout's model)."""

    def end_program_phase(self) -> None:
        """The program's key dies here; later calls (updates, judges, cleanups) are the framework's own.

        The session gets a new key that only `state.runtime.endpoint` (and the SDK clients
        `state.get_client()` makes from now on) hold, so whatever the program handed out
        (a key written to a shared workspace, a client a background task kept) gets 401,
        and every upstream call is either a recorded, admitted turn or the framework's own:
        those still reach the model but are not trajectory steps.
        """
        self.recording = False
        self.api_key = new_key()
        self.program_context = None
        runtime = self.state.runtime
        endpoint = runtime.endpoint
        if endpoint is not None:  # built directly: `dataclasses.replace` costs a rollout more than this whole method
            runtime.endpoint = EndpointAccess(
                base_url=endpoint.base_url,
                api_key=self.api_key,
                pools=endpoint.pools,
                open=endpoint.open,
                own_call=endpoint.own_call,
            )
        runtime.sdk_clients.clear()

    async def _check_admission(self) -> None:
        state = self.state
        if state["is_completed"]:
            raise RolloutStopped(state["stop_condition"] or "state_done")
        if self.stop_check is not None:
            with endpoint_calls():  # never on the pool sync programs hold while they wait for this very call
                condition = await self.stop_check(state)
            if condition is not None:
                state.stop(condition)
                raise RolloutStopped(condition)
        max_turns = self.max_turns
        if self.turns_started >= max_turns:
            state.stop("max_turns_reached")
            raise RolloutStopped("max_turns_reached", f"rollout stopped: max_turns_reached ({max_turns} model calls allowed)")

    async def complete(
        self,
        prompt: Messages,
        tools: list[Tool] | None,
        requested: SamplingArgs,
        dedupe_key: bytes | None = None,
        retry: bool = False,
        extras: dict[str, Any] | None = None,
        caller_gone: Callable[[], bool] | None = None,
    ) -> Response:
        """Forward one model call upstream and record it.

        Every call with a `dedupe_key` (the endpoint passes a hash of the raw
        request, or its `Idempotency-Key`) is remembered while in flight and
        once answered. A `retry` (the SDK's `x-stainless-retry-count` > 0, or
        a repeated `Idempotency-Key`) identical to the call in flight or to the
        last answered one gets that same `Response` and records no new step:
        an agent's own retry does not fork the trajectory. So does, without any
        header, an identical call re-sent after its caller went away
        (`caller_gone()`, the HTTP client's timeout): while that call is in
        flight, or when its answer came after its caller had gone. Identical
        calls that are not retries (sampling the same prompt twice, each caller
        waiting for its answer) are separate turns.
        `extras` (the program's dialect, what the endpoint dropped from its request) go on the step.

        Raises:
            RolloutStopped: the rollout already ended (turn limit, stop condition, error).
            OverlongPromptError, ModelError: the upstream call failed; recorded on the state first.
        """
        replayed = await self._replayed(dedupe_key, retry or self._abandoned(dedupe_key))
        if replayed is not None:
            if self._undelivered == dedupe_key and not (caller_gone is not None and caller_gone()):
                self._undelivered = None  # delivered now: a later identical call is a new sample
            return replayed
        if dedupe_key is None:
            return await self._complete(prompt, tools, requested, extras)
        if self._undelivered == dedupe_key:
            self._undelivered = None
        if caller_gone is not None:
            self._callers[dedupe_key] = caller_gone
        try:
            # identical calls that are not retries (sampling one prompt twice) overlap as separate turns
            work = lambda: self._complete(prompt, tools, requested, extras)  # noqa: E731
            response = await self._flights.run(dedupe_key, work, join=False)
        finally:
            if self._callers.get(dedupe_key) is caller_gone:
                del self._callers[dedupe_key]
        self._last_answer = (dedupe_key, response)
        self._undelivered = dedupe_key if caller_gone is not None and caller_gone() else None
        return response

    def _abandoned(self, dedupe_key: bytes | None) -> bool:
        """Whether an identical call's caller went away before its answer: re-sending it is a retry."""
        if dedupe_key is None:
            return False
        gone = self._callers.get(dedupe_key)
        return (gone is not None and gone()) or self._undelivered == dedupe_key

    async def _replayed(self, dedupe_key: bytes | None, retry: bool) -> Response | None:
        """For a retry: the answer of the identical call in flight, or of the last one answered."""
        if dedupe_key is None or not retry:
            return None
        pending = self._flights.pending(dedupe_key)
        if pending is not None:
            return await asyncio.shield(pending)
        last = self._last_answer
        return last[1] if last is not None and last[0] == dedupe_key else None

    async def _begin(self, requested: SamplingArgs) -> tuple[Client, SamplingArgs, bool]:
        recording = self.recording
        client = self.upstream.client
        assert client is not None, "a rollout session needs an upstream client"
        sampling_args = merge_sampling_args(requested, self.upstream.sampling_args)
        try:
            if recording:
                await self._check_admission()
            self._apply_limits(sampling_args, recording)
        except RolloutStopped as refusal:
            self.refused = refusal.condition
            raise
        except OverlongPromptError:
            self.refused = "prompt_too_long"
            raise
        if recording:
            self.turns_started += 1
        return client, sampling_args, recording

    def _apply_limits(self, sampling_args: SamplingArgs, recording: bool) -> None:
        """The rollout's token limits: `max_seq_len` and `max_total_completion_tokens` (in the harness's
        sampling args) and the token budgets (`max_input_tokens`, `max_output_tokens`, `max_total_tokens`).

        The first two are limits, not sampling args: removed from what goes upstream. A budget
        already spent refuses the call and stops the rollout as `<budget>_reached` (and
        `max_seq_len` as `prompt_too_long`); otherwise `max_tokens` is capped to what is left of
        every output-counting budget and of the context. Usage is what the recorded calls reported
        (`counted_tokens`, summed as each is recorded), never an estimate from the prompt's text.
        """
        harness = self.upstream.sampling_args
        max_seq_len = harness.get("max_seq_len")
        sampling_args.pop("max_seq_len", None)
        sampling_args.pop("max_total_completion_tokens", None)
        self._max_seq_len = int(max_seq_len) if max_seq_len else None
        if not recording:
            return
        state = self.state
        budgets = self.token_budgets
        if not budgets and not self._max_seq_len:
            return
        caps = self._budget_caps(budgets)
        if self._max_seq_len and self.last_step is not None:
            context = self._last_context
            if context >= self._max_seq_len:
                state._set_managed("is_truncated", True)
                state.stop("prompt_too_long")
                raise OverlongPromptError(f"the context ({context} tokens) already fills max_seq_len ({self._max_seq_len})")
            caps.append(self._max_seq_len - context)
        if caps:
            keys = [key for key in ("max_tokens", "max_completion_tokens") if sampling_args.get(key) is not None] or [
                "max_tokens"
            ]
            for key in keys:
                sampling_args[key] = min([*caps, sampling_args.get(key) or min(caps)])

    def _budget_caps(self, budgets: dict[str, int]) -> list[int]:
        """What is left of each output-counting budget; raises when any budget is spent."""
        inputs, outputs = self.spent_inputs, self.spent_outputs
        spent = {
            "max_input_tokens": inputs,
            "max_output_tokens": outputs,
            "max_total_tokens": inputs + outputs,
            "max_total_completion_tokens": outputs,
        }
        caps = []
        for name, limit in budgets.items():
            if spent[name] >= limit:
                condition = f"{name}_reached"
                self.state.stop(condition)
                raise RolloutStopped(condition, f"rollout stopped: {condition} ({spent[name]} of {limit} tokens used)")
            if name != "max_input_tokens":
                caps.append(limit - spent[name])
        return caps

    def _failed(self, error: Exception, recording: bool) -> None:
        if self.closed:  # the rollout ended while the call was upstream: the state `run()` returned stays as it was
            return
        state = self.state
        if isinstance(error, OverlongPromptError):
            if recording:
                state._set_managed("is_truncated", True)
                state.stop("prompt_too_long")
                self.refused = "prompt_too_long"
        elif isinstance(error, NotSupportedError):  # the call cannot be translated for this upstream: a 400 for the program
            if recording:
                self.turns_started -= 1
        else:
            state.record_error(error, "model" if recording else "model (after the program)")

    async def _complete(
        self, prompt: Messages, tools: list[Tool] | None, requested: SamplingArgs, extras: dict[str, Any] | None = None
    ) -> Response:
        client, sampling_args, recording = await self._begin(requested)
        state = self.state
        start = time.time()
        try:
            response = await client.get_response(
                prompt, state.get_model(), sampling_args, tools=tools, state=state, on_retry=self._count_retry
            )
        except Exception as exc:
            self.failing = None
            self._failed(exc, recording)
            raise
        self.failing = None
        if recording:
            self._record(prompt, response, start, time.time(), extras)
        return response

    async def stream(
        self,
        prompt: Messages,
        tools: list[Tool] | None,
        requested: SamplingArgs,
        dedupe_key: bytes | None = None,
        retry: bool = False,
        extras: dict[str, Any] | None = None,
    ) -> AsyncGenerator[ResponseDelta | Response, None]:
        """Like `complete`, relaying the upstream's deltas as they arrive; the `Response` comes last.

        The step is recorded before the `Response` is yielded, so it is on the
        trajectory before the program sees the stream's terminal event.
        """
        replayed = await self._replayed(dedupe_key, retry)
        if replayed is not None:
            yield replayed
            return
        client, sampling_args, recording = await self._begin(requested)
        future = self._flights.start(dedupe_key) if dedupe_key is not None else None
        state = self.state
        start = time.time()
        response: Response | None = None
        try:
            async for item in client.stream_response(
                prompt, state.get_model(), sampling_args, tools=tools, state=state, on_retry=self._count_retry
            ):
                if isinstance(item, Response):
                    response = item
                else:
                    yield item
            if response is None:
                raise ModelError("the upstream stream ended without a response")
        except BaseException as exc:
            if isinstance(exc, Exception):
                self.failing = None
                self._failed(exc, recording)
            if future is not None and dedupe_key is not None:
                self._flights.finish(dedupe_key, future, error=exc)
            raise
        self.failing = None
        if recording:
            self._record(prompt, response, start, time.time(), extras)
        if future is not None and dedupe_key is not None:
            self._flights.finish(dedupe_key, future, response)
            self._last_answer = (dedupe_key, response)
        yield response

    def _count_retry(self, error: BaseException) -> None:
        """The client repeats a failed call: counted on the state by failure type (`state["model_retries"]`)."""
        self.failing = error
        if self.closed:  # as in `_failed`: the returned state is not counted on
            return
        counts = dict.get(self.state, "model_retries")
        if not isinstance(counts, dict):
            counts = {}
            dict.__setitem__(self.state, "model_retries", counts)
        name = type(error).__name__
        counts[name] = counts.get(name, 0) + 1

    def _record(
        self, prompt: Messages, response: Response, start: float, end: float, extras: dict[str, Any] | None = None
    ) -> None:
        if self.closed:  # as in `_failed`: no step on a rollout that has ended
            return
        state = self.state
        truncated = bool(response.message.is_truncated)
        tokens = step_tokens(response)
        usage = response.usage
        overlong = bool(self._max_seq_len and usage is not None and usage.prompt_tokens >= self._max_seq_len)
        if overlong:
            truncated = True
            if tokens is not None:
                tokens["overlong_prompt"] = True
                tokens["is_truncated"] = True
        step = TrajectoryStep(
            prompt=_sharing_earlier_messages(prompt, self.last_step),
            completion=[response.message.to_chat_message()],
            response=_response_json(response),
            tokens=tokens,
            reward=None,
            advantage=None,
            is_truncated=truncated,
            trajectory_id=self.rollout_id,
            extras={"start": start, "end": end, **(extras or {})},
        )
        state["trajectory"].append(step)
        self.last_step = step
        inputs, outputs = counted_tokens(response, tokens)
        self.spent_inputs += inputs
        self.spent_outputs += outputs
        self._last_context = usage.prompt_tokens + usage.completion_tokens if usage is not None else 0
        self.tool_calls_asked = len(response.message.tool_calls or ())
        self.tool_calls_made = 0
        state.runtime.timing.model.spans.append(TimeSpan(start=start, end=end))
        if truncated:
            state._set_managed("is_truncated", True)
        if overlong:
            state.stop("prompt_too_long")


def _sharing_earlier_messages(prompt: Messages, last: TrajectoryStep | None) -> Messages:
    """`prompt` with each message equal to the one at its place in the last recorded step's conversation
    (its prompt, then its completion) replaced by that message.

    A program resends its whole conversation every turn, and each request is parsed anew: without this
    a rollout of n turns kept n copies of its first message, O(n²) memory in flight. Steps now share
    the messages they have in common, as verifiers' steps do.
    """
    if last is None or not isinstance(prompt, list):
        return prompt
    earlier, answered = last.get("prompt"), last.get("completion")  # as the program may have left them
    if not isinstance(earlier, list) or not isinstance(answered, list):
        return prompt
    shared = list(prompt)
    for index, (message, before) in enumerate(zip(shared, itertools.chain(earlier, answered))):
        if message is not before and message == before:
            shared[index] = before
    return shared


__all__ = ["API_ROOT", "RolloutSession", "UpstreamHandles", "merge_sampling_args"]
