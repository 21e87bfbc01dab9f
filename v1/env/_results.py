"""Eval results: aggregates computed one rollout at a time, and the run folder on disk.

`EvalSummary` folds `RolloutOutput`s into the aggregates of `GenerateMetadata`
(mean reward and metrics, error rate, pass@k, token usage, timing) without
keeping the outputs: its memory is a few counters per example. Sums are exact
and cannot overflow (`v1._util.exact_sum`), so the aggregates don't depend on the
order rollouts finished in, a resumed run matches an uninterrupted one to the last
bit, and the mean of two values of ``1e308`` is ``1e308``. It takes finite numbers
only: a saved line with another (``"nan"``, ``"x"``, a 400-digit integer) is
dropped on `--resume` with one warning naming its line, and its rollout is redone.

`ResultsWriter` owns a run folder: `results.jsonl` (one output per line,
appended and flushed as groups finish) and `metadata.json` (rewritten through a
temporary file and `os.replace`, so a kill never leaves it half-written).
`create_run_folder` makes a new folder atomically, so two runs never share one.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import logging
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path
from typing import Any, TextIO, TypeGuard

from v1._util import bounded_json as _bounded_json
from v1._util.exact_sum import ExactSum, finite_number
from v1._util.run_files import NotARegularFileError, append_regular, create_new, read_regular, read_regular_text
from v1.errors import ConfigError

logger = logging.getLogger(__name__)

RESULTS_FILE = "results.jsonl"
METADATA_FILE = "metadata.json"

RolloutKey = tuple[Any, int]
"""A rollout's identity: `(example_id, rollout_index)`; never a path, port or uuid."""


def pass_at_k(n: int, correct: int, k: int) -> float:
    """Unbiased estimate of P(at least one of k samples passes), from n samples of which `correct` pass."""
    if n - correct < k:
        return 1.0
    return 1.0 - math.comb(n - correct, k) / math.comb(n, k)


def pass_all_at_k(n: int, correct: int, k: int) -> float:
    """Unbiased estimate of P(all k samples pass), from n samples of which `correct` pass."""
    return math.comb(correct, k) / math.comb(n, k)


def k_values(n: int) -> list[int]:
    """The k of pass@k for groups of n: powers of two up to n, and n itself."""
    ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return ks + ([n] if n and n not in ks else [])


class PassRates:
    """pass@k and pass-all@k, the means over examples of `pass_at_k` and `pass_all_at_k`, kept one rollout at a time.

    An example's estimates depend only on its rollouts and passes `(n, correct)`, and an eval's
    examples share few such pairs, so the rates are kept as a count of examples per pair: `add`
    moves one example to its next pair, and reading the rates costs a few estimates per pair,
    however many examples there are (an eval that writes its metadata every second does not slow
    down as it grows). Each mean is the exact sum of its examples' estimates rounded once (what
    `math.fsum` gives), over the number of examples with at least k rollouts.
    """

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = {}
        self._pairs: dict[tuple[int, int], int] = {}
        self.largest = 0
        """The most rollouts any example has."""

    def add(self, example: str, passed: bool) -> None:
        """One more rollout of `example` (a key, e.g. its id as JSON), passing or not."""
        pairs, counts = self._pairs, self._counts.get(example)
        if counts is None:
            counts = self._counts[example] = [0, 0]
        else:
            pair = (counts[0], counts[1])
            left = pairs[pair] - 1
            if left:
                pairs[pair] = left
            else:
                del pairs[pair]
        counts[0] += 1
        counts[1] += passed
        pair = (counts[0], counts[1])
        pairs[pair] = pairs.get(pair, 0) + 1
        if counts[0] > self.largest:
            self.largest = counts[0]

    def pass_at_k(self) -> dict[str, float]:
        """Mean over examples of pass@k, for k = 1, 2, 4, ... up to the most rollouts of an example, and that number."""
        return self._means(pass_at_k)

    def pass_all_k(self) -> dict[str, float]:
        """Mean over examples of pass-all@k, for the same k as `pass_at_k`."""
        return self._means(pass_all_at_k)

    def _means(self, estimate: Callable[[int, int, int], float]) -> dict[str, float]:
        result = {}
        for k in k_values(self.largest):
            pairs = [(pair, count) for pair, count in self._pairs.items() if pair[0] >= k]
            total = sum((Fraction(estimate(n, correct, k)) * count for (n, correct), count in pairs), Fraction(0))
            result[str(k)] = float(total) / sum(count for _, count in pairs)
        return result


