"""The viewer serves only regular files inside a run folder: a symlink out (plot, results, metadata) is refused."""

from __future__ import annotations

import json
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from v1.view import build_app

SECRET = "HOST-SECRET-LINE"


async def test_symlinks_out_of_a_run_folder_are_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(json.dumps({"prompt": SECRET, "example_id": 0}) + "\n")
    run = tmp_path / "runs" / "linked"
    run.mkdir(parents=True)
    (run / "metadata.json").symlink_to(secret)
    (run / "results.jsonl").symlink_to(secret)
    (run / "plot.png").symlink_to(secret)
    good = tmp_path / "runs" / "good"
    good.mkdir()
    (good / "metadata.json").write_text(json.dumps({"env_id": "good"}))
    (good / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    async with TestClient(TestServer(build_app([tmp_path / "runs"]))) as client:
        listing = await client.get("/api/runs")
        runs = {row["path"].rsplit("/", 1)[-1]: row for row in (await listing.json())["runs"]}
        answers = [await client.get("/api/plot", params={"id": runs["linked"]["id"]})]
        answers.append(await client.get("/api/run", params={"id": runs["linked"]["id"]}))
        answers.append(await client.get("/api/rollouts", params={"id": runs["linked"]["id"]}))
        bodies = [await answer.text() for answer in answers]
        plot = await client.get("/api/plot", params={"id": runs["good"]["id"]})
        assert plot.status == 200 and (await plot.read()).endswith(b"fake")
    assert answers[0].status == 404
    assert all(answer.status < 500 for answer in answers), bodies
    assert not any(SECRET in body for body in [*bodies, json.dumps(runs)])
