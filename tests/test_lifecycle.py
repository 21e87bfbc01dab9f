"""Lifecycle decorators, handler building, argument injection and ordering."""

from __future__ import annotations

import asyncio
import threading

import pytest

import v1
from tests.tools.patience import HANG_S
from v1.rollout._lifecycle import (
    SINGLE_ARGS,
    SPEC_ATTRIBUTE,
    Handler,
    Handlers,
    HandlerSpec,
    group_arguments,
    handlers_from_list,
    handlers_of,
    rollout_arguments,
)

DECORATORS = {
    "stop": v1.stop,
    "setup": v1.setup,
    "update": v1.update,
    "metric": v1.metric,
    "reward": v1.reward,
    "advantage": v1.advantage,
    "cleanup": v1.cleanup,
    "teardown": v1.teardown,
}


def make_task_and_state(**fields) -> tuple[v1.Task, v1.State]:
    task = v1.Task({"prompt": "What is 2+2?", "answer": "4", "info": {"level": 1}, "example_id": 3, **fields}).freeze()
    return task, v1.State.for_task(task)


def module_reward(state) -> float:
    return 1.0


@v1.reward(weight=0.25, priority=4)
def module_weighted_reward(state) -> float:
    return 1.0


# -- decorators --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(DECORATORS))
def test_bare_decorator_marks_and_returns_the_function(kind):
    def handler(state):
        return None

    assert DECORATORS[kind](handler) is handler
    spec = getattr(handler, SPEC_ATTRIBUTE)
    assert spec.kind == kind
    assert spec.priority == 0


@pytest.mark.parametrize("kind", sorted(DECORATORS))
def test_decorator_with_priority(kind):
    def handler(state):
        return None

    decorator = DECORATORS[kind](priority=7)
    assert decorator(handler) is handler
    spec = getattr(handler, SPEC_ATTRIBUTE)
    assert spec.kind == kind
    assert spec.priority == 7


def test_reward_weight_defaults_and_overrides():
    @v1.reward
    def plain(state):
        return 1.0

    @v1.reward(weight=0.5, priority=2)
    def weighted(state):
        return 1.0

    assert getattr(plain, SPEC_ATTRIBUTE) == HandlerSpec(kind="reward", priority=0, weight=1.0)
    assert getattr(weighted, SPEC_ATTRIBUTE) == HandlerSpec(kind="reward", priority=2, weight=0.5)


def test_metric_has_weight_zero():
    @v1.metric
    def length(state):
        return 1.0

    assert getattr(length, SPEC_ATTRIBUTE).weight == 0.0


def test_decorators_work_on_async_functions():
    @v1.stop(priority=10)
    async def early(state):
        return True

    assert asyncio.iscoroutinefunction(early)
    assert getattr(early, SPEC_ATTRIBUTE) == HandlerSpec(kind="stop", priority=10)


# -- Handler.build -----------------------------------------------------------------------


def test_build_single_handler():
    def correct(completion, answer):
        return 1.0

    handler = Handler.build(correct, "reward")
    assert handler.name == "correct"
    assert handler.kind == "reward"
    assert handler.params == ("completion", "answer")
    assert not handler.is_group
    assert not handler.takes_all
    assert handler.weight == 1.0
    assert handler.priority == 0


def test_build_detects_group_handlers_by_plural_arguments():
    def best_of_group(states, answers):
        return [0.0 for _ in states]

    handler = Handler.build(best_of_group, "reward")
    assert handler.is_group
    assert handler.params == ("states", "answers")


def test_advantage_handlers_are_always_group_handlers():
    def advantage_fn(**kwargs):
        return []

    assert Handler.build(advantage_fn, "advantage").is_group


def test_mixing_single_and_plural_arguments_is_a_config_error():
    def mixed(state, states):
        return 0.0

    with pytest.raises(
        v1.ConfigError, match=r"reward handler 'mixed' mixes per-rollout \['state'\] and group \['states'\] arguments"
    ):
        Handler.build(mixed, "reward")


