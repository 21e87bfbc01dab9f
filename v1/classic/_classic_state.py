"""The seed's classic `State`: a free dict whose `INPUT_FIELDS` live on the nested ``input``.

Classic environment code, rubrics and tests write any key (``trajectory``, ``is_completed``,
``error``, ``reward``, ...). Reads and writes of ``prompt``, ``answer``, ``info`` and
``example_id`` go to ``state["input"]`` when the state has one, so a write reaches the input the
rubric reads and the row is never held twice. The guarded core `v1.State` is what the trainer,
results and viewer see; a classic rollout translates between the two at one boundary.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from v1 import errors
from v1.env import EnvState
from v1.rollout import State as CoreState
from v1.types import Response


class State(dict):  # type: ignore[type-arg]
    """A dict that tracks one rollout; keys in `INPUT_FIELDS` forward to the nested ``input``."""

    INPUT_FIELDS: ClassVar[list[str]] = ["prompt", "answer", "info", "example_id"]

    def _forwards(self, key: object) -> bool:
        return key in self.INPUT_FIELDS and isinstance(dict.get(self, "input"), Mapping) and not dict.__contains__(self, key)

    def __getitem__(self, key: Any) -> Any:
        if self._forwards(key):
            return dict.__getitem__(self, "input")[key]
        return dict.__getitem__(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._forwards(key):
            dict.__getitem__(self, "input")[key] = value
        else:
            dict.__setitem__(self, key, value)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (self._forwards(key) and key in dict.__getitem__(self, "input"))

    def get(self, key: Any, default: Any = None) -> Any:
        """`state[key]`, or `default` when neither the state nor its input has it."""
        return self[key] if key in self else default

    def setdefault(self, key: Any, default: Any = None) -> Any:
        """`state[key]`, set to `default` first when missing (forwarded like `__setitem__`)."""
        if key not in self:
            self[key] = default
        return self[key]

    def __iter__(self) -> Iterator[Any]:
        return dict.__iter__(self)

    @classmethod
    def for_task(cls, task: Mapping[str, Any], **kwargs: Any) -> CoreState:
        """A fresh rollout's core `State` for `task` (`v1.State.for_task`), as a `Taskset.init_group` returns."""
        return CoreState.for_task(task, **kwargs)  # type: ignore[no-any-return]


class RolloutState(EnvState):
    """The core `State` of a classic rollout, with the seed's reads and writes: a guarded, typed record for
    the core, and for classic code a free dict (``state["answer"]``, ``state["input"]``, ``state["model"]``,
    ``state["is_completed"] = True``, ``state["error"] = vf.Error(...)``, ...).

    `INPUT_FIELDS` read from the task unless the rollout wrote its own value (one copy: the task's, or
    the written one, which the classic rubric then reads too). A write of a framework-managed field
    goes through the core's one door for it: `is_completed` stops the rollout, `error` records the
    error (`record_error`), `trajectory` replaces the record's steps.
    """

    def __setitem__(self, key: Any, value: Any) -> None:
        try:
            super().__setitem__(key, value)
            return
        except errors.StateFieldError:
            pass  # a framework-managed field: written through the core's door for it below
        if key == "error":
            self._write_error(value)
        elif key == "is_completed":
            if value:
                self.stop(self.get("stop_condition") or "state_done")
            else:
                self._set_managed("is_completed", False)
        elif key == "trajectory":
            self._set_managed("trajectory", list(value or []))
        else:
            self._set_managed(key, value)

    def _write_error(self, value: Any) -> None:
        if value is None:
            self._set_managed("error", None)
        elif isinstance(value, BaseException):
            self.record_error(value, "program")
        elif isinstance(value, Mapping):
            self._set_managed("error", {"type": "Error", "message": "", "where": "program", **value})
            self.stop("has_error")
        else:
            raise errors.StateFieldError(
                f"state['error'] takes an exception, an error record or None; got {type(value).__name__}"
            )


_ERROR_OF_PART = {"tool": errors.ToolError, "model": errors.ModelError, "sandbox": errors.SandboxError}


def error_instance(record: Mapping[str, Any] | None) -> errors.Error | None:
    """The `vf.Error` a core error record (`{"type", "message", "where"}`) stands for.

    A v1 error keeps its class; any other exception becomes the error of the part that failed
    (`ToolError` for a tool, `ModelError` for the model, ...) or `vf.Error`.
    """
    if record is None:
        return None
    named = getattr(errors, str(record.get("type")), None)
    part = str(record.get("where") or "").split(":")[0]
    kind = named if isinstance(named, type) and issubclass(named, errors.Error) else _ERROR_OF_PART.get(part, errors.Error)
    error = kind(str(record.get("message", "")))
    error.record = dict(record)  # type: ignore[attr-defined]
    return error


def classic_view(state: CoreState) -> State:
    """A finished rollout as the seed's classic `State`: its own dict, with ``input`` the task's row (with the
    rollout's own ``answer``, ``info``, ``example_id`` when it wrote them; ``state["prompt"]`` is the input's) and the
    records typed (``timing`` a `RolloutTiming`, ``error`` a `vf.Error`, each step's ``response`` a `vf.Response`).

    The core state is left as it is (the JSON record results, the trainer and the viewer read).
    """
    view = State(dict.items(state))
    written = {key: dict.pop(view, key) for key in State.INPUT_FIELDS if key in view}
    rendered = written.pop("prompt", None)  # the harness's (system prompt included); the seed's is the input's
    view["input"] = {**dict(state.task), **written}
    if isinstance(rendered, str):  # message_type="completion": the input's prompt is the text the model got
        view["input"]["prompt"] = rendered
    view["timing"] = state.runtime.typed_timing()  # finalize keeps the record beside its JSON
    view["error"] = error_instance(dict.get(state, "error"))
    view["trajectory"] = [
        {**step, "response": Response.model_validate(step["response"])} if step.get("response") is not None else dict(step)
        for step in dict.get(state, "trajectory") or []
    ]
    return view


__all__ = ["RolloutState", "State", "classic_view", "error_instance"]
