"""The public error surface of v1: `v1.Error` and its subclasses.

Every error the framework raises on purpose is one of these. Messages say what
was wrong, where (file, field path, task row), and what to do about it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import ClassVar


class Error(Exception):
    """Base class of every error v1 raises on purpose.

    `retryable` says whether a rollout that ended in this error is worth another attempt
    (infrastructure and invalid answers are; bad config, bad input and program bugs are not).
    """

    retryable: ClassVar[bool] = False


class ConfigError(Error, ValueError):
    """A config value, TOML file or `module:object` reference is invalid."""


class MissingKeyError(ConfigError):
    """Environment variables an environment needs (API keys, say) are not set; raised by `ensure_keys`.

    `keys` lists every missing variable.
    """

    def __init__(self, keys: list[str]) -> None:
        self.keys = list(keys)
        exports = " ".join(f"{key}=..." for key in self.keys)
        super().__init__(f"missing environment variable(s) {', '.join(self.keys)}: set them first (export {exports})")

    def __reduce__(self) -> tuple[type, tuple[list[str]]]:
        return type(self), (self.keys,)


class NotSupportedError(ConfigError):
    """A config field is valid but its feature is not implemented yet.

    Raised when the field is *used*, never silently ignored.
    """


class UnknownNameError(ConfigError):
    """A name that no built-in, registration or installed plugin of its family has.

    Args:
        kind: the family, e.g. ``sandbox backend``.
        name: the name asked for.
        known: every name the family has.
        detail: what was tried, when more than the family's names was.
    """

    def __init__(self, kind: str, name: object, known: Iterable[str], detail: str = "") -> None:
        self.kind, self.name, self.known = kind, name, sorted(known)
        close = difflib.get_close_matches(name, self.known, n=1) if isinstance(name, str) and len(name) <= 100 else []
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        self.detail = detail
        super().__init__(
            f"unknown {kind} {shown}{hint}{': ' + detail if detail else ''}; known: {', '.join(self.known) or 'none'}"
        )

    def __reduce__(self) -> tuple[type, tuple[str, object, list[str], str]]:
        return type(self), (self.kind, self.name, self.known, self.detail)


class PluginError(ConfigError):
    """A part that cannot be used: its entry point fails to import, names the wrong kind of object,
    or claims a name that is taken."""


class TaskError(Error, ValueError):
    """A task row is malformed (non-JSON value, system message in `prompt`, ...)."""


class StateFieldError(Error, KeyError):
    """User code tried to write a framework-managed `State` field."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class ModelError(Error):
    """The upstream model call failed, or returned an unusable response."""

    retryable = True


class InvalidModelResponseError(ModelError):
    """The upstream answered, but the response cannot be used (no choices, bad shape)."""


class ModelRequestError(ModelError):
    """The upstream refused the request itself (a 4xx other than auth, rate limits and overlong prompts).

    The caller's parameters are at fault (`max_tokens: -1`, say): it is not retried, and
    the endpoint answers the program with the same status in its dialect's error shape.
    """

    retryable = False

    def __init__(self, message: str, status_code: int = 400) -> None:
        super().__init__(message)
        self.status_code = status_code


class OverlongPromptError(ModelError):
    """The prompt is longer than the model's context; the rollout stops as `prompt_too_long`."""

    retryable = False  # the same prompt fails the same way


class ToolError(Error):
    """A tool failed in a way that should end the rollout."""


class SandboxError(Error):
    """A sandbox could not be created, used or released."""

    retryable = True


class ProgramError(Error):
    """A harness program could not be resolved or run."""


class EndpointError(Error):
    """The interception endpoint cannot serve a request (closed rollout, server down)."""

    retryable = True


class RolloutStopped(Error):
    """Raised inside a program when the rollout was stopped (e.g. `max_turns_reached`).

    The harness treats it as a clean stop, not as an error.
    """

    def __init__(self, condition: str, message: str | None = None) -> None:
        self.condition = condition
        super().__init__(message or f"rollout stopped: {condition}")


__all__ = [
    "ConfigError",
    "EndpointError",
    "Error",
    "InvalidModelResponseError",
    "ModelError",
    "MissingKeyError",
    "ModelRequestError",
    "NotSupportedError",
    "OverlongPromptError",
    "ProgramError",
    "RolloutStopped",
    "SandboxError",
    "StateFieldError",
    "TaskError",
    "ToolError",
    "UnknownNameError",
    "PluginError",
]


def error_class(name: str) -> type[Error] | None:
    """The `v1.Error` subclass a recorded error's `type` names, if any."""
    pending: list[type[Error]] = [Error]
    while pending:
        cls = pending.pop()
        if cls.__name__ == name:
            return cls
        pending.extend(cls.__subclasses__())
    return None