def test_uninjectable_required_argument_is_a_config_error():
    def needs_db(state, database):
        return 0.0

    with pytest.raises(
        v1.ConfigError, match=r"metric handler 'needs_db': argument 'database' can't be injected; available: task, state"
    ):
        Handler.build(needs_db, "metric")


def test_single_argument_in_a_group_handler_is_a_config_error():
    def per_state(state):
        return []

    with pytest.raises(
        v1.ConfigError, match=r"advantage handler 'per_state': argument 'state' can't be injected; available: tasks"
    ):
        Handler.build(per_state, "advantage")


def test_teardown_handlers_take_no_rollout_arguments():
    def close(state):
        return None

    with pytest.raises(v1.ConfigError, match=r"teardown handler 'close': argument 'state' can't be injected; available: none"):
        Handler.build(close, "teardown")
    assert Handler.build(lambda: None, "teardown").params == ()


def test_optional_unknown_arguments_are_left_to_their_defaults():
    def with_default(state, scale=2.0):
        return scale

    handler = Handler.build(with_default, "reward")
    assert handler.params == ("state",)


def test_explicit_weight_and_priority():
    def fn(state):
        return 0.0

    handler = Handler.build(fn, "reward", priority=3, weight=2)
    assert handler.weight == 2.0
    assert handler.priority == 3
    assert Handler.build(fn, "metric").weight == 0.0
    assert Handler.build(fn, "stop").weight == 0.0


def test_unreadable_signature_is_a_config_error():
    class NoSignature:
        __name__ = "no_signature"

        @property
        def __signature__(self):
            raise ValueError("no signature available")

        def __call__(self, *args):
            return None

    with pytest.raises(v1.ConfigError, match=r"stop handler 'no_signature': cannot read its signature"):
        Handler.build(NoSignature(), "stop")


# -- argument injection ------------------------------------------------------------------


async def test_arguments_are_injected_by_name():
    task, state = make_task_and_state()
    state["completion"] = [{"role": "assistant", "content": "4"}]
    seen = {}

    def check(answer, info, prompt, completion, example_id, task, state, trajectory):
        seen.update(locals())
        return 1.0

    result = await Handler.build(check, "reward").call(rollout_arguments(task, state))
    assert result == 1.0
    assert seen["answer"] == "4"
    assert seen["info"] == {"level": 1}
    assert seen["prompt"] == [{"role": "user", "content": "What is 2+2?"}]
    assert seen["completion"] == [{"role": "assistant", "content": "4"}]
    assert seen["example_id"] == 3
    assert seen["task"] is task
    assert seen["state"] is state
    assert seen["trajectory"] is state["trajectory"]


async def test_var_keyword_handler_gets_every_argument():
    task, state = make_task_and_state()
    seen = {}

    def everything(**kwargs):
        seen.update(kwargs)

    handler = Handler.build(everything, "update")
    assert handler.takes_all
    await handler.call(rollout_arguments(task, state))
    assert set(seen) == set(SINGLE_ARGS)
    assert seen["state"] is state


async def test_named_and_var_keyword_arguments_together():
    task, state = make_task_and_state()
    seen = {}

    def both(state, **rest):
        seen["state"] = state
        seen["rest"] = set(rest)

    await Handler.build(both, "update").call(rollout_arguments(task, state))
    assert seen["state"] is state
    assert seen["rest"] == set(SINGLE_ARGS) - {"state"}


async def test_state_prompt_wins_over_task_prompt():
    task, state = make_task_and_state()
    state["prompt"] = [{"role": "user", "content": "rendered"}]
    assert rollout_arguments(task, state)["prompt"] == [{"role": "user", "content": "rendered"}]


def test_info_defaults_to_an_empty_mapping():
    task = v1.Task(prompt="x").freeze()
    assert rollout_arguments(task, v1.State.for_task(task))["info"] == {}


