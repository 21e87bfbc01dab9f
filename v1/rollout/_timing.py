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
        """What `RolloutTiming.as_dict` (and `model_dump`) gives for the same values, as plain dicts.

        Written out in one frame (every rollout is finalized with it): the three spans and both lists
        of spans, then `total` and `overhead` from the durations just computed.
        """
        setup, generation, scoring = self.setup, self.generation, self.scoring
        setup_start, setup_end = setup.start, setup.end
        generation_start, generation_end = generation.start, generation.end
        scoring_start, scoring_end = scoring.start, scoring.end
        setup_duration = max(0.0, setup_end - setup_start)
        scoring_duration = max(0.0, scoring_end - scoring_start)
        model, env = _spans_dict(self.model.spans), _spans_dict(self.env.spans)
        end = scoring_end or generation_end
        total = max(0.0, end - generation_start) if generation_start else 0.0
        named = setup_duration + model["duration"] + env["duration"] + scoring_duration
        return {
            "start_time": self.start_time,
            "setup": {"start": setup_start, "end": setup_end, "duration": setup_duration},
            "generation": {
                "start": generation_start,
                "end": generation_end,
                "duration": max(0.0, generation_end - generation_start),
            },
            "scoring": {"start": scoring_start, "end": scoring_end, "duration": scoring_duration},
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
    items = [{"start": span.start, "end": span.end, "duration": max(0.0, span.end - span.start)} for span in spans]
    return {"spans": items, "duration": sum([item["duration"] for item in items])}


__all__ = ["SpanRecord", "SpansRecord", "TimingRecord", "stamps_are_numbers"]
