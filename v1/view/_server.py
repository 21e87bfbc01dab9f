"""The viewer's HTTP server: the page, its static assets, and a JSON API over run folders.

Every API answer is JSON; a bad request is a 4xx with ``{"error": "..."}`` and an unexpected
failure a 500 with one line, never a traceback. The rollout list is paged, filtered, searched
and sorted here, so the browser never holds more than a page of a large run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from v1._util.exact_sum import ExactSum
from v1.view._runs import (
    TRAIN_METRICS_FILE,
    TRAIN_SUMMARY_FILE,
    RolloutIndex,
    RunFolderError,
    file_mtime,
    find_runs,
    histogram,
    open_run_file,
    read_json_object,
    read_train_metrics,
    without_bad_pass_threshold,
)

logger = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
MAX_PAGE = 500
LIVE_SECONDS = 30.0
SORTS = {"position", "reward", "example", "turns", "seconds", "tokens", "tool_calls"}
MAX_ERROR_POSITIONS = 20
MAX_PLOT_BYTES = 64 * 2**20
INDEX_SECONDS = 1.0
"""At most about this long per request reading a large `results.jsonl`; the page asks again until it is read."""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    """A request the API refuses: `status` and a message for the page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Run:
    """One run folder: its files, and the rollout index once the run is opened."""

    def __init__(self, run_id: str, path: Path) -> None:
        self.id = run_id
        self.path = path
        self.index: RolloutIndex | None = None
        self.lock = asyncio.Lock()
        self._histograms: tuple[int, dict[str, Any]] | None = None

    def metadata(self) -> tuple[dict[str, Any] | None, str | None]:
        try:
            metadata = read_json_object(self.path / "metadata.json")
        except RunFolderError as exc:
            return None, str(exc)
        return metadata, without_bad_pass_threshold(metadata) if metadata is not None else None

    def has_results(self) -> bool:
        return (self.path / "results.jsonl").is_file() or (self.path / "metadata.json").is_file()

    def has_training(self) -> bool:
        return (self.path / TRAIN_METRICS_FILE).is_file() or (self.path / TRAIN_SUMMARY_FILE).is_file()

    async def refreshed_index(self, pass_threshold: float) -> RolloutIndex:
        """The rollout index, brought up to date with the file (the reading runs on a thread)."""
        async with self.lock:
            if self.index is None:
                self.index = RolloutIndex(self.path / "results.jsonl", pass_threshold)
            await asyncio.to_thread(self.index.refresh, INDEX_SECONDS)
            return self.index

    def histograms(self, index: RolloutIndex) -> dict[str, Any]:
        rows = index.rows
        if self._histograms is not None and self._histograms[0] == len(rows):
            return self._histograms[1]
        metrics: dict[str, list[float]] = {}
        for row in rows:
            for name, value in row["metrics"].items():
                metrics.setdefault(name, []).append(float(value))
        result = {
            "reward": histogram([row["reward"] for row in rows if row["reward"] is not None]),
            "metrics": {name: histogram(values) for name, values in sorted(metrics.items())},
            "turns": histogram([float(row["turns"]) for row in rows]),
            "seconds": histogram([row["seconds"] for row in rows if row["seconds"] is not None]),
        }
        self._histograms = (len(rows), result)
        return result


def status_of(path: Path, done: int | None, planned: int | None, cut_short: bool = False) -> str:
    """`running` (written to lately and not finished), `incomplete` (planned more, or `cut_short`), or `done`."""
    if planned is not None and done is not None and done >= planned and not cut_short:
        return "done"
    newest = max(
        (t for name in ("results.jsonl", "metadata.json", TRAIN_METRICS_FILE) if (t := file_mtime(path / name)) is not None),
        default=None,
    )
    if newest is not None and time.time() - newest < LIVE_SECONDS:
        return "running"
    return "incomplete" if planned is not None or cut_short else "done"


def planned_rollouts(metadata: dict[str, Any] | None) -> int | None:
    if not metadata:
        return None
    examples, per_example = metadata.get("num_examples"), metadata.get("rollouts_per_example")
    if isinstance(examples, int) and isinstance(per_example, int) and examples >= 0:
        return examples * per_example
    return None


