"""The suite's own scheduling (tests/conftest.py): a module with a fixture of its own runs on one pytest-xdist worker."""

from __future__ import annotations

import pytest

from tests.conftest import xdist_group

MODULE = "tests/test_suite_groups.py"


@pytest.fixture(scope="module")
def module_fixture() -> None:
    """What puts this module in a group of its own, as a built venv or a torchrun checkpoint does elsewhere."""


def test_a_module_fixture_puts_its_tests_in_one_group_that_the_scheduler_reads(
    module_fixture: None, request: pytest.FixtureRequest
) -> None:
    assert xdist_group(request.node) == MODULE
    assert [mark.kwargs["name"] for mark in request.node.iter_markers("xdist_group")] == [MODULE]
    if getattr(request.config.option, "loadgroup", False):  # a worker under `-n 2 --dist loadgroup`, as CI runs
        # the controller groups by the id's text after "@": without it each test is scheduled alone
        assert request.node.nodeid.endswith(f"@{MODULE}"), request.node.nodeid
