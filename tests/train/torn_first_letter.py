"""first_letter whose taskset records each teardown (when does a run tear its environment down?)."""

from __future__ import annotations

import os

import v1 as vf
from tasksets.first_letter import DEFAULTS


class TornTaskset(vf.Taskset):
    @vf.teardown
    def record(self) -> None:
        with open(os.environ["TEARDOWN_MARKER"], "a", encoding="utf-8") as log:
            log.write("torn down\n")


def load_taskset(config: vf.TasksetConfig | None = None) -> vf.Taskset:
    return TornTaskset(config=vf.TasksetConfig.with_defaults(DEFAULTS, config))