TIMED_SPANS = ("setup", "generation", "scoring", "model", "env")
"""The spans of an output's `timing` whose `duration` the summary averages."""


def output_problem(output: Mapping[str, Any]) -> str | None:
    """What makes a saved output unusable in the aggregates, in a few words naming the field; None when nothing does.

    The aggregates take finite numbers only (`reward`, `metrics`, `token_usage`, `timing`) and
    whole counts (`attempts`, `model_retries`): ``"nan"``, ``"x"`` or a 400-digit integer is a problem.
    """
    return _checked_numbers(output)[0]


def _checked_numbers(output: Mapping[str, Any]) -> tuple[str | None, list[tuple[str | None, str, float]]]:
    """`output_problem`'s answer, and when there is none `(table, name, number)` for each number `_summed` reads."""
    problem = _count_problem(output)
    if problem is not None:
        return problem, []
    numbers = []
    for field, table, name, value in _summed(output):
        number = _finite(value)
        if number is None:
            return f"field {field!r}: {str(value)[:40]!r} is not a finite number", []
        numbers.append((table, name, number))
    return None, numbers


def _finite(value: Any) -> float | None:
    """`finite_number`, answered without a call for the finite float nearly every value is (inf - inf is NaN)."""
    return value if type(value) is float and value - value == 0.0 else finite_number(value)


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return type(value) is dict or isinstance(value, Mapping)  # a dict answered before the slower ABC check


def _count_problem(output: Mapping[str, Any]) -> str | None:
    counts = {"attempts": output.get("attempts")}
    retries = output.get("model_retries")
    if isinstance(retries, Mapping):
        counts |= {f"model_retries.{kind}": count for kind, count in retries.items()}
    for field, count in counts.items():
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or not 0 <= count < 2**53):
            return f"field {field!r}: {str(count)[:40]!r} is not a count"
    return None


def _summed(output: Mapping[str, Any]) -> Iterator[tuple[str, str | None, str, Any]]:
    """`(field, table, name, value)` for each number the aggregates read from an output.

    `table` is ``"reward"``, ``"metrics"``, ``"token_usage"`` or ``"timing"`` (a span's duration under the
    span's name); None for a table that isn't one (it is its own value, checked but not summed).
    """
    if output.get("reward") is not None:
        yield "reward", "reward", "reward", output["reward"]
    for table in ("metrics", "token_usage", "timing"):
        value = output.get(table)
        if value is not None and not _is_mapping(value):
            yield table, None, table, value
    for table in ("metrics", "token_usage"):
        values = output.get(table)
        if _is_mapping(values):
            for name, value in values.items():
                yield f"{table}.{name}", table, name, value
    timing = output.get("timing")
    if not _is_mapping(timing):
        return
    for name in ("total", "overhead"):
        if name in timing:
            yield f"timing.{name}", "timing", name, timing[name]
    for name in TIMED_SPANS:
        span = timing.get(name)
        if _is_mapping(span) and "duration" in span:
            yield f"timing.{name}.duration", "timing", name, span["duration"]