def finite(value: Any) -> Any:
    """`value` with NaN and infinities replaced by None, so the answer is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(finite(data), default=str), status=status, content_type="application/json", charset="utf-8"
    )


class Viewer:
    """The run folders under `roots`, found again on every runs-list request so new runs appear.

    Args:
        roots: folders given on the command line; each is a run or holds runs below it.
    """

    def __init__(self, roots: list[Path]) -> None:
        self.roots = roots
        self.runs: dict[str, Run] = {}
        self.problems: list[dict[str, str]] = []

    def scan(self) -> list[Run]:
        found: dict[str, Run] = {}
        problems = []
        for number, root in enumerate(self.roots):
            paths = find_runs(root)
            if not paths:
                problems.append(
                    {
                        "path": str(root),
                        "message": f"{root}: not a run folder: no metadata.json, results.jsonl (v1 eval) or metrics.jsonl, "
                        "summary.json (v1 train) here or in its subfolders",
                    }
                )
            for path in paths:
                relative = path.relative_to(root).as_posix()
                run_id = str(number) if relative == "." else f"{number}/{relative}"
                found[run_id] = self.runs.get(run_id) or Run(run_id, path)
        self.runs = found
        self.problems = problems
        return list(found.values())

    def run(self, run_id: str | None) -> Run:
        if not run_id:
            raise ApiError(400, "missing the run id (?id=...)")
        if run_id not in self.runs:
            self.scan()
        if run_id not in self.runs:
            raise ApiError(404, f"no run {run_id!r} here (it may have been moved or deleted); back to the runs list")
        return self.runs[run_id]

    async def run_row(self, run: Run) -> dict[str, Any]:
        """A line of the runs list: from `metadata.json`, or from the index when the run is open or has none."""
        metadata, problem = run.metadata()
        row: dict[str, Any] = {"id": run.id, "path": str(run.path), "name": run.path.name, "problem": problem}
        meta = metadata or {}
        row.update(
            env=meta.get("env_id") or meta.get("name"),
            model=meta.get("model"),
            date=meta.get("date"),
            kind="eval" if run.has_results() else "train",
        )
        planned = planned_rollouts(metadata)
        if run.has_results():
            cut_short = False
            if run.index is not None or metadata is None:
                index = await run.refreshed_index(float(meta.get("pass_threshold", 0.5)))
                summary = index.summary()
                cut_short = index.state.partial_bytes > 0
            else:
                summary = meta
            done = summary.get("num_rollouts")
            row.update(
                rollouts=done,
                planned=planned,
                avg_reward=summary.get("avg_reward"),
                pass_at_k=summary.get("pass_at_k") or {},
                errors=summary.get("num_errors"),
                status=status_of(run.path, done, planned, cut_short),
            )
        if run.has_training():
            steps, _ = await asyncio.to_thread(read_train_metrics, run.path / TRAIN_METRICS_FILE)
            try:
                train_summary = read_json_object(run.path / TRAIN_SUMMARY_FILE)
            except RunFolderError as exc:
                train_summary, row["problem"] = None, str(exc)
            row.update(
                kind="train" if not run.has_results() else "eval+train",
                steps=len(steps),
                avg_reward=row.get("avg_reward", steps[-1].get("reward") if steps else None),
                eval_before=(train_summary or {}).get("eval_before"),
                eval_after=(train_summary or {}).get("eval_after"),
                status="done" if train_summary is not None else status_of(run.path, None, None if steps else 1),
            )
            if row["date"] is None:
                mtime = file_mtime(run.path / TRAIN_METRICS_FILE) or file_mtime(run.path / TRAIN_SUMMARY_FILE)
                row["date"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(mtime)) if mtime else None
        return row

    async def runs_list(self, request: web.Request) -> web.Response:
        runs = await asyncio.to_thread(self.scan)
        rows = [await self.run_row(run) for run in runs]
        return json_response({"runs": rows, "problems": self.problems})

    async def run_detail(self, request: web.Request) -> web.Response:
        run = self.run(request.query.get("id"))
        metadata, problem = run.metadata()
        detail: dict[str, Any] = {
            "id": run.id,
            "path": str(run.path),
            "name": run.path.name,
            "metadata": metadata,
            "metadata_problem": problem,
        }
        if run.has_results():
            index = await run.refreshed_index(float((metadata or {}).get("pass_threshold", 0.5)))
            summary = index.summary()
            detail["results"] = {
                "count": len(index.rows),
                "planned": planned_rollouts(metadata),
                "status": status_of(run.path, len(index.rows), planned_rollouts(metadata), index.state.partial_bytes > 0),
                "bad_lines": index.state.bad_lines[:MAX_ERROR_POSITIONS],
                "bad_line_count": len(index.state.bad_lines),
                "partial_bytes": index.state.partial_bytes,
                "indexing": index.state.pending,
                "indexed_bytes": index.state.read_to,
                "size_bytes": index.state.size,
                "missing": not (run.path / "results.jsonl").is_file(),
                "summary": summary,
                "histograms": run.histograms(index),
                "errors": error_groups(index),
                "reward_weights": reward_weights(metadata),
            }
            detail["same_env"] = [
                other.id
                for other in self.runs.values()
                if other is not run and other.has_results() and env_of(other) == env_of(run) and env_of(run) is not None
            ]
        if run.has_training():
            steps, bad = await asyncio.to_thread(read_train_metrics, run.path / TRAIN_METRICS_FILE)
            try:
                train_summary, train_problem = read_json_object(run.path / TRAIN_SUMMARY_FILE), None
            except RunFolderError as exc:
                train_summary, train_problem = None, str(exc)
            checkpoints = run.path / "checkpoints"
            detail["training"] = {
                "steps": steps,
                "bad_lines": bad,
                "summary": train_summary,
                "problem": train_problem,
                "checkpoints": sorted(p.name for p in checkpoints.iterdir() if p.is_dir()) if checkpoints.is_dir() else [],
                "plot": (run.path / "plot.png").is_file(),
            }
        return json_response(detail)

    async def rollouts(self, request: web.Request) -> web.Response:
        run = self.run(request.query.get("id"))
        query = request.query
        offset = int_param(query, "offset", 0, 0, None)
        limit = int_param(query, "limit", 50, 1, MAX_PAGE)
        sort = query.get("sort", "position")
        descending = sort.startswith("-")
        if sort.lstrip("-") not in SORTS:
            raise ApiError(400, f"sort={sort!r}: one of {', '.join(sorted(SORTS))} (a leading - sorts descending)")
        metadata, _ = run.metadata()
        index = await run.refreshed_index(float((metadata or {}).get("pass_threshold", 0.5)))
        rows = index.rows
        text = query.get("q", "").strip()
        if text:
            matches = await asyncio.to_thread(index.search, text)
            rows = [row for row in rows if row["n"] in matches]
        rows = filter_rows(rows, query.get("error", ""), query.get("stop", ""), query.get("example", ""))
        key = sort.lstrip("-")
        if key != "position" or descending:
            rows = sorted(rows, key=sort_key(key), reverse=descending)
        page = [{k: v for k, v in row.items() if k not in ("timing", "usage")} for row in rows[offset : offset + limit]]
        return json_response(
            {"total": len(rows), "count": len(index.rows), "indexing": index.state.pending, "offset": offset, "rows": page}
        )

    async def rollout(self, request: web.Request) -> web.Response:
        run = self.run(request.query.get("id"))
        position = int_param(request.query, "n", None, 0, None)
        metadata, _ = run.metadata()
        index = await run.refreshed_index(float((metadata or {}).get("pass_threshold", 0.5)))
        try:
            output = await asyncio.to_thread(index.read, position)
        except IndexError:
            raise ApiError(
                404, f"run {run.id!r} has {len(index.rows)} readable rollout(s); there is no number {position}"
            ) from None
        except RunFolderError as exc:
            raise ApiError(409, str(exc)) from None
        return json_response(
            {
                "id": run.id,
                "name": run.path.name,
                "n": position,
                "count": len(index.rows),
                "output": output,
                "reward_weights": reward_weights(metadata),
            }
        )

    async def compare(self, request: web.Request) -> web.Response:
        first, second = self.run(request.query.get("a")), self.run(request.query.get("b"))
        if first is second:
            raise ApiError(400, "pick two different runs to compare")
        sides = []
        for run in (first, second):
            if not run.has_results():
                raise ApiError(400, f"run {run.id!r} has no rollouts (results.jsonl) to compare")
            metadata, _ = run.metadata()
            index = await run.refreshed_index(float((metadata or {}).get("pass_threshold", 0.5)))
            sides.append((run, metadata or {}, per_example(index)))
        (run_a, meta_a, by_a), (run_b, meta_b, by_b) = sides
        examples = []
        for key in sorted(set(by_a) | set(by_b), key=example_sort_key):
            a, b = by_a.get(key), by_b.get(key)
            mean_a = a["total"].mean(a["count"]) if a else None
            mean_b = b["total"].mean(b["count"]) if b else None
            examples.append(
                {
                    "example_id": json.loads(key),
                    "a_mean": mean_a,
                    "b_mean": mean_b,
                    "a_count": a["count"] if a else 0,
                    "b_count": b["count"] if b else 0,
                    "a_first": a["first"] if a else None,
                    "b_first": b["first"] if b else None,
                    "delta": None if mean_a is None or mean_b is None else mean_b - mean_a,
                    "prompt": (a or b or {}).get("prompt", ""),
                }
            )
        return json_response(
            {
                "a": {"id": run_a.id, "name": run_a.path.name, "env": meta_a.get("env_id"), "model": meta_a.get("model")},
                "b": {"id": run_b.id, "name": run_b.path.name, "env": meta_b.get("env_id"), "model": meta_b.get("model")},
                "same_env": env_of(run_a) == env_of(run_b),
                "examples": examples,
            }
        )

    async def plot(self, request: web.Request) -> web.StreamResponse:
        run = self.run(request.query.get("id"))
        try:
            with open_run_file(run.path / "plot.png") as file:
                body = await asyncio.to_thread(file.read, MAX_PLOT_BYTES + 1)
        except (FileNotFoundError, RunFolderError):
            raise ApiError(404, f"run {run.id!r} has no plot.png (a regular file in the run folder)") from None
        if len(body) > MAX_PLOT_BYTES:
            raise ApiError(413, f"run {run.id!r}: plot.png is larger than {MAX_PLOT_BYTES} bytes")
        return web.Response(body=body, content_type="image/png")


def env_of(run: Run) -> str | None:
    metadata, _ = run.metadata()
    if not metadata:
        return None
    env = metadata.get("env_id") or metadata.get("name")
    return str(env) if env is not None else None


def int_param(query: Any, name: str, default: int | None, low: int, high: int | None) -> int:
    raw = query.get(name)
    if raw is None:
        if default is None:
            raise ApiError(400, f"missing {name}=...")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"{name}={raw!r}: expected a whole number") from None
    if value < low or (high is not None and value > high):
        bound = f"{low} to {high}" if high is not None else f"{low} or more"
        raise ApiError(400, f"{name}={value}: expected {bound}")
    return value


def filter_rows(rows: list[dict[str, Any]], error: str, stop: str, example: str) -> list[dict[str, Any]]:
    """`error`: ``any``, ``none`` or a type; `stop`: a stop condition; `example`: an example id (JSON or text)."""
    if error == "any":
        rows = [row for row in rows if row["error"]]
    elif error == "none":
        rows = [row for row in rows if not row["error"]]
    elif error:
        rows = [row for row in rows if row["error"] == error]
    if stop:
        rows = [row for row in rows if row["stop"] == stop]
    if example:
        rows = [row for row in rows if str(row["example_id"]) == example or json.dumps(row["example_id"]) == example]
    return rows


def sort_key(name: str) -> Callable[[dict[str, Any]], Any]:
    field = {"example": "example_id", "tokens": "output_tokens"}.get(name, name)
    if field == "example_id":
        return lambda row: (example_sort_key(json.dumps(row["example_id"])), row["rollout_index"] or 0)
    return lambda row: (row[field] is None, row[field] if row[field] is not None else 0)


def example_sort_key(key: str) -> tuple[int, Any]:
    value = json.loads(key)
    return (0, value) if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, str(value))


def per_example(index: RolloutIndex) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for row in index.rows:
        entry = found.setdefault(
            json.dumps(row["example_id"]), {"total": ExactSum(), "count": 0, "first": row["n"], "prompt": row["prompt"]}
        )
        entry["total"].add(row["reward"] or 0.0)
        entry["count"] += 1
    return found


def error_groups(index: RolloutIndex) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for row in index.rows:
        if row["error"]:
            group = groups.setdefault(
                row["error"], {"type": row["error"], "count": 0, "message": row["error_message"], "positions": []}
            )
            group["count"] += 1
            if len(group["positions"]) < MAX_ERROR_POSITIONS:
                group["positions"].append(row["n"])
    return sorted(groups.values(), key=lambda group: -group["count"])


def reward_weights(metadata: dict[str, Any] | None) -> dict[str, float]:
    """Reward function name -> weight, from the environment's config saved in `metadata.json`."""
    taskset = ((metadata or {}).get("env_args") or {}).get("taskset") or {}
    weights = {}
    for reward in taskset.get("rewards") or []:
        if isinstance(reward, dict) and isinstance(reward.get("fn"), str):
            weights[reward["fn"].rpartition(":")[2].rpartition(".")[2]] = reward.get("weight", 1.0)
    return weights


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return json_response({"error": exc.message}, status=exc.status)
    except web.HTTPException as exc:
        if request.path.startswith("/api/"):
            return json_response({"error": f"{exc.status} {exc.reason}: {request.path}"}, status=exc.status)
        raise
    except Exception as exc:
        logger.exception("v1 view: %s failed", request.path_qs)
        return json_response({"error": f"internal error: {type(exc).__name__}: {exc}"}, status=500)


LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def host_check(allowed: frozenset[str]) -> Any:
    """Refuse requests whose `Host` is not one of `allowed`: a web page elsewhere cannot read the runs by DNS rebinding."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        name = (request.host or "").rsplit(":", 1)[0] if not (request.host or "").endswith("]") else request.host
        if name not in allowed:
            return json_response({"error": f"Host {request.host!r} refused: open the viewer at the address it printed"}, 403)
        return await handler(request)

    return check


VIEWER_KEY: web.AppKey[Viewer] = web.AppKey("viewer", Viewer)
"""Where the app keeps its `Viewer` (a typed key: aiohttp warns on a string one)."""


def build_app(roots: list[Path], loopback_only: bool = True) -> web.Application:
    """The viewer's aiohttp application over the run folders at or under `roots`.

    Args:
        roots: folders that are runs or hold runs below them.
        loopback_only: answer only requests addressed to a loopback name (`Host` header).
    """
    viewer = Viewer(roots)
    middlewares = [host_check(LOOPBACK_NAMES)] if loopback_only else []
    app = web.Application(middlewares=[*middlewares, errors_as_json])

    async def page(request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    app.router.add_get("/", page)
    app.router.add_get("/api/runs", viewer.runs_list)
    app.router.add_get("/api/run", viewer.run_detail)
    app.router.add_get("/api/rollouts", viewer.rollouts)
    app.router.add_get("/api/rollout", viewer.rollout)
    app.router.add_get("/api/compare", viewer.compare)
    app.router.add_get("/api/plot", viewer.plot)
    app.router.add_static("/static/", STATIC)
    app[VIEWER_KEY] = viewer
    return app


async def serve(roots: list[Path], host: str, port: int, on_ready: Callable[[str], None]) -> None:
    """Serve until cancelled; `on_ready` gets the page's URL once the socket listens.

    Raises:
        OSError: the address cannot be bound.
    """
    runner = web.AppRunner(build_app(roots, loopback_only=host in LOOPBACK_NAMES), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        shown = f"[{host}]" if ":" in host else host
        on_ready(f"http://{shown}:{bound}/")
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


__all__ = ["ApiError", "Run", "Viewer", "build_app", "serve"]
