"""Loading environments from modules (root and child loaders) and from TOML files alone."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import v1 as vf
from tasksets import reverse_text

ROOT = Path(__file__).resolve().parent.parent
REVERSE_TEXT_TOML = ROOT / "configs" / "reverse_text.toml"

MODULE = """
import v1 as vf

ROWS = [{"question": "abc", "answer": "cba"}, {"question": "de", "answer": "ed"}]


def rows():
    return ROWS


class MyTasksetConfig(vf.TasksetConfig):
    difficulty: int = 1


class MyHarnessConfig(vf.HarnessConfig):
    style: str = "plain"


class MyEnvConfig(vf.EnvConfig):
    taskset: MyTasksetConfig
    harness: MyHarnessConfig


class ScoredTaskset(vf.Taskset):
    config_type = MyTasksetConfig

    @vf.reward
    def exact(self, completion, answer) -> float:
        return float(completion[-1]["content"] == answer)

    @vf.reward(weight=0.5)
    def short(self, completion) -> float:
        return 1.0

    @vf.metric
    def chars(self, completion) -> float:
        return float(len(completion[-1]["content"]))


def load_taskset(config: MyTasksetConfig) -> vf.Taskset:
    return ScoredTaskset(source=rows, config=config)


def load_harness(config: MyHarnessConfig) -> vf.Harness:
    return vf.Harness(config=config)
"""


@pytest.fixture
def env_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "my_env_children.py").write_text(MODULE)
    root = MODULE + "\n\ndef load_environment(config: MyEnvConfig) -> vf.Env:\n"
    root += "    return vf.Env(load_taskset(config.taskset), load_harness(config.harness), env_id='rooted')\n"
    (tmp_path / "my_env_root.py").write_text(root)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_env_children"


def write(tmp_path: Path, text: str, name: str = "env.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_toml_and_python_build_equal_configs() -> None:
    from_toml = vf.load_environment(str(REVERSE_TEXT_TOML))
    in_python = vf.Env(
        vf.Taskset(
            config=vf.TasksetConfig(
                taskset_id="reverse_text",
                source="tasksets.reverse_text:load_rows",
                system_prompt=reverse_text.SYSTEM_PROMPT,
                rewards=[{"fn": "tasksets.reverse_text:similarity", "weight": 1.0}],
                metrics=[{"fn": "tasksets.reverse_text:exact"}],
                gold="tasksets.reverse_text:gold",
            )
        ),
        vf.Harness(max_turns=1, sampling_args={"temperature": 0.0}),
    )
    assert from_toml.config == in_python.config
    assert from_toml.env_id == "reverse_text" and from_toml.module == "tasksets.reverse_text"
    assert len(from_toml.taskset.rows()) == 40
    # The module's own loader, by id, gives the same taskset config.
    by_id = vf.load_environment("reverse_text", harness={"max_turns": 1, "sampling_args": {"temperature": 0.0}})
    assert by_id.config == from_toml.config


def test_child_loaders_define_the_schemas(env_module: str) -> None:
    env = vf.load_environment(env_module, taskset={"difficulty": 3}, harness={"style": "terse", "max_turns": 2})
    assert type(env.taskset.config).__name__ == "MyTasksetConfig" and env.taskset.config.difficulty == 3
    assert type(env.harness.config).__name__ == "MyHarnessConfig" and env.harness.config.style == "terse"
    assert env.harness.config.max_turns == 2 and env.module == env_module
    with pytest.raises(vf.ConfigError, match=r"field 'env.taskset.difficulty': Input should be a valid integer"):
        vf.load_environment(env_module, taskset={"difficulty": "hard"})


def test_root_loader(env_module: str) -> None:
    env = vf.load_environment("my_env_root", taskset={"difficulty": 2})
    assert env.env_id == "rooted" and env.taskset.config.difficulty == 2
    with pytest.raises(vf.ConfigError, match=r"field 'env.harness.bogus': unknown field"):
        vf.load_environment("my_env_root", harness={"bogus": 1})


def test_toml_names_a_module_and_loaders_by_ref(env_module: str, tmp_path: Path) -> None:
    by_id = write(tmp_path, f'[env]\nid = "{env_module}"\n[env.taskset]\ndifficulty = 5\n', "by_id.toml")
    env = vf.load_environment(by_id)
    assert env.taskset.config.difficulty == 5 and env.env_id == env_module
    by_ref = write(
        tmp_path,
        f"""
        [env.taskset]
        loader = "{env_module}:ScoredTaskset"
        source = "{env_module}:rows"
        difficulty = 4
        [env.harness]
        loader = "{env_module}:load_harness"
        style = "x"
        """,
        "by_ref.toml",
    )
    env = vf.load_environment(by_ref)
    assert type(env.taskset).__name__ == "ScoredTaskset" and env.taskset.config.difficulty == 4
    assert env.harness.config.style == "x" and len(env.taskset.rows()) == 2


def test_scoring_reweights_and_skips_class_defined_handlers(env_module: str, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        [env.taskset]
        loader = "{env_module}:ScoredTaskset"
        source = "{env_module}:rows"
        [env.taskset.scoring.exact]
        weight = 2.0
        [env.taskset.scoring.short]
        skip = true
        """,
    )
    env = vf.load_environment(path)
    handlers = env.harness.handlers
    weights = {h.name: h.weight for h in handlers.of("reward") + handlers.of("metric")}
    assert weights == {"exact": 2.0, "chars": 0.0}
    bad = write(
        tmp_path, f'[env.taskset]\nloader = "{env_module}:ScoredTaskset"\n[env.taskset.scoring.nope]\nweight = 1\n', "bad.toml"
    )
    with pytest.raises(vf.ConfigError, match=rf"{bad}: field 'env.taskset.scoring.nope': no reward or metric named 'nope'"):
        vf.load_environment(bad)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[env.taskset]\nbogus = 1\n", r"field 'env.taskset.bogus': unknown field"),
        ("[env.harness]\nmax_turns = 'many'\n", r"field 'env.harness.max_turns': Input should be a valid integer"),
        (
            "[env.taskset]\n[[env.taskset.rewards]]\nfn = 'no_such_module:f'\n",
            r"field 'env.taskset.rewards\[0\].fn': cannot import module 'no_such_module'",
        ),
        (
            "[env.taskset]\nsource = 'tasksets.reverse_text:nope'\n",
            r"field 'env.taskset.source': module 'tasksets.reverse_text' has no attribute",
        ),
        ("[env.taskset]\nloader = 'not:a:ref'\n", r"field 'env.taskset.loader': 'not:a:ref' is not a 'module:object' reference"),
        (
            "[env.taskset]\nloader = 'gsm8kk'\n",
            r"field 'env.taskset.loader': unknown taskset 'gsm8kk' \(did you mean 'gsm8k'\?\); known: alphabet_sort, .*, wordle; "
            r"or a 'module:object' reference$",
        ),
        ("[env.harness]\nloader = 'nope'\n", r"field 'env.harness.loader': unknown harness 'nope'; known: claude_code, "),
        ("[env.harness]\nloader = 5\n", r"field 'env.harness.loader': 5 is not a 'module:object' reference"),
        ("[env]\nid = 'no_such_env_anywhere'\n", r"unknown environment 'no_such_env_anywhere': no module"),
        ("[env]\nflavour = 1\n", r"field 'env.flavour': unknown field"),
        ("[other]\nx = 1\n", r"field 'other': unknown section"),
        ("[eval]\nmodel = 'm'\n", r"no \[env\] section"),
        ("[env\n", r"invalid TOML"),
    ],
)
def test_bad_toml_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(vf.ConfigError, match=message) as caught:
        vf.load_environment(path)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


