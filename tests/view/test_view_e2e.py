"""End to end: runs made by the real `v1 eval` against the mock model server, served by `v1 view` as a
subprocess, read over its JSON API and opened in a headless Chromium (Debian's `chromium`, driven by Playwright).

The browser tests save the screenshots docs/viewer.md shows (docs/images/viewer-*.png) when run with
`V1_UPDATE_SCREENSHOTS=1`; otherwise they go to a temp folder, so a test run leaves the tree clean.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, MockRequest, Reply

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "wiki_search.toml")
IMAGES = ROOT / "docs" / "images"
SHOTS = Path(tempfile.gettempdir()) / f"v1-viewer-shots-{os.getpid()}"
HOSTILE = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">'
ANSWER = "It flows into the Caspian Sea. " + HOSTILE
TRAINING_STEPS = 12


class Policy:
    """Search once, then answer (with the hostile markup); as the judge, say "yes" for prompts of length `parity` mod 2."""

    def __init__(self) -> None:
        self.parity = 0

    def __call__(self, request: MockRequest) -> Reply:
        text = request.last_user_text
        if "decide whether the response is correct" in text:
            return Reply.text("yes" if len(text) % 2 == self.parity else "no")
        if request.last_message.get("role") == "tool":
            logprobs = [-((7 * i) % 5) * 0.6 for i in range(len(ANSWER.split()))]
            return Reply.text(
                ANSWER, reasoning_content="The search result names the Volga; it ends in the Caspian.", logprobs=logprobs
            )
        return Reply.tool(
            "search", {"query": "longest river in Europe"}, reasoning_content="I should search the encyclopedia first."
        )


def run_eval(server: MockModelServer, output_dir: Path) -> Path:
    args = [
        CONFIG,
        "-b",
        server.url,
        "-m",
        "mock",
        "-n",
        "4",
        "-r",
        "2",
        "-s",
        '{"logprobs": true, "return_token_ids": true}',
        "--output-dir",
        str(output_dir),
    ]
    before = set(output_dir.iterdir()) if output_dir.exists() else set()
    done = subprocess.run([sys.executable, "-m", "v1.cli", "eval", *args], capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr
    (run,) = set(output_dir.iterdir()) - before
    return run


@dataclass
class Site:
    url: str
    runs: Path
    a: Path
    b: Path
    not_a_run: Path
    process: subprocess.Popen[str]
    ids: dict[str, str] = field(default_factory=dict)

    def get(self, path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=HANG_S) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("view")
    runs = base / "runs"
    policy = Policy()
    with MockModelServer(policy, model="mock") as server:
        a = run_eval(server, runs / "evals")
        policy.parity = 1
        b = run_eval(server, runs / "evals")
    # A run cut short: malformed metadata.json and a half-written last line.
    broken = runs / "broken"
    broken.mkdir()
    lines = (a / "results.jsonl").read_text().splitlines(keepends=True)
    (broken / "results.jsonl").write_text("".join(lines[:3]) + "{not json}\n" + lines[3][: len(lines[3]) // 2])
    (broken / "metadata.json").write_text('{"env_id": "wiki_search", "model": ')
    for name in ("results.jsonl", "metadata.json"):
        os.utime(broken / name, (time.time() - 3600, time.time() - 3600))  # not being written: cut short
    # A training run's outputs, in the shape `v1 train` writes them (docs/training.md).
    train = runs / "train" / "tiny"
    train.mkdir(parents=True)
    with (train / "metrics.jsonl").open("w") as metrics:
        for step in range(1, TRAINING_STEPS + 1):
            metrics.write(
                json.dumps(
                    {
                        "step": step,
                        "reward": step / TRAINING_STEPS,
                        "loss": 1.0 / step,
                        "kl": 0.001 * step,
                        "entropy": 3.0 - 0.1 * step,
                    }
                )
                + "\n"
            )
    (train / "summary.json").write_text(json.dumps({"eval_before": 0.1, "eval_after": 0.9, "steps": TRAINING_STEPS}))
    not_a_run = base / "notes"
    not_a_run.mkdir()
    (not_a_run / "readme.txt").write_text("not a run")
    process = subprocess.Popen(
        [sys.executable, "-m", "v1.cli", "view", str(runs), str(not_a_run), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("v1 view: 2 folder(s) at http://127.0.0.1:"), (first, process.stderr and process.stderr.read())
        url = first.split(" at ", 1)[1].split(" ", 1)[0].rstrip("/")
        yield Site(url, runs, a, b, not_a_run, process)
    finally:
        process.terminate()
        process.wait(timeout=HANG_S)


def run_id(site: Site, path: Path) -> str:
    return "0/" + path.relative_to(site.runs).as_posix()


# ---------- the JSON API ----------


def test_runs_list_has_every_run_and_names_the_folder_that_is_not_one(site: Site) -> None:
    status, data = site.get("/api/runs")
    assert status == 200
    rows = {row["id"]: row for row in data["runs"]}
    assert set(rows) == {run_id(site, site.a), run_id(site, site.b), "0/broken", "0/train/tiny"}
    a = rows[run_id(site, site.a)]
    assert (a["env"], a["model"], a["rollouts"], a["planned"], a["status"], a["kind"]) == (
        "wiki_search",
        "mock",
        8,
        8,
        "done",
        "eval",
    )
    assert set(a["pass_at_k"]) == {"1", "2"}
    assert "metadata.json: not valid JSON" in rows["0/broken"]["problem"]
    assert rows["0/broken"]["rollouts"] == 3  # read from results.jsonl, without the half-written line
    assert rows["0/broken"]["status"] == "incomplete"
    assert rows["0/train/tiny"]["kind"] == "train" and rows["0/train/tiny"]["steps"] == TRAINING_STEPS
    (problem,) = data["problems"]
    assert problem["message"].startswith(f"{site.not_a_run}: not a run folder")


def test_run_detail_summarises_the_run_as_metadata_does(site: Site) -> None:
    status, detail = site.get("/api/run?id=" + urllib.parse.quote(run_id(site, site.a)))
    assert status == 200
    metadata = json.loads((site.a / "metadata.json").read_text())
    summary = detail["results"]["summary"]
    for name in ("avg_reward", "pass_at_k", "num_rollouts", "stop_conditions", "avg_metrics"):
        assert summary[name] == metadata[name], name
    assert sum(detail["results"]["histograms"]["reward"]["counts"]) == 8
    assert detail["same_env"] == [run_id(site, site.b)]
    assert detail["results"]["reward_weights"] == {"judge": 1.0}


def test_a_broken_run_is_explained_not_fatal(site: Site) -> None:
    status, detail = site.get("/api/run?id=0/broken")
    assert status == 200
    assert detail["metadata"] is None and detail["metadata_problem"].startswith("metadata.json: not valid JSON")
    results = detail["results"]
    assert results["count"] == 3 and results["bad_line_count"] == 1 and results["bad_lines"] == [4]
    assert results["partial_bytes"] > 0


def test_paging_filter_search_and_sort_happen_on_the_server(site: Site) -> None:
    run = urllib.parse.quote(run_id(site, site.b))
    status, page = site.get(f"/api/rollouts?id={run}&limit=3&offset=2")
    assert status == 200 and page["total"] == 8 and [row["n"] for row in page["rows"]] == [2, 3, 4]
    _, by_reward = site.get(f"/api/rollouts?id={run}&sort=-reward&limit=100")
    rewards = [row["reward"] for row in by_reward["rows"]]
    assert rewards == sorted(rewards, reverse=True) and 0.0 in rewards and 1.0 in rewards
    _, found = site.get(f"/api/rollouts?id={run}&q=" + urllib.parse.quote("CASPIAN sea"))
    assert found["total"] == 8
    _, none = site.get(f"/api/rollouts?id={run}&q=no-such-words-anywhere")
    assert none["total"] == 0 and none["count"] == 8
    _, errors = site.get(f"/api/rollouts?id={run}&error=any")
    assert errors["total"] == 0


def test_bad_requests_get_a_json_error(site: Site) -> None:
    assert site.get("/api/run?id=9/nope") == (
        404,
        {"error": "no run '9/nope' here (it may have been moved or deleted); back to the runs list"},
    )
    assert site.get("/api/run")[0] == 400
    run = urllib.parse.quote(run_id(site, site.a))
    status, body = site.get(f"/api/rollouts?id={run}&limit=many")
    assert (status, body) == (400, {"error": "limit='many': expected a whole number"})
    assert site.get(f"/api/rollouts?id={run}&sort=magic")[0] == 400
    status, body = site.get(f"/api/rollout?id={run}&n=99")
    assert status == 404 and "8 readable rollout(s)" in body["error"]
    assert site.get("/api/nothing")[0] == 404
    rebound = urllib.request.Request(site.url + "/api/runs", headers={"Host": "attacker.example:80"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(rebound, timeout=HANG_S)
    assert refused.value.code == 403 and "refused" in json.loads(refused.value.read())["error"]


def test_a_run_being_written_shows_its_new_lines(site: Site) -> None:
    live = site.runs / "live"
    live.mkdir()
    lines = (site.a / "results.jsonl").read_text().splitlines(keepends=True)
    (live / "results.jsonl").write_text(lines[0] + lines[1][:40])
    site.get("/api/runs")
    _, first = site.get("/api/run?id=0/live")
    assert first["results"]["count"] == 1 and first["results"]["partial_bytes"] == 40
    with (live / "results.jsonl").open("a") as results:
        results.write(lines[1][40:] + "".join(lines[2:5]))
    _, then = site.get("/api/run?id=0/live")
    assert then["results"]["count"] == 5 and then["results"]["partial_bytes"] == 0
    assert then["results"]["status"] == "running"
    _, rollout = site.get("/api/rollout?id=0/live&n=4")
    assert rollout["output"] == json.loads(lines[4])
    shutil.rmtree(live)


# ---------- in the browser ----------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "the browser tests need Debian's chromium package (apt-get install chromium), as .ci/run installs it"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[tuple[Page, list[str]]]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(str(error)))
    yield page, problems
    context.close()


def shoot(page: Page, name: str, *, full_page: bool = False) -> None:
    """Save a screenshot: into docs/images when `V1_UPDATE_SCREENSHOTS=1` (how docs/viewer.md's are made), else a temp folder."""
    folder = IMAGES if os.environ.get("V1_UPDATE_SCREENSHOTS") == "1" else SHOTS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"viewer-{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"


def test_click_from_the_runs_list_into_a_rollout_with_tool_calls(site: Site, page: tuple[Page, list[str]]) -> None:
    tab, problems = page
    tab.goto(site.url + "/")
    table = tab.locator("#runs")
    table.wait_for()
    assert table.locator("tbody tr").count() == 4
    assert "not a run folder" in tab.locator("main").inner_text()
    tab.locator("#runs tbody tr").filter(has_text="broken").wait_for()
    shoot(tab, "runs")

    tab.locator(f"#runs a:text-is('{site.a.name}')").click()
    tab.locator("#rollout-table").wait_for()
    text = tab.locator("main").inner_text()
    assert "Distributions" in text and "stop conditions" in text and "no_tools_called" in text
    assert tab.locator("#rollout-table tbody tr").count() == 8
    shoot(tab, "run")

    rows = tab.locator("#rollout-table tbody tr")  # in the order they were saved, which groups finishing first decide
    examples = [rows.nth(i).locator("td").nth(1).inner_text().strip() for i in range(rows.count())]
    rows.nth(examples.index("0")).click()  # example 0 asks "Which sea does the longest river in Europe flow into?"
    tab.locator("#conversation").wait_for()
    conversation = tab.locator("#conversation")
    roles = conversation.locator(".msg > .role").all_inner_texts()
    assert [role.lower() for role in roles] == ["system", "user", "assistant", "tool result: search", "assistant"]
    call = conversation.locator(".toolcall").first
    assert "search" in call.locator(".name").inner_text()
    assert json.loads(call.locator("pre").inner_text()) == {"query": "longest river in Europe"}
    assert "Which" in conversation.locator(".msg.user").inner_text()
    reasoning = conversation.locator("details.reasoning").first
    assert not reasoning.evaluate("node => node.open")  # folded
    assert tab.locator("#steps tbody tr").count() == 2
    assert tab.locator("#reward").inner_text().count("judge") == 1
    tokens = tab.locator("#tokens .tok")
    assert tokens.count() > 0 and "logprob" in (tokens.first.get_attribute("title") or "")
    shoot(tab, "rollout", full_page=True)
    assert problems == []


def test_model_text_renders_as_text_never_as_markup(site: Site, page: tuple[Page, list[str]]) -> None:
    tab, problems = page
    tab.goto(site.url + "/#/rollout?id=" + urllib.parse.quote(run_id(site, site.a)) + "&n=0")
    tab.locator("#conversation").wait_for()
    answer = tab.locator("#conversation .msg.assistant").last.inner_text()
    assert HOSTILE in answer
    assert tab.locator("#conversation script, #conversation img").count() == 0
    assert tab.evaluate("window.__pwned") is None
    assert problems == []


def test_compare_two_runs_of_the_env_per_example(site: Site, page: tuple[Page, list[str]]) -> None:
    tab, problems = page
    a, b = urllib.parse.quote(run_id(site, site.a)), urllib.parse.quote(run_id(site, site.b))
    tab.goto(f"{site.url}/#/run?id={a}")
    tab.locator("select[aria-label='compare with']").select_option(run_id(site, site.b))
    tab.locator("#compare").wait_for()
    assert f"compare?a={a}&b={b}" in tab.url or "compare?" in tab.url
    text = tab.locator("main").inner_text()
    assert "better in B" in text and "worse in B" in text and "null" not in text
    deltas = tab.locator("#compare tbody tr td:last-child").all_inner_texts()
    assert deltas and all(delta.startswith(("+", "-")) for delta in deltas)
    shoot(tab, "compare")
    assert problems == []


def test_training_curves_and_the_broken_run_message(site: Site, page: tuple[Page, list[str]]) -> None:
    tab, problems = page
    tab.goto(site.url + "/#/run?id=0/train/tiny")
    curves = tab.locator("#training-curves")
    curves.wait_for()
    titles = curves.locator("h3").all_inner_texts()
    assert titles[:4] == ["reward per step", "loss per step", "KL per step", "entropy per step"]
    assert curves.locator("polyline").count() == 4
    shoot(tab, "training")

    tab.goto(site.url + "/#/run?id=0/broken")
    tab.locator("#rollout-table").wait_for()
    messages = tab.locator(".message").all_inner_texts()
    assert any(m.startswith("metadata.json: not valid JSON") for m in messages)
    assert any("1 line(s) are not JSON objects" in m for m in messages)
    assert any("the last line is incomplete" in m and "the run was cut short" in m for m in messages)
    assert "Traceback" not in tab.locator("main").inner_text()
    shoot(tab, "broken")
    assert problems == []


def test_an_unknown_run_is_a_message_in_the_page(site: Site, page: tuple[Page, list[str]]) -> None:
    tab, problems = page
    tab.goto(site.url + "/#/run?id=7/gone")
    message = tab.locator(".message.error")
    message.wait_for()
    assert message.inner_text().startswith("no run '7/gone' here")
    assert all("404" in problem for problem in problems)  # the browser logs the API's 404 itself
