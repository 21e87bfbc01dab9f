"""`v1 view` on the command line: what it refuses, as one line and exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools.patience import HANG_S
from v1.cli import main


def test_a_missing_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "v1.cli", "view", "no-such-run"], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S
    )
    assert (done.returncode, done.stdout, done.stderr) == (2, "", "v1 view: error: no-such-run: no such folder\n")


def test_no_folder_given_and_no_outputs_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["view"]) == 2
    assert capsys.readouterr().err == (
        "v1 view: error: outputs: no such folder (no DIR given: pass the folder of a run, or one that holds runs)\n"
    )


def test_a_file_or_a_bad_port_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results.jsonl").write_text("")
    assert main(["view", "results.jsonl"]) == 2
    assert capsys.readouterr().err.startswith("v1 view: error: results.jsonl: not a folder;")
    assert main(["view", ".", "--port", "70000"]) == 2
    assert capsys.readouterr().err == "v1 view: error: --port 70000: expected 0 to 65535\n"
    with pytest.raises(SystemExit) as exit_status:
        main(["view", ".", "--port", "eighty"])
    assert exit_status.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid int value: 'eighty'" in err


def test_building_the_viewer_app_warns_nothing(tmp_path: Path) -> None:
    """aiohttp warns (NotAppKeyWarning) on a string app key: v1's own code raises no warning in the test run."""
    import warnings

    from v1.view import build_app

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_app([tmp_path])