class EvalSummary:
    """The aggregates of an eval, updated one `RolloutOutput` at a time.

    Args:
        pass_threshold: a rollout passes (for pass@k) when its reward is at least this.
    """

    def __init__(self, pass_threshold: float = 0.5) -> None:
        self.pass_threshold = pass_threshold
        self.count = 0
        self.errors = 0
        self.retries = 0
        self.model_retries: Counter[str] = Counter()
        self._reward = ExactSum()
        self._metrics: dict[str, tuple[ExactSum, list[int]]] = {}
        self._usage: dict[str, ExactSum] = {}
        self._timing: dict[str, ExactSum] = {}
        self.error_types: Counter[str] = Counter()
        self.stop_conditions: Counter[str] = Counter()
        self._passes = PassRates()

    def add(self, output: Mapping[str, Any]) -> None:
        """Fold one rollout's output into the aggregates.

        Raises:
            ValueError: a number of the output is not a finite number (`output_problem`); nothing is added.
        """
        problem, numbers = _checked_numbers(output)
        if problem is not None:
            raise ValueError(problem)
        self.count += 1
        for table, name, number in numbers:
            if table is not None:
                self._sum_of(table, name).add_finite(number)
        error = output.get("error")
        if error:
            self.errors += 1
            self.error_types[str(error.get("type") if isinstance(error, Mapping) else error)] += 1
        self.stop_conditions[str(output.get("stop_condition"))] += 1
        self.retries += max(0, int(output.get("attempts") or 1) - 1)
        model_retries = output.get("model_retries")
        if isinstance(model_retries, Mapping):
            for kind, count in model_retries.items():
                self.model_retries[str(kind)] += int(count)
        reward = float(output.get("reward") or 0.0)
        example_id = output.get("example_id")
        key = str(example_id) if type(example_id) is int else json.dumps(example_id)  # json.dumps' text for an int
        self._passes.add(key, reward >= self.pass_threshold)

    def _sum_of(self, table: str, name: str) -> ExactSum:
        """The running sum of `name` in `table` (`_summed`'s), made on first use; a metric's count goes up by one."""
        if table == "reward":
            return self._reward
        if table == "metrics":
            metric = self._metrics.get(name)
            if metric is None:
                metric = self._metrics[name] = (ExactSum(), [0])
            metric[1][0] += 1
            return metric[0]
        sums = self._usage if table == "token_usage" else self._timing
        total = sums.get(name)
        if total is None:
            total = sums[name] = ExactSum()
        return total

    @property
    def avg_reward(self) -> float:
        return self._reward.mean(self.count)

    @property
    def avg_metrics(self) -> dict[str, float]:
        return {name: total.mean(count[0]) for name, (total, count) in sorted(self._metrics.items())}

    @property
    def avg_error(self) -> float:
        return self.errors / self.count if self.count else 0.0

    @property
    def pass_at_k(self) -> dict[str, float]:
        """Mean over examples of pass@k (k = 1, 2, 4, ... up to the rollouts per example)."""
        return self._passes.pass_at_k()

    @property
    def pass_all_k(self) -> dict[str, float]:
        """Mean over examples of pass-all@k: the chance that k sampled rollouts all pass."""
        return self._passes.pass_all_k()

    @property
    def usage(self) -> dict[str, float] | None:
        """Mean token usage per rollout."""
        if not self._usage:
            return None
        return {name: total.mean(self.count) for name, total in sorted(self._usage.items())}

    @property
    def total_usage(self) -> dict[str, float]:
        return {name: total.value for name, total in sorted(self._usage.items())}

    @property
    def avg_timing(self) -> dict[str, float]:
        """Mean seconds per rollout: `total`, `overhead`, and each span's duration."""
        return {name: total.mean(self.count) for name, total in sorted(self._timing.items())}

    def metadata(self) -> dict[str, Any]:
        """The aggregate fields of `GenerateMetadata`."""
        return {
            "avg_reward": self.avg_reward,
            "avg_metrics": self.avg_metrics,
            "avg_error": self.avg_error,
            "pass_at_k": self.pass_at_k,
            "pass_all_k": self.pass_all_k,
            "pass_threshold": self.pass_threshold,
            "usage": self.usage,
            "num_rollouts": self.count,
            "num_errors": self.errors,
            "num_retries": self.retries,
            "num_model_retries": sum(self.model_retries.values()),
            "model_retry_types": dict(sorted(self.model_retries.items())),
            "error_types": dict(sorted(self.error_types.items())),
            "stop_conditions": dict(sorted(self.stop_conditions.items())),
            "total_usage": self.total_usage,
            "avg_timing": self.avg_timing,
        }


