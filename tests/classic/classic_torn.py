"""A SingleTurnEnv whose `@vf.teardown` appends a line to the file `TEARDOWN_MARKER` names (who tore it down, and how often)."""

from __future__ import annotations

import os
from pathlib import Path

from classic_reverse import answer_length, reversed_exactly, rows

import v1 as vf


class Torn(vf.SingleTurnEnv):
    @vf.teardown
    def release(self) -> None:
        with Path(os.environ["TEARDOWN_MARKER"]).open("a", encoding="utf-8") as log:
            log.write(f"torn down in {os.getpid()}\n")


def load_environment() -> vf.Environment:
    rubric = vf.Rubric([reversed_exactly, answer_length], [1.0, 0.0])
    return Torn(dataset=rows(), rubric=rubric, env_id="classic_torn")
