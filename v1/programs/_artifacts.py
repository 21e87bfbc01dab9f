"""Artifacts: text and JSON files collected after the program into `state["artifacts"]`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from v1._util import bounded_json as _bounded_json
from v1.config import ArtifactConfig
from v1.errors import ProgramError, SandboxError

if TYPE_CHECKING:
    from v1.rollout import RolloutContext, State

ARTIFACT_READ_SECONDS = 30.0
"""A read that takes longer (a stalled backend) is given up for that artifact; the others are still read."""

FileReader = Callable[[str, int], Awaitable[bytes]]
"""`read(path, max_bytes)`: a file's bytes; FileNotFoundError if absent; SandboxError if larger."""


def declared_artifacts(context: RolloutContext, program: Iterable[ArtifactConfig]) -> list[ArtifactConfig]:
    """The artifacts of a rollout: the program's (harness and task), then the taskset's and the toolsets'."""
    return [*program, *context.artifacts]


async def collect_artifacts(state: State, specs: Iterable[ArtifactConfig], read: FileReader) -> None:
    """Read each artifact into `state["artifacts"][name]`; a missing required or oversized one is an error.

    Every artifact is attempted, each under `ARTIFACT_READ_SECONDS`; what a program put in place of
    a file (a FIFO, a symlink, a loop of them) is refused for that artifact only. The problems are
    recorded on the state together (`where: "artifacts"`).
    """
    artifacts: dict[str, Any] = dict(state.get("artifacts") or {})
    problems: list[str] = []
    for spec in specs:
        try:
            data = await asyncio.wait_for(read(spec.path, spec.max_bytes), ARTIFACT_READ_SECONDS)
        except (FileNotFoundError, IsADirectoryError):
            if not spec.optional:
                problems.append(f"artifact {spec.path!r} was not produced (mark it optional=true if it may be absent)")
            continue
        except SandboxError as exc:
            problems.append(f"artifact {spec.path!r}: {exc}")
            continue
        except asyncio.TimeoutError:
            problems.append(f"artifact {spec.path!r} could not be read within {ARTIFACT_READ_SECONDS:g} s")
            continue
        text = data.decode("utf-8", "replace")
        if spec.format == "json":
            try:
                artifacts[spec.key] = _bounded_json.loads(text, f"artifact {spec.path!r}")
            except ValueError as exc:
                problems.append(str(exc))
        else:
            artifacts[spec.key] = text
    if artifacts:
        state["artifacts"] = artifacts
    if problems:
        state.record_error(ProgramError("; ".join(problems)), "artifacts")


__all__ = ["ARTIFACT_READ_SECONDS", "FileReader", "collect_artifacts", "declared_artifacts"]
