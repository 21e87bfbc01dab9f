"""Run folders as the viewer reads them: discovery, and `results.jsonl` indexed by line offsets.

A folder is an *eval run* when it holds `metadata.json` or `results.jsonl` (what `v1 eval`
writes) and a *training run* when it holds `metrics.jsonl` or `summary.json` (what `v1 train`
writes). `RolloutIndex` keeps the byte offset and a small summary row of every complete line of
`results.jsonl`; `refresh` reads only the bytes appended since the last call, so a run still
being written shows live and a large run is read once. A half-written last line is left for
the next refresh; a line that is complete but not a JSON object is counted, never fatal.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat as stat_module
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from v1._util import bounded_json as _bounded_json
from v1._util.exact_sum import ExactSum, finite_number
from v1.env import METADATA_FILE, RESULTS_FILE, PassRates

TRAIN_METRICS_FILE = "metrics.jsonl"
TRAIN_SUMMARY_FILE = "summary.json"
RUN_FILES = (METADATA_FILE, RESULTS_FILE, TRAIN_METRICS_FILE, TRAIN_SUMMARY_FILE)
SKIPPED_FOLDERS = {"checkpoints", "node_modules", "__pycache__", "weights_for_server"}
MAX_DEPTH = 4
SNIPPET_CHARS = 160
CHUNK_BYTES = 1 << 20
TIMED_SPANS = ("setup", "generation", "scoring", "model", "env")
DEFAULT_PASS_THRESHOLD = 0.5


class RunFolderError(Exception):
    """A file of a run folder that cannot be read as what it should be; the message says which and why."""


def open_run_file(path: Path) -> BinaryIO:
    """`path` opened for reading if it is a regular file itself: a symlink (which could lead out of
    the run folder), a FIFO or a device is refused, never followed or waited on.

    Raises:
        FileNotFoundError: nothing is there.
        RunFolderError: something other than a regular file is there.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise RunFolderError(
            f"{path.name}: not read ({os.strerror(exc.errno or 0)}); the viewer reads only regular files"
        ) from None
    if not stat_module.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunFolderError(f"{path.name}: not a regular file; the viewer reads only regular files")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def is_run_folder(path: Path) -> bool:
    """True when `path` holds any file `v1 eval` or `v1 train` writes."""
    return any((path / name).is_file() for name in RUN_FILES)