async def test_group_arguments_are_lists_in_state_order():
    first_task, first = make_task_and_state(answer="1")
    second_task, second = make_task_and_state(answer="2")
    seen = {}

    def group(states, answers, tasks):
        seen.update(states=states, answers=answers, tasks=tasks)
        return [0.0, 0.0]

    await Handler.build(group, "reward").call(group_arguments([first_task, second_task], [first, second]))
    assert seen["states"] == [first, second]
    assert seen["states"][0] is first
    assert seen["answers"] == ["1", "2"]
    assert seen["tasks"] == [first_task, second_task]


# -- threads -----------------------------------------------------------------------------


async def test_sync_handlers_run_in_a_worker_thread():
    task, state = make_task_and_state()
    loop_thread = threading.get_ident()
    seen = []

    def sync_handler(state):
        seen.append(threading.get_ident())
        return 1.0

    assert await Handler.build(sync_handler, "reward").call(rollout_arguments(task, state)) == 1.0
    assert seen and seen[0] != loop_thread


async def test_async_handlers_run_on_the_loop():
    task, state = make_task_and_state()
    loop_thread = threading.get_ident()
    seen = []

    async def async_handler(state):
        seen.append(threading.get_ident())
        await asyncio.sleep(0)
        return 2.0

    assert await Handler.build(async_handler, "reward").call(rollout_arguments(task, state)) == 2.0
    assert seen == [loop_thread]


async def test_async_callable_objects_run_on_the_loop():
    task, state = make_task_and_state()
    loop_thread = threading.get_ident()
    seen = []

    class Scorer:
        __name__ = "scorer"

        async def __call__(self, state):
            seen.append(threading.get_ident())
            return 3.0

    assert await Handler.build(Scorer(), "reward").call(rollout_arguments(task, state)) == 3.0
    assert seen == [loop_thread]


async def test_sync_handler_returning_an_awaitable_is_awaited():
    task, state = make_task_and_state()

    async def later():
        return 5.0

    def returns_coroutine(state):
        return later()

    assert await Handler.build(returns_coroutine, "reward").call(rollout_arguments(task, state)) == 5.0


async def test_sync_handler_does_not_block_the_loop():
    task, state = make_task_and_state()
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    release = threading.Event()

    def blocking(state):
        loop.call_soon_threadsafe(started.set)
        release.wait(HANG_S)
        return 1.0

    call = asyncio.create_task(Handler.build(blocking, "reward").call(rollout_arguments(task, state)))
    await asyncio.wait_for(started.wait(), HANG_S)
    assert not call.done()
    release.set()
    assert await call == 1.0


# -- collecting and ordering -------------------------------------------------------------


def test_handlers_are_ordered_by_priority_highest_first():
    def low(state):
        return False

    def high(state):
        return False

    def middle(state):
        return False

    def middle_too(state):
        return False

    handlers = Handlers.collect(
        [
            Handler.build(low, "stop", priority=-1),
            Handler.build(middle, "stop", priority=5),
            Handler.build(high, "stop", priority=10),
            Handler.build(middle_too, "stop", priority=5),
        ]
    )
    assert [h.name for h in handlers.of("stop")] == ["high", "middle", "middle_too", "low"]


def test_handlers_are_grouped_by_kind_and_filtered_by_group():
    def single(state):
        return 1.0

    def group(states):
        return [1.0]

    def on_setup(state):
        return None

    handlers = Handlers.collect(
        [Handler.build(single, "reward"), Handler.build(group, "reward"), Handler.build(on_setup, "setup")]
    )
    assert [h.name for h in handlers.of("reward")] == ["single", "group"]
    assert [h.name for h in handlers.of("reward", group=False)] == ["single"]
    assert [h.name for h in handlers.of("reward", group=True)] == ["group"]
    assert [h.name for h in handlers.of("setup")] == ["on_setup"]
    assert handlers.of("cleanup") == ()


