"""`v1 init NAME` as a real process: the scaffolded package's own test passes, `v1 eval ./NAME` runs it, bad input is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools.patience import HANG_S
from v1.cli import main
from v1.testing import MockModelServer, MockRequest, Reply

V1 = [sys.executable, "-P", "-m", "v1.cli"]  # -P: like the installed `v1` script, the current directory is not on sys.path


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=HANG_S)


def test_init_scaffolds_a_package_whose_test_passes_and_that_v1_eval_runs(tmp_path: Path) -> None:
    assert main(["init", "my_env", "--dir", str(tmp_path)]) == 0
    assert sorted(p.name for p in (tmp_path / "my_env").iterdir()) == [
        "README.md",
        "__init__.py",
        "my_env.toml",
        "test_my_env.py",
    ]
    assert "class MyEnvConfig(vf.TasksetConfig)" in (tmp_path / "my_env" / "__init__.py").read_text()

    tested = run([sys.executable, "-m", "pytest", "my_env", "-q", "-p", "no:cacheprovider"], tmp_path)
    assert tested.returncode == 0 and "2 passed" in tested.stdout, tested.stdout + tested.stderr

    def adder(request: MockRequest) -> Reply:
        a, b = map(int, request.last_user_text.removeprefix("What is ").removesuffix("?").split(" + "))
        return Reply.text(str(a + b))

    with MockModelServer(adder, model="mock") as mock:
        for target in ("./my_env", "my_env/my_env.toml"):
            out = tmp_path / "out" / target.replace("/", "_")
            evaluated = run(
                [*V1, "eval", target, "-m", "mock", "-b", mock.url, "-n", "3", "-r", "1", "--output-dir", str(out)], tmp_path
            )
            assert evaluated.returncode == 0, evaluated.stderr
            (folder,) = out.iterdir()
            assert json.loads((folder / "metadata.json").read_text())["avg_reward"] == 1.0


def test_v1_eval_of_the_folder_runs_its_config_file_from_any_directory(tmp_path: Path) -> None:
    (tmp_path / "envs").mkdir()
    assert main(["init", "my_env", "--dir", str(tmp_path / "envs")]) == 0
    config = tmp_path / "envs" / "my_env" / "my_env.toml"
    config.write_text(
        config.read_text().replace("num_examples = 10", "num_examples = 4").replace("max_operand = 50", "max_operand = 3")
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def adder(request: MockRequest) -> Reply:
        a, b = map(int, request.last_user_text.removeprefix("What is ").removesuffix("?").split(" + "))
        assert a <= 3 and b <= 3  # the config's [env.taskset] reached the taskset
        return Reply.text(str(a + b))

    with MockModelServer(adder, model="mock") as mock:
        targets = ((f"{tmp_path}/envs/my_env", elsewhere), ("./my_env", tmp_path / "envs"), (str(config), elsewhere))
        for number, (target, cwd) in enumerate(targets):
            out = tmp_path / "out" / str(number)
            evaluated = run([*V1, "eval", target, "-m", "mock", "-b", mock.url, "--output-dir", str(out)], cwd)
            assert evaluated.returncode == 0, evaluated.stderr
            (folder,) = out.iterdir()
            metadata = json.loads((folder / "metadata.json").read_text())
            # [eval] of the folder's config: 4 examples, 2 rollouts each (no -n/-r given)
            assert (metadata["num_examples"], metadata["rollouts_per_example"]) == (4, 2), target
            assert metadata["avg_reward"] == 1.0
            assert len((folder / "results.jsonl").read_text().splitlines()) == 8


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("My-Env", "not a valid name"),
        ("1env", "not a valid name"),
        ("../escape", "not a valid name"),
        ("class", "Python keyword"),
        ("json", "already an importable module"),
        ("existing", "already exists"),
    ],
)
def test_init_refuses_bad_names_and_existing_folders(
    tmp_path: Path, name: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "existing").mkdir()
    before = sorted(os.listdir(tmp_path))
    assert main(["init", name, "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("v1 init: error: ") and message in err and len(err.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == before


def test_init_refusal_from_a_real_process(tmp_path: Path) -> None:
    (tmp_path / "my_env").mkdir()
    result = run([*V1, "init", "my_env"], tmp_path)
    assert (
        result.returncode == 2
        and result.stderr == f"v1 init: error: {Path('my_env')} already exists; pick another name or remove it\n"
    )
