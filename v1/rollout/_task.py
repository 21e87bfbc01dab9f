"""`Task`: one immutable, JSON-only row of work for a harness."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn

from v1._util.token_budgets import MAX_TOKEN_BUDGET, TOKEN_BUDGETS
from v1.errors import TaskError

PROMPT_ROLES = frozenset({"user", "assistant", "tool", "developer"})
MAPPING_FIELDS = ("info", "tools", "toolsets", "sandbox")


def _refuse(*_: object, **__: object) -> NoReturn:
    raise TypeError("a frozen Task cannot be modified; build a new Task instead")


class FrozenDict(dict):  # type: ignore[type-arg]
    """A dict whose contents can't change; still a `dict` for JSON and comparisons."""

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))


class FrozenList(list):  # type: ignore[type-arg]
    """A list whose contents can't change; still a `list` for JSON and comparisons."""

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = sort = reverse = _refuse  # type: ignore[assignment]
    __iadd__ = __imul__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (list(self),))


class _NotJSON(Exception):
    """A value `_frozen` refuses, and what is wrong with it."""


_KEPT_AS_THEY_ARE = frozenset({str, int, bool, type(None)})
"""The leaf types both `_frozen` and `thaw` return unchanged: told apart inline, with no call per leaf."""


def _frozen(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJSON(f"{value!r} is not valid JSON (NaN and infinity are not allowed)")
        return value
    if isinstance(value, (list, tuple)):
        return FrozenList([item if type(item) in _KEPT_AS_THEY_ARE else _frozen(item) for item in value])
    if isinstance(value, (dict, Mapping)):  # a dict is told apart before the slower Mapping check
        frozen = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotJSON(f"key {key!r} is not a string; JSON objects need string keys")
            frozen[key] = item if type(item) in _KEPT_AS_THEY_ARE else _frozen(item)
        return FrozenDict(frozen)
    raise _NotJSON(f"{type(value).__name__} value {value!r:.80} is not JSON-serializable")


def _path_to_refused(value: Any) -> str:
    """Where inside `value` the part `_frozen` refuses is ("" for `value` itself), in its order; walked only on failure."""
    if isinstance(value, (list, tuple)):
        steps: list[tuple[str | None, Any]] = [(f"[{index}]", item) for index, item in enumerate(value)]
    elif isinstance(value, Mapping):
        steps = [(f".{key}" if isinstance(key, str) else None, item) for key, item in value.items()]
    else:
        return ""
    for step, item in steps:
        if step is None:
            return ""  # a key that is not a string: the mapping itself is refused
        try:
            _frozen(item)
        except _NotJSON:
            return step + _path_to_refused(item)
    return ""


def freeze_json(value: Any, path: str, prefix: str = "") -> Any:
    """A deep, frozen copy of a JSON value.

    Raises `TaskError` naming the field path (``prefix + "field 'path'"``) for anything else.
    """
    try:
        return _frozen(value)
    except _NotJSON as refused:
        raise TaskError(f"{prefix}field '{path}{_path_to_refused(value)}': {refused}") from None


def thaw(value: Any) -> Any:
    """A plain, mutable deep copy of a frozen value."""
    if isinstance(value, dict):
        return {key: item if type(item) in _KEPT_AS_THEY_ARE else thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [item if type(item) in _KEPT_AS_THEY_ARE else thaw(item) for item in value]
    if value is None or isinstance(value, (str, int, float)):  # the leaves: no Mapping check each
        return value
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    return value


def _normalize_prompt(prompt: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, (list, tuple)):
        raise TaskError(f"{where}field 'prompt': expected a string or a list of messages, got {type(prompt).__name__}")
    for i, message in enumerate(prompt):
        if not isinstance(message, (dict, Mapping)) or "role" not in message:  # a dict is told apart before the ABC check
            raise TaskError(f"{where}field 'prompt[{i}]': expected a message dict with a 'role', got {message!r:.80}")
        role = message["role"]
        if role == "system":
            raise TaskError(
                f"{where}field 'prompt[{i}]': system messages are not allowed in a task prompt; "
                "put them in 'system_prompt' (task) or in the taskset/harness system_prompt"
            )
        if role not in PROMPT_ROLES:
            raise TaskError(f"{where}field 'prompt[{i}].role': unknown role {role!r}; expected one of {sorted(PROMPT_ROLES)}")
    return list(prompt)


def _check_system_prompt(value: Any, where: str) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):  # one message, e.g. vf.SystemMessage.from_path(...)
        value = [value]
    if isinstance(value, (list, tuple)):
        for i, message in enumerate(value):
            if not isinstance(message, Mapping) or message.get("role") != "system":
                raise TaskError(f"{where}field 'system_prompt[{i}]': expected a system message dict, got {message!r:.80}")
        return list(value)
    raise TaskError(f"{where}field 'system_prompt': expected a string or a list of system messages, got {type(value).__name__}")


_TYPED_FIELDS = frozenset({"max_turns", *TOKEN_BUDGETS, *MAPPING_FIELDS, "program"})


def _check_typed_fields(row: Mapping[str, Any], prefix: str) -> None:
    """Refuse a limit, mapping field or program of the wrong type."""
    max_turns = row.get("max_turns")
    if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1):
        raise TaskError(f"{prefix}field 'max_turns': expected a positive integer, got {max_turns!r}")
    for name in TOKEN_BUDGETS:
        budget = row.get(name)
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= MAX_TOKEN_BUDGET
        ):
            raise TaskError(f"{prefix}field '{name}': expected a positive integer up to {MAX_TOKEN_BUDGET}, got {budget!r:.80}")
    for name in MAPPING_FIELDS:
        if row.get(name) is not None and not isinstance(row[name], Mapping):
            raise TaskError(f"{prefix}field '{name}': expected a mapping, got {type(row[name]).__name__}")
    program = row.get("program")
    if program is not None and not isinstance(program, (Mapping, str)):
        raise TaskError(f"{prefix}field 'program': expected a mapping or a program name, got {type(program).__name__}")