def test_bad_ids_and_arguments() -> None:
    with pytest.raises(
        vf.UnknownNameError,
        match=r"unknown environment 'nope-env': no module 'nope-env' or 'nope_env' or 'tasksets.nope_env'; known: alphabet_sort, ",
    ):
        vf.load_environment("nope-env")
    with pytest.raises(vf.ConfigError, match=r"env_args \['max_turns'\] given, but its loader takes a config"):
        vf.load_environment("reverse_text", max_turns=3)
    with pytest.raises(vf.ConfigError, match="no such file"):
        vf.load_environment("missing.toml")


def test_loader_annotation_must_be_a_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "odd_env.py").write_text(
        "import v1 as vf\n\ndef load_taskset(config: int) -> vf.Taskset:\n    return vf.Taskset()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(vf.ConfigError, match="must be annotated with a TasksetConfig subclass"):
        vf.load_environment("odd_env")


def test_a_subclass_config_keeps_its_class_under_overrides() -> None:
    class WordsConfig(vf.TasksetConfig):
        words: list[str] = ["a"]  # noqa: RUF012 - a pydantic field

    taskset = vf.Taskset(config=WordsConfig(words=["x", "y"]), source=[{"prompt": "p"}])
    assert type(taskset.config) is WordsConfig and taskset.config.words == ["x", "y"]
    assert vf.TasksetConfig.from_config(WordsConfig(), taskset_id="t").taskset_id == "t"
