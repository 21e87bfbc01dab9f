"""`v1 view` shows each role of an episode: a run of a policy with a judge, written by `Env.evaluate`, served by
`v1 view` as a subprocess and opened in headless Chromium."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

import v1 as vf
from tests.tools.patience import HANG_S
from v1.env import ResultsWriter
from v1.testing import MockModelServer, MockRequest, Reply

HOSTILE = '<img src="x" onerror="window.__pwned = 1">'


def answer_or_verdict(request: MockRequest) -> Reply:
    if "You are judging" in request.last_user_text:
        return Reply.text('Looks right. {"correct": 1} ' + HOSTILE)
    return Reply.text("Paris")


@pytest.fixture
def view_url(tmp_path: Path) -> Iterator[str]:
    roles = {"policy": vf.Harness(max_turns=1), "judge": vf.Harness(max_turns=1)}
    env = vf.Env(
        vf.Taskset(source=[{"prompt": "Capital of France?"}]),
        vf.EpisodeHarness(roles, vf.JudgeControl(criteria={"correct": "right"})),
    )
    run = tmp_path / "runs" / "judged"
    with MockModelServer(answer_or_verdict) as mock:
        asyncio.run(env.evaluate(vf.ClientConfig(api_base_url=mock.url, max_retries=0), "m", results=ResultsWriter(run)))
    process = subprocess.Popen(
        [sys.executable, "-m", "v1.cli", "view", str(tmp_path / "runs"), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        url = first.split(" at ", 1)[1].split(" ", 1)[0].rstrip("/")
        yield url + "/#/rollout?id=" + urllib.parse.quote("0/judged") + "&n=0"
    finally:
        process.terminate()
        process.wait(timeout=HANG_S)


def test_the_rollout_page_shows_each_roles_conversation_apart(view_url: str) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "the browser tests need Debian's chromium package (apt-get install chromium)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            tab = browser.new_page()
            tab.goto(view_url)
            tab.locator("#conversation").wait_for(timeout=HANG_S * 1000)  # the page is drawn in one go
            assert tab.locator("#roles").count() == 1
            assert tab.locator("#roles details.role").evaluate_all("nodes => nodes.map(n => n.dataset.role)") == [
                "policy",
                "judge",
            ]
            policy, judge = tab.locator("#roles details[data-role=policy]"), tab.locator("#roles details[data-role=judge]")
            assert "1 model call · trained" in policy.locator("summary").inner_text()
            assert "1 model call · not trained" in judge.locator("summary").inner_text()
            tab.locator("#roles summary").first.click()
            tab.locator("#roles summary").last.click()
            assert "Paris" in policy.inner_text() and "You are judging" not in policy.inner_text()
            assert "You are judging" in judge.inner_text() and HOSTILE in judge.inner_text()
            assert tab.locator("#roles img").count() == 0 and tab.evaluate("window.__pwned") is None
        finally:
            browser.close()