def test_the_same_function_twice_is_kept_once():
    def score(state):
        return 1.0

    handlers = Handlers.collect([Handler.build(score, "reward"), Handler.build(score, "reward")])
    assert [h.name for h in handlers.of("reward")] == ["score"]


def test_duplicate_reward_names_are_a_config_error():
    def make(kind):
        def score(state):
            return 1.0

        return Handler.build(score, kind)

    with pytest.raises(v1.ConfigError, match="two reward/metric functions are named 'score'"):
        Handlers.collect([make("reward"), make("reward")])
    with pytest.raises(v1.ConfigError, match="two reward/metric functions are named 'score'"):
        Handlers.collect([make("reward"), make("metric")])


def test_same_name_in_other_kinds_is_fine():
    def make(kind):
        def done(state):
            return True

        return Handler.build(done, kind)

    handlers = Handlers.collect([make("stop"), make("cleanup")])
    assert len(handlers.of("stop")) == 1 and len(handlers.of("cleanup")) == 1


class Owner:
    @v1.reward(weight=2.0, priority=1)
    def correct(self, answer, completion):
        return 1.0 if completion == answer else 0.0

    @v1.stop
    async def done(self, state):
        return True

    @v1.metric
    def length(self, completion):
        return 1.0

    def undecorated(self, state):
        return None


def test_handlers_of_collects_decorated_methods_bound_to_the_owner():
    owner = Owner()
    found = {h.name: h for h in handlers_of(owner)}
    assert set(found) == {"correct", "done", "length"}
    assert found["correct"].kind == "reward"
    assert found["correct"].weight == 2.0
    assert found["correct"].priority == 1
    assert found["correct"].params == ("answer", "completion")
    assert found["correct"].fn.__self__ is owner
    assert found["done"].kind == "stop"
    assert found["length"].weight == 0.0


async def test_bound_method_handler_is_called_with_injected_arguments():
    task, state = make_task_and_state()
    state["completion"] = "4"
    correct = next(h for h in handlers_of(Owner()) if h.name == "correct")
    assert await correct.call(rollout_arguments(task, state)) == 1.0


def test_handlers_from_list_accepts_refs_callables_and_mappings():
    def local_reward(state):
        return 0.0

    built = handlers_from_list(
        "rewards",
        [
            f"{__name__}:module_reward",
            local_reward,
            {"fn": f"{__name__}:module_weighted_reward"},
            {"fn": local_reward, "weight": 3.0, "priority": 9},
        ],
        "taskset",
    )
    assert [(h.name, h.kind, h.weight, h.priority) for h in built] == [
        ("module_reward", "reward", 1.0, 0),
        ("local_reward", "reward", 1.0, 0),
        ("module_weighted_reward", "reward", 0.25, 4),
        ("local_reward", "reward", 3.0, 9),
    ]
    assert built[0].fn is module_reward


def test_handlers_from_list_forces_metric_weight_zero():
    built = handlers_from_list("metrics", [{"fn": module_reward, "weight": 5.0}], "harness")
    assert built[0].kind == "metric"
    assert built[0].weight == 0.0


def test_handlers_from_list_names_the_bad_entry():
    with pytest.raises(v1.ConfigError, match=r"field 'taskset\.rewards\[1\]\.fn': cannot import module 'no_such_module_v1test'"):
        handlers_from_list("rewards", [module_reward, "no_such_module_v1test:fn"], "taskset")
    with pytest.raises(v1.ConfigError, match=r"field 'harness\.stops\[0\]\.fn': .* is not a 'module:object' reference"):
        handlers_from_list("stops", ["not-a-ref"], "harness")
    with pytest.raises(v1.ConfigError, match=r"HandlerConfig: field 'bogus': unknown field"):
        handlers_from_list("stops", [{"fn": module_reward, "bogus": 1}], "harness")
