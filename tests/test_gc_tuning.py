"""`batch_gc()`: thresholds raised for a batch of rollouts, restored after, nesting-safe, and off when asked."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1._util.gc_tuning import OLDER_THRESHOLD, YOUNG_THRESHOLD
from v1.testing import MockModelServer


@pytest.fixture(autouse=True)
def default_thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_thresholds_are_raised_inside_and_restored_after() -> None:
    with vf.batch_gc():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, OLDER_THRESHOLD, OLDER_THRESHOLD)
    assert gc.get_threshold() == (700, 10, 10)


def test_nested_and_overlapping_uses_restore_once_the_last_one_leaves() -> None:
    outer = vf.batch_gc()
    outer.__enter__()
    with vf.batch_gc():
        pass
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD, "the inner use left while the outer one still runs"
    inside = threading.Event()
    release = threading.Event()

    def other_thread() -> None:
        with vf.batch_gc():
            inside.set()
            release.wait(HANG_S)

    worker = threading.Thread(target=other_thread)
    worker.start()
    assert inside.wait(HANG_S)
    outer.__exit__(None, None, None)
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD, "a thread's batch still runs"
    release.set()
    worker.join(HANG_S)
    assert gc.get_threshold() == (700, 10, 10)


def test_an_exception_restores_the_thresholds() -> None:
    with pytest.raises(RuntimeError), vf.batch_gc():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_higher_user_thresholds_and_a_disabled_collector_are_kept() -> None:
    gc.set_threshold(100_000, 50, 50)
    with vf.batch_gc():
        assert gc.get_threshold() == (100_000, 50, 50)
    gc.set_threshold(0)
    with vf.batch_gc():
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold()[0] == 0


def test_the_environment_variable_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_BATCH_GC", "0")
    with vf.batch_gc():
        assert gc.get_threshold() == (700, 10, 10)


async def test_env_generate_runs_its_rollouts_inside_it(mock: MockModelServer) -> None:
    seen: list[tuple[int, int, int]] = []

    def program(task: vf.Task, state: vf.State) -> None:
        seen.append(gc.get_threshold())

    env = vf.Env(vf.Taskset(source=[{"prompt": "hi"}] * 3), vf.Harness(program=program))
    await env.generate(env.eval_rows(3), vf.ClientConfig(api_base_url=mock.url), "m")
    assert seen and all(threshold[0] == YOUNG_THRESHOLD for threshold in seen)
    assert gc.get_threshold() == (700, 10, 10)


def test_frozen_heap_freezes_what_is_alive_and_unfreezes_only_what_it_froze() -> None:
    from v1._util.gc_tuning import frozen_heap

    assert gc.get_freeze_count() == 0
    alive: list[list[int]] = [[1]]

    def scanned() -> bool:
        return any(candidate is alive for candidate in gc.get_objects())

    with frozen_heap():
        assert gc.get_freeze_count() > 0 and not scanned()
    assert gc.get_freeze_count() == 0 and scanned()
    gc.freeze()  # the caller's own freeze (a pre-fork server, say) is theirs to undo
    try:
        before = gc.get_freeze_count()
        with frozen_heap():
            pass
        assert gc.get_freeze_count() >= before > 0
    finally:
        gc.unfreeze()