class Task(dict):  # type: ignore[type-arg]
    """Immutable, JSON-serializable input data for one rollout.

    Common fields: `prompt` (user/developer/tool messages, never system),
    `system_prompt`, `answer`, `info`, `max_turns`, the token budgets
    (`max_input_tokens`, `max_output_tokens`, `max_total_tokens`), `tools`, `toolsets`,
    `sandbox`, `program` (a mapping, or the name of one of the harness's
    `task_programs`). Other JSON fields are kept as they are. A string
    `prompt` becomes one user message. `runtime` is refused: runtime data
    belongs on `State`.

    Args:
        data: the row.
        where: how errors should name the row, e.g. ``"row 3"``.
    """

    def __init__(self, data: Mapping[str, Any] | None = None, /, *, where: str | None = None, **fields: Any) -> None:
        merged = {**(data or {}), **fields}
        prefix = f"{where}: " if where else ""
        if "runtime" in merged:
            raise TaskError(f"{prefix}field 'runtime' is not part of a task; runtime data belongs on State")
        if "prompt" in merged:
            merged["prompt"] = _normalize_prompt(merged["prompt"], prefix)
        if "system_prompt" in merged:
            merged["system_prompt"] = _check_system_prompt(merged["system_prompt"], prefix)
        if not merged.keys().isdisjoint(_TYPED_FIELDS):  # most rows have none of them: nothing to check
            _check_typed_fields(merged, prefix)
        try:
            frozen = {key: value if type(value) in _KEPT_AS_THEY_ARE else _frozen(value) for key, value in merged.items()}
        except _NotJSON:
            frozen = {key: freeze_json(value, key, prefix) for key, value in merged.items()}  # raises, naming the field
        super().__init__(frozen)
        self._frozen = False

    def freeze(self) -> Task:
        """Make this task immutable (nested values are frozen already). Returns `self`."""
        self._frozen = True
        return self

    @property
    def frozen(self) -> bool:
        return self._frozen

    def _check_mutable(self) -> None:
        if self._frozen:
            _refuse()

    def __setitem__(self, key: str, value: Any) -> None:
        self._check_mutable()
        super().__setitem__(key, Task({key: value})[key])

    def __delitem__(self, key: str) -> None:
        self._check_mutable()
        super().__delitem__(key)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._check_mutable()
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, *args: Any) -> Any:  # type: ignore[override]
        self._check_mutable()
        return super().pop(*args)

    def popitem(self) -> Any:
        self._check_mutable()
        return super().popitem()

    def clear(self) -> None:
        self._check_mutable()
        super().clear()

    def __ior__(self, other: Any) -> Task:  # type: ignore[override,misc]
        self.update(other)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_task, (dict(self), self._frozen))

    @property
    def prompt(self) -> list[dict[str, Any]]:
        return list(self.get("prompt") or [])


def _rebuild_task(data: dict[str, Any], frozen: bool) -> Task:
    task = Task(data)
    return task.freeze() if frozen else task


__all__ = ["FrozenDict", "FrozenList", "Task", "freeze_json", "thaw"]
