"""Round 4: a run folder's files are opened as themselves; a link in a file's place never reaches a host file.

A crafted folder handed to `v1 eval --resume` plants links where v1 writes: the temporaries that
replace `metadata.json` and `results.jsonl` (`*.tmp`), and `results.jsonl` itself pointing at a file
that does not exist yet. Before, v1 (as root in CI) overwrote the links' targets with the run's
metadata and results, and created the missing one. Now the temporaries are made anew (the link
removed, its target untouched) and a linked `results.jsonl` or `metadata.json` is one line, exit 2.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.test_e2e_eval_failures import CONFIG, error_lines, only_run, saved_lines, v1_cli
from v1.testing import MockModelServer, reverser

PRECIOUS = "the user's file, not v1's\n"


def _first_run(tmp_path: Path, server: MockModelServer) -> tuple[tuple[str, ...], Path]:
    command = ("eval", CONFIG, "-b", server.url, "-m", "m", "-n", "2", "-r", "1", "--output-dir", str(tmp_path / "out"))
    first = v1_cli(*command, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    return command, only_run(tmp_path / "out")


def test_links_planted_at_the_temporaries_never_overwrite_their_targets(tmp_path: Path) -> None:
    victims = {name: tmp_path / f"victim-{name}" for name in ("metadata.json.tmp", "results.jsonl.tmp")}
    with MockModelServer(reverser, model="m") as server:
        command, run = _first_run(tmp_path, server)
        for name, victim in victims.items():
            victim.write_text(PRECIOUS)
            os.symlink(victim, run / name)
        resumed = v1_cli(*command, "--resume", str(run), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert {name: victim.read_text() for name, victim in victims.items()} == dict.fromkeys(victims, PRECIOUS)
    assert not (run / "metadata.json").is_symlink() and not (run / "results.jsonl").is_symlink()
    assert len(saved_lines(run)) == 2


def test_a_linked_results_or_metadata_file_is_one_line_and_nothing_is_written_through_it(tmp_path: Path) -> None:
    with MockModelServer(reverser, model="m") as server:
        command, run = _first_run(tmp_path, server)
        asked = len(server.requests)
        metadata = (run / "metadata.json").read_text()
        not_yet = tmp_path / "created-through-the-link"
        (run / "results.jsonl").unlink()
        os.symlink(not_yet, run / "results.jsonl")  # dangling: appending would create it
        resumed = v1_cli(*command, "--resume", str(run), cwd=tmp_path)
        assert resumed.returncode == 2, resumed.stderr
        (line,) = error_lines(resumed.stderr)
        assert "results.jsonl: " in line and "a run folder's files must be regular files, not links" in line, line
        assert not not_yet.exists()

        (run / "results.jsonl").unlink()
        victim = tmp_path / "victim-metadata"
        victim.write_text(metadata)  # a JSON object, so only its being a link can refuse it
        (run / "metadata.json").unlink()
        os.symlink(victim, run / "metadata.json")
        resumed = v1_cli(*command, "--resume", str(run), cwd=tmp_path)
        assert resumed.returncode == 2, resumed.stderr
        (line,) = error_lines(resumed.stderr)
        assert "metadata.json: " in line and "not links" in line, line
        assert victim.read_text() == metadata
        assert not (run / "results.jsonl").exists()
        assert len(server.requests) == asked  # refused before any rollout