def find_runs(root: Path, max_depth: int = MAX_DEPTH) -> list[Path]:
    """Run folders at or under `root` (not inside another run, `checkpoints/` or hidden folders), sorted."""
    if is_run_folder(root):
        return [root]
    found: list[Path] = []

    def walk(folder: Path, depth: int) -> None:
        if depth > max_depth:
            return
        try:
            children = sorted(child for child in folder.iterdir() if child.is_dir())
        except OSError:
            return
        for child in children:
            if child.name.startswith(".") or child.name in SKIPPED_FOLDERS:
                continue
            if is_run_folder(child):
                found.append(child)
            else:
                walk(child, depth + 1)

    walk(root, 1)
    return found


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`, or None when the file is missing.

    Raises:
        RunFolderError: the file is unreadable, not JSON, or not an object.
    """
    try:
        with open_run_file(path) as file:
            text = file.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunFolderError(f"{path.name}: cannot be read ({exc})") from None
    try:
        data = _bounded_json.loads(text, path.name)
    except ValueError as exc:
        raise RunFolderError(f"{exc}; it may be half-written or damaged") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{path.name}: expected a JSON object, got {type(data).__name__}")
    return data


def without_bad_pass_threshold(metadata: dict[str, Any]) -> str | None:
    """Drop a `pass_threshold` that is not a finite number from `metadata`; the one line that says so, if it was."""
    value = metadata.get("pass_threshold", DEFAULT_PASS_THRESHOLD)
    if finite_number(value) is not None:
        return None
    del metadata["pass_threshold"]
    return f"{METADATA_FILE}: pass_threshold is not a number ({str(value)[:40]!r}); {DEFAULT_PASS_THRESHOLD} is used"


def read_train_metrics(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The per-step lines of a training run's `metrics.jsonl`, and how many lines could not be read."""
    steps: list[dict[str, Any]] = []
    bad = 0
    try:
        with open_run_file(path) as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if not line.endswith("\n"):
                    continue
                try:
                    step = _bounded_json.loads(line)
                except ValueError:
                    bad += 1
                    continue
                if isinstance(step, dict):
                    steps.append(step)
                else:
                    bad += 1
    except (FileNotFoundError, RunFolderError):
        pass
    return steps, bad


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1] + "…"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _numbers(table: Any) -> dict[str, float]:
    """The entries of an output's table (`metrics`, `token_usage`) that are finite numbers."""
    numbers = {str(name): finite_number(value) for name, value in _dict(table).items()}
    return {name: number for name, number in numbers.items() if number is not None}


def summarize_rollout(position: int, output: dict[str, Any]) -> dict[str, Any]:
    """The small row the rollout list shows, filters and aggregates on, made from one saved output."""
    prompt, completion = _list(output.get("prompt")), _list(output.get("completion"))
    user = next((_text(m.get("content")) for m in reversed(prompt) if isinstance(m, dict) and m.get("role") == "user"), "")
    answer = next(
        (_text(m.get("content")) for m in reversed(completion) if isinstance(m, dict) and m.get("role") == "assistant"), ""
    )
    if not answer and isinstance(output.get("completion"), str):
        answer = output["completion"]
    error = output.get("error")
    error_type = None
    error_message = ""
    if error:
        error_type = str(error.get("type")) if isinstance(error, dict) else "error"
        error_message = _snippet(str(error.get("message", "")) if isinstance(error, dict) else str(error))
    trajectory = _list(output.get("trajectory"))
    timing = _dict(output.get("timing"))
    spans = {name: finite_number(timing.get(name)) for name in ("total", "overhead")}
    spans.update({name: finite_number(_dict(timing.get(name)).get("duration")) for name in TIMED_SPANS})
    return {
        "n": position,
        "example_id": output.get("example_id"),
        "rollout_index": output.get("rollout_index"),
        "reward": finite_number(output.get("reward")),
        "metrics": _numbers(output.get("metrics")),
        "error": error_type,
        "error_message": error_message,
        "stop": None if output.get("stop_condition") is None else str(output.get("stop_condition")),
        "turns": len(trajectory),
        "tool_calls": sum(len(m.get("tool_calls") or []) for m in completion if isinstance(m, dict)),
        "seconds": spans["total"],
        "output_tokens": finite_number(_dict(output.get("token_usage")).get("output_tokens")),
        "has_tokens": any(isinstance(step, dict) and step.get("tokens") for step in trajectory),
        "prompt": _snippet(user),
        "answer": _snippet(answer),
        "timing": {name: value for name, value in spans.items() if value is not None},
        "usage": _numbers(output.get("token_usage")),
        "retries": max(0, int(output.get("attempts") or 1) - 1) if isinstance(output.get("attempts"), int) else 0,
    }


def summarize_rows(rows: list[dict[str, Any]], pass_threshold: float) -> dict[str, Any]:
    """The aggregates `v1 eval` writes to `metadata.json` (as `EvalSummary` computes them), from summary rows.

    Sums are `ExactSum`s (exact, free of overflow), as `EvalSummary`'s are, so the two agree.
    """
    count = len(rows)

    def total(values: Iterable[float]) -> ExactSum:
        exact = ExactSum()
        for value in values:
            exact.add(value)
        return exact

    def mean(values: list[float], over: int | None = None) -> float:
        return total(values).mean(len(values) if over is None else over)

    metrics: dict[str, list[float]] = {}
    usage: dict[str, list[float]] = {}
    timing: dict[str, list[float]] = {}
    passes = PassRates()
    errors: Counter[str] = Counter()
    stops: Counter[str] = Counter()
    for row in rows:
        for name, value in row["metrics"].items():
            metrics.setdefault(name, []).append(value)
        for name, value in row["usage"].items():
            usage.setdefault(name, []).append(value)
        for name, value in row["timing"].items():
            timing.setdefault(name, []).append(value)
        if row["error"]:
            errors[row["error"]] += 1
        stops[str(row["stop"])] += 1
        passes.add(json.dumps(row["example_id"]), (row["reward"] or 0.0) >= pass_threshold)

    return {
        "avg_reward": mean([row["reward"] or 0.0 for row in rows]),
        "avg_metrics": {name: mean(values) for name, values in sorted(metrics.items())},
        "avg_error": sum(errors.values()) / count if count else 0.0,
        "pass_at_k": passes.pass_at_k(),
        "pass_all_k": passes.pass_all_k(),
        "pass_threshold": pass_threshold,
        "usage": {name: mean(values, count) for name, values in sorted(usage.items())} if usage else None,
        "num_rollouts": count,
        "num_errors": sum(errors.values()),
        "num_retries": sum(row["retries"] for row in rows),
        "error_types": dict(sorted(errors.items())),
        "stop_conditions": dict(sorted(stops.items())),
        "total_usage": {name: total(values).value for name, values in sorted(usage.items())},
        "avg_timing": {name: mean(values, count) for name, values in sorted(timing.items())},
    }


@dataclass
class IndexState:
    """What `RolloutIndex.refresh` has read so far: `read_to` bytes of a file of `size` bytes."""

    offsets: list[int] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)
    read_to: int = 0
    size: int = 0
    lines_seen: int = 0
    partial_bytes: int = 0
    identity: tuple[int, int] | None = None

    @property
    def pending(self) -> bool:
        """True while bytes before the last line end are still unread (a time-budgeted refresh stopped early)."""
        return self.read_to + self.partial_bytes < self.size


class RolloutIndex:
    """`results.jsonl` by line: offsets and summary rows of complete lines, read incrementally.

    Args:
        path: the `results.jsonl` file (it may not exist yet).
        pass_threshold: a rollout passes (for pass@k) when its reward is at least this.
    """

    def __init__(self, path: Path, pass_threshold: float = 0.5) -> None:
        self.path = path
        self.pass_threshold = pass_threshold
        self.state = IndexState()
        self._lock = threading.Lock()
        self._summary: tuple[int, dict[str, Any]] | None = None

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.state.rows

    def summary(self) -> dict[str, Any]:
        """The `metadata.json` aggregates over the rollouts indexed so far (see `summarize_rows`)."""
        rows = self.state.rows
        if self._summary is None or self._summary[0] != len(rows):
            self._summary = (len(rows), summarize_rows(rows, self.pass_threshold))
        return self._summary[1]

    def refresh(self, time_budget: float | None = None) -> bool:
        """Read what was appended since the last call; start over if the file was replaced or cut.

        Args:
            time_budget: stop after about this many seconds (`state.pending` then says more is
                left for the next call), so a large file is indexed across several requests.

        Returns:
            True when rows were added or the index started over.
        """
        with self._lock:
            try:
                stat = self.path.stat(follow_symlinks=False)
                if not stat_module.S_ISREG(stat.st_mode):  # a symlink is never followed: as if absent
                    raise FileNotFoundError(self.path)
            except FileNotFoundError:
                changed = bool(self.state.rows)
                self.state = IndexState()
                return changed
            identity = (stat.st_dev, stat.st_ino)
            started_over = False
            if self.state.identity != identity or stat.st_size < self.state.read_to + self.state.partial_bytes:
                started_over = self.state.identity is not None
                self.state = IndexState(identity=identity)
            self.state.size = stat.st_size
            if stat.st_size == self.state.read_to:
                return started_over
            before = len(self.state.rows)
            self._read_from(self.state.read_to, time_budget)
            return started_over or len(self.state.rows) != before

    def _read_from(self, offset: int, time_budget: float | None) -> None:
        state = self.state
        deadline = None if time_budget is None else time.monotonic() + time_budget
        with open_run_file(self.path) as results:
            results.seek(offset)
            tail = b""
            position = offset
            while chunk := results.read(CHUNK_BYTES):
                data = tail + chunk
                start = 0
                while (end := data.find(b"\n", start)) != -1:
                    self._add_line(position + start, data[start:end])
                    start = end + 1
                tail = data[start:]
                position += start
                if deadline is not None and time.monotonic() > deadline:
                    break
        state.read_to = position
        state.partial_bytes = len(tail) if position + len(tail) >= state.size else 0

    def _add_line(self, offset: int, line: bytes) -> None:
        state = self.state
        state.lines_seen += 1
        if not line.strip():
            return
        try:
            output = _bounded_json.loads(line)
        except ValueError:
            output = None
        if not isinstance(output, dict):
            state.bad_lines.append(state.lines_seen)
            return
        state.rows.append(summarize_rollout(len(state.offsets), output))
        state.offsets.append(offset)

    def read(self, position: int) -> dict[str, Any]:
        """The whole saved output of the rollout at `position` (0-based, among the readable lines).

        Raises:
            IndexError: no such rollout.
            RunFolderError: the line changed on disk since it was indexed.
        """
        offsets = self.state.offsets
        if not 0 <= position < len(offsets):
            raise IndexError(position)
        with open_run_file(self.path) as results:
            results.seek(offsets[position])
            line = results.readline()
        try:
            output = _bounded_json.loads(line)
        except ValueError:
            raise RunFolderError(f"{RESULTS_FILE}: line changed while being read; reload the page") from None
        if not isinstance(output, dict):
            raise RunFolderError(f"{RESULTS_FILE}: line changed while being read; reload the page")
        return output

    def search(self, text: str) -> set[int]:
        """Positions of the rollouts whose saved line contains `text` anywhere in the JSON.

        Case-insensitive for ASCII; text JSON stores escaped (quotes, non-ASCII) is found in either form.
        """
        variants = {text, text.lower(), text.upper(), text.capitalize(), text.title()}
        needles = {text.lower().encode()} | {json.dumps(v)[1:-1].lower().encode() for v in variants}
        found: set[int] = set()
        offsets = list(self.state.offsets)
        if not offsets:
            return found
        with open_run_file(self.path) as results:
            results.seek(offsets[0])
            for position, line in enumerate(_lines_at(results, offsets)):
                lowered = line.lower()
                if any(needle in lowered for needle in needles):
                    found.add(position)
        return found


def _lines_at(results: Any, offsets: list[int]) -> Iterator[bytes]:
    """The lines starting at `offsets` (ascending), reading the file forward once."""
    for offset in offsets:
        if results.tell() != offset:
            results.seek(offset)
        yield results.readline()


def histogram(values: list[float], bins: int = 20) -> dict[str, Any]:
    """Counts of `values` in equal-width bins between their min and max (one bin when all are equal)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return {"min": None, "max": None, "counts": []}
    low, high = min(finite), max(finite)
    if low == high:
        return {"min": low, "max": high, "counts": [len(finite)]}
    distinct = len(set(finite))
    bins = min(bins, distinct) if distinct <= bins else bins
    # halved, so that the span of -1e308..1e308 is a finite float too
    width = (high / 2 - low / 2) / bins
    counts = [0] * bins
    for value in finite:
        counts[min(int((value / 2 - low / 2) / width), bins - 1)] += 1
    return {"min": low, "max": high, "counts": counts}


def file_mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


__all__ = [
    "RUN_FILES",
    "TRAIN_METRICS_FILE",
    "TRAIN_SUMMARY_FILE",
    "open_run_file",
    "IndexState",
    "RolloutIndex",
    "RunFolderError",
    "file_mtime",
    "find_runs",
    "histogram",
    "is_run_folder",
    "read_json_object",
    "read_train_metrics",
    "summarize_rollout",
    "summarize_rows",
]
