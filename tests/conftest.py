"""Shared fixtures: a real mock model server over HTTP, and a harness factory pointed at it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import v1 as vf
from v1.testing import MockModelServer


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    """A fresh mock model server (echo replies unless scripted)."""
    with MockModelServer() as server:
        yield server


@pytest.fixture
def client_config(mock: MockModelServer) -> vf.ClientConfig:
    return vf.ClientConfig(api_base_url=mock.url, max_retries=0)


@pytest.fixture
def make_harness(client_config: vf.ClientConfig) -> Any:
    def make(**kwargs: Any) -> vf.Harness:
        kwargs.setdefault("client", client_config)
        kwargs.setdefault("model", "test-model")
        return vf.Harness(**kwargs)

    return make


# --- pytest-xdist: which tests must share a worker (`--dist loadgroup`; harmless without xdist) ---

SHARED_GROUPS: dict[str, tuple[str, ...]] = {
    # One local Ray cluster at a time: each `ray.init(address="local")` starts a GCS, a raylet, a dashboard
    # (on port 8265, the next free one if taken) and workers: about 1 GB, all under /tmp/ray.
    "ray": (
        "tests/test_e2e_ray.py",
        "tests/classic/test_e2e_classic.py",
        "tests/test_e2e_eval_classic_flags.py::test_extra_env_kwargs_reach_ray_actors",
        "tests/sandbox/test_e2e_sandbox_env.py::test_v1_eval_on_ray_runs_sandbox_env_rollouts_on_an_actor",
    ),
    # One CPU vLLM engine at a time (each holds a GB of KV cache), and test_vllm.py's session-scoped
    # `v1 serve --engine vllm` server started once, on one worker (the tests that don't use it go anywhere).
    "vllm": (),
    # The sandbox CLI tests find their sleeping programs by one marker in the process table.
    "sandbox-cli": ("tests/sandbox/test_cli.py",),
}
VLLM_FIXTURES = {"vllm_ready", "vllm_env", "served"}
"""A test using one of these runs a vLLM engine: it joins the `vllm` group wherever it lives."""


def xdist_group(item: pytest.Item) -> str | None:
    """The group `item` must share a worker with, or None when any worker may run it.

    A named shared resource comes first; then a module whose tests share a module- or
    session-scoped fixture of its own (a Ray cluster, a built venv, a browser) is kept on one
    worker, which sets the fixture up once instead of once per worker.
    """
    for group, prefixes in SHARED_GROUPS.items():
        if any(item.nodeid == prefix or item.nodeid.startswith(prefix + "::") for prefix in prefixes):
            return group
    if VLLM_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "vllm"
    module = item.nodeid.split("::", 1)[0]
    info = getattr(item, "_fixtureinfo", None)
    for definitions in info.name2fixturedefs.values() if info is not None else ():
        if any(d.scope in ("module", "package", "session") and d.baseid == module for d in definitions):
            return module
    return None


def pytest_configure(config: pytest.Config) -> None:
    """Register `xdist_group` also when pytest-xdist is off (`-p no:xdist`), so marking a test with it never warns."""
    config.addinivalue_line("markers", "xdist_group(name): run on the same pytest-xdist worker as the group's other tests")
    config.addinivalue_line("markers", "slow: takes a minute or more on the 2-core machine; its module runs first")
    if getattr(config.option, "loadgroup", False):  # a pytest-xdist worker under --dist loadgroup
        config.pluginmanager.register(GroupSuffixes(), "v1-xdist-group-suffixes")


class GroupSuffixes:
    """Puts back the `@group` suffix pytest-xdist's worker gives a grouped test's node id, where pytest dropped it.

    The suffix is the whole of `--dist loadgroup`: the controller schedules by the text after the `@` of the ids
    a worker sends. pytest-xdist 3.8 writes it to `Item._nodeid`, which pytest 9.2 no longer reads (a node id is
    now built from the structured `Item._id`): the suffix is lost, every test is scheduled alone, and a group's
    module fixture is built once per worker, its shared resource run on both at once (pytest-dev/pytest-xdist#1386).
    Runs after xdist's own hook and does nothing where that one took effect; the one place that touches `_id`.
    """

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            names = {
                str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                for mark in item.iter_markers("xdist_group")
            }
            suffix = "@" + "_".join(sorted(names))
            if names and not item.nodeid.endswith(suffix):
                item._id = type(item._id).parse(item.nodeid + suffix)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that must share a worker with `xdist_group` (only `--dist loadgroup` reads it); slow modules first.

    First of the hooks: pytest-xdist's own reads the marks to put each group's name in its tests' node ids.
    """
    for item in items:
        group = xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(name=group))
    items[:] = slow_modules_first(items)


def slow_modules_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` with the modules that hold a `slow` test moved to the front, each module's order kept.

    pytest-xdist hands out work in this order (after the groups with the most tests): a minute-long test
    handed out last keeps one worker busy while the other idles; handed out early, the short tests fill
    in around it. Whole modules move, so a module-scoped fixture is still set up once without xdist.
    """
    slow = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slow") is not None}
    return sorted(items, key=lambda item: item.nodeid.split("::", 1)[0] not in slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the managed vLLM venv (minutes of downloads, once per machine) as soon as a collected test needs it.

    The build runs in a background thread while this worker runs other tests; the vLLM fixtures' own
    `vllm_python()` then waits on the build's file lock and finds the venv ready, or builds it (and fails
    with the reason) when this build failed. A worker that never runs a vLLM test waits on nothing.
    """
    if session.config.option.collectonly:
        return
    if any(VLLM_FIXTURES & set(getattr(item, "fixturenames", ())) for item in session.items):
        threading.Thread(target=build_vllm_venv, name="vllm-venv-build", daemon=True).start()


def build_vllm_venv() -> None:
    from v1.errors import ConfigError
    from v1.inference import vllm_python

    try:
        vllm_python(log=lambda line: None)
    except ConfigError:
        return  # the fixture's own call builds again and reports why
