"""`benchmarks/endpoint_fuzz.py` scaled down: hostile requests, concurrent rollouts and a call flood, 0 x 5xx, no stalls."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from v1.interception._server import MAX_CALLS_IN_FLIGHT


def _benchmark(name: str) -> object:
    """A benchmark script loaded by its path: putting `benchmarks/` on `sys.path` for good let its `agents.py`
    shadow the `agents` package (openai-agents) of every test this worker collected after this module."""
    path = Path(__file__).parents[2] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


endpoint_fuzz: Any = _benchmark("endpoint_fuzz")


def test_fuzz_concurrency_and_flood_get_no_5xx_and_no_stall(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    code = endpoint_fuzz.main(["--requests", "300", "--rollouts", "20", "--concurrency", "32", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert code == 0, figures
    for phase in figures.values():
        assert phase["5xx"] == 0 and phase["stalls"] == 0
    assert figures["fuzz"]["requests"] == 300
    assert figures["concurrency"]["statuses"] == {"200": 100}
    assert figures["flood"]["statuses"] == {"200": MAX_CALLS_IN_FLIGHT, "429": MAX_CALLS_IN_FLIGHT}


def test_bad_arguments_are_one_usage_error() -> None:
    for bad in (["--requests", "0"], ["--rollouts", "-3"], ["--concurrency", "x"]):
        try:
            endpoint_fuzz.main(bad)
        except SystemExit as exit:
            assert exit.code == 2
        else:
            raise AssertionError(f"{bad} was accepted")
