"""`TimingRecord`: where a running rollout writes its timing.

Every rollout stamps a dozen times and saves them once, so the record is plain slotted objects
rather than the validated `v1.types.RolloutTiming`; both have the same attributes
(`start_time`, `setup.start`, `model.spans`, `total`, ...) and the same `as_dict`. A reader that
wants the typed record asks `RolloutRuntime.typed_timing()`, which hands the rollout over to a
`RolloutTiming` from then on.
"""

from __future__ import annotations

from typing import Any

from v1.types import RolloutTiming, TimeSpan, TimeSpans


class SpanRecord:
    """A `TimeSpan` being recorded: Unix seconds, `duration = end - start`."""

    __slots__ = ("end", "start")

    def __init__(self) -> None:
        self.start = 0.0
        self.end = 0.0

    @property
    def duration(self) -> float:
        return max(0.0, self.end - self.start)


class SpansRecord:
    """A `TimeSpans` being recorded: the spans of one kind (model calls, tool work); `duration` is their sum."""

    __slots__ = ("spans",)

    def __init__(self) -> None:
        self.spans: list[TimeSpan] = []

    @property
    def duration(self) -> float:
        return sum(span.duration for span in self.spans)


class TimingRecord:
    """A rollout's `RolloutTiming` while it runs: the same fields and derived values, none of the validation."""

    __slots__ = ("env", "generation", "model", "scoring", "setup", "start_time")

    def __init__(self) -> None:
        self.start_time = 0.0
        self.setup = SpanRecord()
        self.generation = SpanRecord()
        self.scoring = SpanRecord()
        self.model = SpansRecord()
        self.env = SpansRecord()

    @property
    def total(self) -> float:
        """`RolloutTiming.total`: from the generation's start to the scoring's end (else the generation's)."""
        end = self.scoring.end or self.generation.end
        return max(0.0, end - self.generation.start) if self.generation.start else 0.0

    @property
    def overhead(self) -> float:
        """`RolloutTiming.overhead`: the part of `total` in no named span."""
        named = self.setup.duration + self.model.duration + self.env.duration + self.scoring.duration
        return max(0.0, self.total - named)

    def as_dict(self) -> dict[str, Any]:
        """What `RolloutTiming.as_dict` (and `model_dump`) gives for the same values, as plain dicts."""
        setup, generation, scoring = _span_dict(self.setup), _span_dict(self.generation), _span_dict(self.scoring)
        model, env = _spans_dict(self.model.spans), _spans_dict(self.env.spans)
        total = self.total
        named = setup["duration"] + model["duration"] + env["duration"] + scoring["duration"]
        return {
            "start_time": self.start_time,
            "setup": setup,
            "generation": generation,
            "scoring": scoring,
            "model": model,
            "env": env,
            "total": total,
            "overhead": max(0.0, total - named),
        }

    def to_model(self) -> RolloutTiming:
        """The same values as a `RolloutTiming`."""
        return RolloutTiming(
            start_time=self.start_time,
            setup=TimeSpan(start=self.setup.start, end=self.setup.end),
            generation=TimeSpan(start=self.generation.start, end=self.generation.end),
            scoring=TimeSpan(start=self.scoring.start, end=self.scoring.end),
            model=TimeSpans(spans=list(self.model.spans)),
            env=TimeSpans(spans=list(self.env.spans)),
        )


def _span_dict(span: SpanRecord | TimeSpan) -> dict[str, float]:
    start, end = span.start, span.end
    return {"start": start, "end": end, "duration": max(0.0, end - start)}


_NUMBER_TYPES = frozenset({float, int})


def stamps_are_numbers(timing: TimingRecord | RolloutTiming) -> bool:
    """Whether every time `timing` holds is an `int` or a `float` (its type exactly).

    Then its `as_dict` is JSON by construction: the rest of it are differences, sums and maxima of
    those times (a program holds the record and may have set anything; `State.finalize` checks
    the record as any other field when this says no).
    """
    setup, generation, scoring = timing.setup, timing.generation, timing.scoring
    stamps = [timing.start_time, setup.start, setup.end, generation.start, generation.end, scoring.start, scoring.end]
    for span in (*timing.model.spans, *timing.env.spans):
        stamps += (span.start, span.end)
    return set(map(type, stamps)) <= _NUMBER_TYPES


def _spans_dict(spans: list[TimeSpan]) -> dict[str, Any]:
    if not spans:  # a rollout with no model call or no tool work
        return {"spans": [], "duration": 0}
    items = [_span_dict(span) for span in spans]
    return {"spans": items, "duration": sum(item["duration"] for item in items)}


__all__ = ["SpanRecord", "SpansRecord", "TimingRecord", "stamps_are_numbers"]
