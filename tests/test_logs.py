"""`setup_logging`, `log_level`, `quiet_verifiers` and the ``VF_LOG_LEVEL`` variable."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1._util.logs import LOGGER_NAME


@pytest.fixture
def v1_logger() -> Iterator[logging.Logger]:
    """The ``v1`` logger, its level and handlers put back afterwards."""
    logger = logging.getLogger(LOGGER_NAME)
    level, handlers = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(level)
    logger.handlers[:] = handlers


def test_setup_logging_level_from_argument_then_variable_then_info(
    v1_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VF_LOG_LEVEL", raising=False)
    assert vf.setup_logging() is v1_logger and v1_logger.level == logging.INFO
    monkeypatch.setenv("VF_LOG_LEVEL", "debug")
    vf.setup_logging()
    assert v1_logger.level == logging.DEBUG
    vf.setup_logging("ERROR")
    assert v1_logger.level == logging.ERROR
    vf.setup_logging(5)
    assert v1_logger.level == 5
    installed = [h for h in v1_logger.handlers if type(h).__name__ == "_SetupHandler"]
    assert len(installed) == 1, "called four times, one handler"


@pytest.mark.parametrize("bad", ["LOUD", "", -1, 1.5, True, None])
def test_bad_levels_are_one_clear_error(v1_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch, bad: object) -> None:
    before = v1_logger.level
    if bad is None:
        monkeypatch.setenv("VF_LOG_LEVEL", "chatty")
    with pytest.raises(ValueError, match="log level") as caught:
        vf.setup_logging(bad)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value) and v1_logger.level == before
    if bad is not None:
        with pytest.raises(ValueError, match="log level"), vf.log_level(bad):  # type: ignore[arg-type]
            pass


def test_log_level_and_quiet_verifiers_revert_also_on_error(v1_logger: logging.Logger) -> None:
    v1_logger.setLevel(logging.INFO)
    with vf.log_level("DEBUG") as logger:
        assert logger.level == logging.DEBUG and logging.getLogger("v1.harness").isEnabledFor(logging.DEBUG)
        with vf.quiet_verifiers():
            assert not logging.getLogger("v1.harness").isEnabledFor(logging.INFO)
        assert v1_logger.level == logging.DEBUG
    assert v1_logger.level == logging.INFO
    with pytest.raises(RuntimeError), vf.log_level(logging.CRITICAL):
        raise RuntimeError("boom")
    assert v1_logger.level == logging.INFO


def test_records_reach_stderr_at_the_set_level_in_a_fresh_process() -> None:
    code = (
        "import logging, v1 as vf\n"
        "vf.setup_logging()\n"
        "log = logging.getLogger('v1.demo')\n"
        "log.debug('hidden-debug'); log.warning('shown-warning')\n"
        "with vf.log_level('DEBUG'):\n    log.debug('shown-debug')\n"
        "with vf.quiet_verifiers():\n    log.info('hidden-info')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env={**os.environ, "VF_LOG_LEVEL": "WARNING"},
    )
    assert result.returncode == 0, result.stderr
    assert "v1.demo - WARNING - shown-warning" in result.stderr and "shown-debug" in result.stderr
    assert "hidden" not in result.stderr