def create_run_folder(parent: str | Path, name: str) -> Path:
    """A new, empty folder `parent/name` (else `name-2`, `name-3`, ...), created atomically.

    `mkdir` either creates the folder or fails, so two runs started at the same moment,
    in one process or two, never get the same folder.

    Raises:
        ConfigError: `parent` is a file, or cannot be written.
    """
    parent = Path(parent)
    try:
        parent.mkdir(parents=True, exist_ok=True)
        for suffix in itertools.count(1):
            path = parent / (name if suffix == 1 else f"{name}-{suffix}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            return path
    except OSError as exc:
        raise ConfigError(f"{parent}: cannot create a run folder there ({exc.strerror or exc})") from None
    raise AssertionError("unreachable")  # pragma: no cover


class ResultsWriter:
    """A run folder: `results.jsonl` appended group by group, `metadata.json` replaced atomically.

    File work runs on one background thread, in order, so the event loop never blocks on disk.

    Args:
        path: the run folder (created if missing; `create_run_folder` makes a fresh one).
        extra_metadata: fields added to every `metadata.json` written (e.g. the settings
            `v1 eval --resume` needs to run the rest).
        redo: on resume, a saved output for which this is true is run again, with the rest
            of its group (e.g. the rollouts that failed because the API key was refused).
    """

    def __init__(
        self,
        path: str | Path,
        extra_metadata: Mapping[str, Any] | None = None,
        *,
        redo: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> None:
        self.path = Path(path)
        self.extra_metadata = dict(extra_metadata or {})
        self.redo = redo
        self.results_path = self.path / RESULTS_FILE
        self.metadata_path = self.path / METADATA_FILE
        self._file: TextIO | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="v1-results")
        self._flushing = False
        self._batch: tuple[asyncio.Future[None], list[Mapping[str, Any]]] | None = None
        """The outputs written while a flush runs, and the future their writers wait on: the next flush."""
        self._flusher: asyncio.Task[None] | None = None

    @classmethod
    def resuming(
        cls, path: str | Path, extra_fields: Iterable[str] = (), redo: Callable[[Mapping[str, Any]], bool] | None = None
    ) -> ResultsWriter:
        """The writer of an existing run folder, for `--resume`; `extra_fields` of its metadata are kept.

        Raises:
            ConfigError: the folder or its `metadata.json` is missing or unreadable.
        """
        writer = cls(path, redo=redo)
        if not os.path.lexists(writer.metadata_path):
            raise ConfigError(f"--resume {path}: no {METADATA_FILE} there; pass the folder of an earlier run")
        saved = writer.read_metadata()
        writer.extra_metadata = {field: saved[field] for field in extra_fields if field in saved}
        return writer

    def read_metadata(self) -> dict[str, Any]:
        try:
            saved = _bounded_json.loads(read_regular_text(self.metadata_path), str(self.metadata_path))
        except FileNotFoundError:
            return {}
        except (ValueError, NotARegularFileError) as exc:
            raise ConfigError(str(exc)) from None
        if not isinstance(saved, dict):
            raise ConfigError(f"{self.metadata_path}: expected a JSON object, got {type(saved).__name__}")
        return saved

    def load(self, planned: Mapping[Any, Iterable[RolloutKey]], summary: EvalSummary) -> set[Any]:
        """Keep the saved rollouts of finished units, fold them into `summary`, return those units.

        A unit (a group, or one rollout under independent scoring) is finished when every one
        of its planned rollouts is saved. Everything else is dropped from `results.jsonl` and
        will be redone: a half-written last line, the saved part of an unfinished group, lines
        repeated or not part of the plan, and units holding an output `redo` picks. The file
        is rewritten through a temporary file.
        """
        unit_of = {tuple(key): unit for unit, keys in planned.items() for key in keys}
        expected = {unit: {tuple(key) for key in keys} for unit, keys in planned.items()}
        return self._keep_finished(unit_of.get, expected.__getitem__, summary)

    def load_stream(self, rollouts_per_example: int, independent_scoring: bool, summary: EvalSummary) -> set[Any]:
        """`load` for a stream, whose rows are not known before they are drawn: every saved unit that is finished
        (`rollouts_per_example` rollouts of an example, or one under independent scoring) is kept, whichever
        example it is; its id is the example's id (`(example_id, rollout_index)` under independent scoring)."""

        def unit_of(key: RolloutKey) -> Any:
            if not 0 <= key[1] < rollouts_per_example:
                return None
            return key if independent_scoring else key[0]

        def expected(unit: Any) -> set[RolloutKey]:
            return {unit} if independent_scoring else {(unit, index) for index in range(rollouts_per_example)}

        return self._keep_finished(unit_of, expected, summary)

    def _keep_finished(
        self, unit_of: Callable[[RolloutKey], Any], expected: Callable[[Any], set[RolloutKey]], summary: EvalSummary
    ) -> set[Any]:
        self.path.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(self.results_path):
            return set()
        saved: dict[Any, set[RolloutKey]] = {}
        to_redo: set[Any] = set()
        dropped = 0
        for output in self._read_lines(report=True):
            key = _key(output)
            unit = None if key is None else unit_of(key)
            if key is None or unit is None:
                dropped += 1
                continue
            saved.setdefault(unit, set()).add(key)
            if self.redo is not None and self.redo(output):
                to_redo.add(unit)
        done = {unit for unit, keys in saved.items() if keys == expected(unit) and unit not in to_redo}
        kept: set[RolloutKey] = set()
        temporary = self.results_path.with_suffix(".jsonl.tmp")
        with create_new(temporary) as out:
            for output in self._read_lines():
                key = _key(output)
                if key is None or key in kept or unit_of(key) not in done:
                    continue
                kept.add(key)
                summary.add(output)
                out.write(json.dumps(output) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.results_path)
        redone = sum(len(keys) for unit, keys in saved.items() if unit not in done)
        if dropped or redone:
            logger.warning(
                "%s: dropped %d unreadable or unplanned line(s) and %d rollout(s) of unfinished groups (or groups to redo); they will be redone",
                self.results_path,
                dropped,
                redone,
            )
        return done

    def _read_lines(self, report: bool = False) -> Iterable[dict[str, Any]]:
        """The saved outputs the aggregates can take (`output_problem`); with `report`, each other line is
        logged once, naming the file, the line and what is wrong with it."""
        try:
            raw = read_regular(self.results_path)
        except NotARegularFileError as exc:
            raise ConfigError(str(exc)) from None
        with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                if not line.endswith("\n"):
                    continue  # half-written by a killed run
                where = f"{self.results_path} line {number}"
                try:
                    output = _bounded_json.loads(line, where)
                except ValueError as exc:
                    if report:
                        logger.warning("%s; the line is dropped", exc)
                    continue
                if not isinstance(output, dict):
                    continue
                problem = output_problem(output)
                if problem is not None:
                    if report:
                        logger.warning("%s: %s; the line is dropped and its rollout redone", where, problem)
                    continue
                yield output

    async def write(self, outputs: Sequence[Mapping[str, Any]]) -> None:
        """Append outputs, one JSON line each, and flush; returns once they are in the file.

        Writes made while a flush runs go out together in the next one (a group commit): one trip to
        the writer thread for a burst of finished groups, not one each (about 60 us of CPU a trip).
        A writer that stops waiting (cancelled) leaves its lines to be written.
        """
        loop = asyncio.get_running_loop()
        if self._flushing:
            if self._batch is None:
                self._batch = (loop.create_future(), [])
            flushed, batch = self._batch
            batch.extend(outputs)
            await asyncio.shield(flushed)
            return
        self._flushing = True  # nothing in flight: this write goes at once, in this task
        try:
            await asyncio.shield(loop.run_in_executor(self._executor, self._append, outputs))
        finally:
            if self._batch is not None:  # written meanwhile: the next flush, in a task of its own
                self._flusher = loop.create_task(self._flush_batches())
            else:
                self._flushing = False

    async def _flush_batches(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._batch is not None:
                (flushed, batch), self._batch = self._batch, None
                try:
                    await loop.run_in_executor(self._executor, self._append, batch)
                except asyncio.CancelledError:  # the loop is closing: no writer is left to hear of it
                    flushed.cancel()
                    if self._batch is not None:
                        self._batch[0].cancel()
                        self._batch = None
                    raise
                except Exception as exc:
                    flushed.set_exception(exc)
                    flushed.exception()  # every writer of the batch raises it; none "never retrieved" if none waits
                else:
                    flushed.set_result(None)
        finally:
            self._flushing = False

    def _append(self, outputs: Sequence[Mapping[str, Any]]) -> None:
        if self._file is None:
            self.path.mkdir(parents=True, exist_ok=True)
            self._file = append_regular(self.results_path)
        self._file.write("".join(json.dumps(output) + "\n" for output in outputs))
        self._file.flush()

    async def write_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Replace `metadata.json` atomically."""
        await asyncio.get_running_loop().run_in_executor(self._executor, self.write_metadata_now, dict(metadata))

    def write_metadata_now(self, metadata: Mapping[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        temporary = self.metadata_path.with_suffix(".json.tmp")
        with create_new(temporary) as out:
            json.dump({**metadata, **self.extra_metadata}, out, indent=2)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.metadata_path)

    async def close(self) -> None:
        """Flush to disk and stop the writer thread."""
        if self._flusher is not None:
            await asyncio.wait([self._flusher])  # lines still on their way: their writers hear of a failure
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_file)
        self._executor.shutdown(wait=True)

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None


def _key(output: Mapping[str, Any]) -> RolloutKey | None:
    example_id, index = output.get("example_id"), output.get("rollout_index")
    if not isinstance(index, int) or isinstance(example_id, (dict, list)):
        return None
    return (example_id, index)


__all__ = [
    "METADATA_FILE",
    "RESULTS_FILE",
    "EvalSummary",
    "ExactSum",
    "PassRates",
    "ResultsWriter",
    "RolloutKey",
    "create_run_folder",
    "k_values",
    "output_problem",
    "pass_all_at_k",
    "pass_at_k",
]
