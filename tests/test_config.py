"""Strict config models, TOML loading and `module:object` references."""

from __future__ import annotations

import importlib
import json
import os.path
import re
import sys
import textwrap
from collections import OrderedDict
from pathlib import Path

import pytest

import tasksets
import v1
from v1.config import HandlerConfig, import_ref, resolve_callable


def score_answer(completion, answer) -> float:
    return 1.0


def load_rows() -> list[dict]:
    return [{"question": "q", "answer": "a"}]


NOT_CALLABLE = {"a": 1}


# -- strict fields -----------------------------------------------------------------------


def test_unknown_field_names_the_field():
    with pytest.raises(v1.ConfigError, match=r"^HarnessConfig: field 'bogus': unknown field$"):
        v1.HarnessConfig(bogus=1)


def test_unknown_nested_field_names_the_path():
    with pytest.raises(v1.ConfigError, match=r"EnvConfig: field 'harness\.bogus': unknown field"):
        v1.EnvConfig(harness={"bogus": 1})
    with pytest.raises(v1.ConfigError, match=r"field 'client\.endpoint_configs\.0\.nope': unknown field"):
        v1.HarnessConfig(client={"endpoint_configs": [{"nope": 1}]})


def test_endpoint_variants_inherit_what_an_endpoint_leaves_out():
    config = v1.ClientConfig(
        max_retries=0,
        timeout=7.0,
        extra_headers={"X-Team": "a"},
        endpoint_configs=[
            {"api_base_url": "http://one/v1"},
            {"api_base_url": "http://two/v1", "max_retries": 3, "extra_headers": {"X-Node": "2"}},
        ],
    )
    one, two = config.endpoint_variants()
    assert (one.api_base_url, one.max_retries, one.timeout, one.extra_headers) == ("http://one/v1", 0, 7.0, {"X-Team": "a"})
    assert (two.api_base_url, two.max_retries, two.timeout) == ("http://two/v1", 3, 7.0)
    assert two.extra_headers == {"X-Team": "a", "X-Node": "2"}
    assert one.endpoint_configs == two.endpoint_configs == []
    assert v1.ClientConfig(max_retries=2).endpoint_variants() == [v1.ClientConfig(max_retries=2)]


@pytest.mark.parametrize(
    ("field", "value"),
    [("timeout", 0), ("timeout", -1.0), ("max_retries", -1), ("max_connections", 0), ("max_keepalive_connections", -5)],
)
def test_an_endpoints_limits_are_checked_like_the_clients(field, value):
    with pytest.raises(v1.ConfigError, match=rf"field 'endpoint_configs\.0\.{field}'"):
        v1.ClientConfig(endpoint_configs=[{"api_base_url": "http://one/v1", field: value}])


def test_every_problem_gets_its_own_line():
    with pytest.raises(v1.ConfigError) as info:
        v1.HarnessConfig(bogus=1, max_turns="many")
    lines = str(info.value).splitlines()
    assert len(lines) == 2
    assert any("field 'bogus': unknown field" in line for line in lines)
    assert any("field 'max_turns'" in line for line in lines)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"max_turns": "many"}, r"field 'max_turns': Input should be a valid integer.*\(got 'many'\)"),
        ({"max_turns": 0}, r"field 'max_turns': Input should be greater than or equal to 1"),
        ({"timeout_seconds": -1}, r"field 'timeout_seconds': Input should be greater than 0"),
        ({"system_prompt_strategy": "XX"}, r"field 'system_prompt_strategy': Input should be"),
        ({"sandbox": {"memory_gb": -1}}, r"field 'sandbox\.memory_gb': Input should be greater than 0"),
        ({"client": {"timeout": "soon"}}, r"field 'client\.timeout': Input should be a valid number"),
        ({"sampling_args": ["temperature"]}, r"field 'sampling_args': Input should be a valid dictionary"),
    ],
)
def test_wrong_types_name_the_field(kwargs, pattern):
    with pytest.raises(v1.ConfigError, match=pattern):
        v1.HarnessConfig(**kwargs)


def test_config_error_is_a_value_error_and_a_v1_error():
    with pytest.raises(ValueError):
        v1.HarnessConfig(bogus=1)
    with pytest.raises(v1.Error):
        v1.HarnessConfig(bogus=1)


def test_model_validate_raises_config_error_naming_the_field():
    with pytest.raises(v1.ConfigError, match=r"^HarnessConfig: field 'bogus': unknown field$"):
        v1.HarnessConfig.model_validate({"bogus": 1})
    with pytest.raises(v1.ConfigError, match=r"^EnvConfig: field 'taskset\.nope': unknown field$"):
        v1.EnvConfig.model_validate({"taskset": {"nope": 1}})
    assert v1.HarnessConfig.model_validate({"max_turns": 4}).max_turns == 4


# -- source config + overrides -----------------------------------------------------------


def test_positional_config_plus_keyword_overrides():
    base = v1.HarnessConfig(model="a", max_turns=3)
    derived = v1.HarnessConfig(base, max_turns=5)
    assert derived.model == "a"
    assert derived.max_turns == 5
    assert base.max_turns == 3


def test_positional_mapping_plus_overrides():
    config = v1.HarnessConfig({"model": "a", "max_turns": 2}, model="b")
    assert config.model == "b"
    assert config.max_turns == 2


def test_positional_source_must_be_a_config_or_mapping():
    with pytest.raises(v1.ConfigError, match="HarnessConfig: expected a config object or a mapping, got int"):
        v1.HarnessConfig(42)


def test_overrides_are_validated():
    with pytest.raises(v1.ConfigError, match="field 'bogus': unknown field"):
        v1.HarnessConfig(v1.HarnessConfig(), bogus=1)


def test_from_config_returns_the_same_object_without_overrides():
    config = v1.HarnessConfig(model="a")
    assert v1.HarnessConfig.from_config(config) is config


def test_from_config_builds_a_new_object_with_overrides_or_from_a_mapping():
    config = v1.HarnessConfig(model="a")
    derived = v1.HarnessConfig.from_config(config, model="b")
    assert derived is not config
    assert derived.model == "b"
    assert config.model == "a"
    assert v1.HarnessConfig.from_config({"model": "c"}).model == "c"
    assert v1.HarnessConfig.from_config(None) == v1.HarnessConfig()


def test_from_config_converts_a_different_config_class():
    taskset_config = v1.TasksetConfig(taskset_id="x")

    class MyTasksetConfig(v1.TasksetConfig):
        extra: int = 1

    converted = MyTasksetConfig.from_config(taskset_config)
    assert isinstance(converted, MyTasksetConfig)
    assert converted.taskset_id == "x"
    assert converted.extra == 1


# -- defaults under a given config (what a load_taskset does) ----------------------------

DEFAULTS = {"taskset_id": "demo", "system_prompt": "Be brief.", "rewards": [{"fn": "tasksets.reverse_text:exact", "weight": 1.0}]}


def test_with_defaults_keeps_the_defaults_when_nothing_is_given():
    for given in (None, v1.TasksetConfig(), {}):
        config = v1.TasksetConfig.with_defaults(DEFAULTS, given)
        assert config.taskset_id == "demo" and config.system_prompt == "Be brief." and len(config.rewards) == 1


def test_with_defaults_a_set_field_replaces_its_default_whole():
    config = v1.TasksetConfig.with_defaults(DEFAULTS, v1.TasksetConfig(system_prompt="Think.", rewards=[]))
    assert config.system_prompt == "Think."
    assert config.rewards == []
    assert config.taskset_id == "demo"
    assert v1.TasksetConfig.with_defaults(DEFAULTS, {"taskset_id": "other"}).taskset_id == "other"


def test_with_defaults_a_field_set_to_its_class_default_still_wins():
    """Only *set* fields override, including one set to the class's own default (None here)."""
    assert v1.TasksetConfig.with_defaults(DEFAULTS, v1.TasksetConfig(system_prompt=None)).system_prompt is None


def test_with_defaults_leaves_its_inputs_alone():
    given = v1.HarnessConfig(max_turns=2)
    defaults = {"max_turns": 7, "timeout_seconds": 30}
    config = v1.HarnessConfig.with_defaults(defaults, given)
    assert (config.max_turns, config.timeout_seconds) == (2, 30)
    assert defaults == {"max_turns": 7, "timeout_seconds": 30} and given.timeout_seconds is None


def test_with_defaults_takes_a_base_class_config_for_a_subclass():
    class WordsConfig(v1.TasksetConfig):
        min_length: int = 3

    config = WordsConfig.with_defaults({**DEFAULTS, "min_length": 5}, v1.TasksetConfig(taskset_id="words"))
    assert isinstance(config, WordsConfig) and (config.taskset_id, config.min_length) == ("words", 5)
    assert WordsConfig.with_defaults(DEFAULTS, WordsConfig(min_length=9)).min_length == 9


@pytest.mark.parametrize(
    ("defaults", "given", "pattern"),
    [
        (["taskset_id"], None, "TasksetConfig.with_defaults: defaults must be a mapping, got list"),
        (None, None, "defaults must be a mapping, got NoneType"),
        (DEFAULTS, v1.HarnessConfig(max_turns=3), "TasksetConfig.with_defaults: expected a TasksetConfig, got HarnessConfig"),
        (DEFAULTS, 42, "TasksetConfig: expected a config object or a mapping, got int"),
        (DEFAULTS, "taskset_id=x", "expected a config object or a mapping, got str"),
        ({**DEFAULTS, "bogus": 1}, None, "field 'bogus': unknown field"),
        (DEFAULTS, {"rewards": "not a list"}, "field 'rewards'"),
        ({"x" * 10_000: 1}, None, "unknown field"),
    ],
)
def test_with_defaults_refuses_bad_input_in_one_config_error(defaults, given, pattern):
    with pytest.raises(v1.ConfigError, match=pattern):
        v1.TasksetConfig.with_defaults(defaults, given)


def test_every_taskset_module_loads_through_its_defaults_with_overrides():
    """Each shipped `load_taskset` keeps its defaults and lets a set field win."""
    names = sorted(path.stem for path in Path(tasksets.__file__).parent.glob("*.py") if not path.stem.startswith("_"))
    loaders = [(name, importlib.import_module(f"tasksets.{name}")) for name in names]
    loaders = [(name, module) for name, module in loaders if hasattr(module, "load_taskset")]
    assert len(loaders) >= 11
    for name, module in loaders:
        assert module.load_taskset().config.taskset_id == module.DEFAULTS["taskset_id"], name
        overridden = module.load_taskset(v1.TasksetConfig(taskset_id="renamed"))
        assert overridden.config.taskset_id == "renamed", name
        assert overridden.config.rewards == module.load_taskset().config.rewards, name


# -- nested config defaults --------------------------------------------------------------


def test_annotation_only_nested_config_fields_default_to_their_class():
    config = v1.EnvConfig()
    assert isinstance(config.taskset, v1.TasksetConfig)
    assert isinstance(config.harness, v1.HarnessConfig)
    assert config.harness == v1.HarnessConfig()
    assert v1.EnvConfig().harness is not config.harness


def test_optional_nested_config_fields_stay_none():
    config = v1.HarnessConfig()
    assert config.sandbox is None
    assert config.client is None


def test_annotation_only_nested_config_in_user_subclass():
    class SolverConfig(v1.Config):
        depth: int = 2

    class MyHarnessConfig(v1.HarnessConfig):
        solver: SolverConfig
        box: v1.SandboxConfig

    config = MyHarnessConfig()
    assert config.solver == SolverConfig()
    assert config.solver.depth == 2
    assert config.box == v1.SandboxConfig()
    assert MyHarnessConfig(solver={"depth": 5}).solver.depth == 5
    with pytest.raises(v1.ConfigError, match=r"field 'solver\.bogus': unknown field"):
        MyHarnessConfig(solver={"bogus": 1})


def test_annotation_only_nested_config_with_postponed_annotations(tmp_path, monkeypatch):
    module_name = "v1_test_postponed_config_module"
    (tmp_path / f"{module_name}.py").write_text(
        textwrap.dedent(
            """
            from __future__ import annotations

            import v1
            from v1.config import Config, TasksetConfig


            class Inner(Config):
                x: int = 1


            class MyTasksetConfig(TasksetConfig):
                inner: Inner
                box: v1.SandboxConfig
                count: int = 3
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module(module_name)
        config = module.MyTasksetConfig()
        assert config.inner == module.Inner()
        assert config.box == v1.SandboxConfig()
        assert config.count == 3
        assert module.MyTasksetConfig(inner={"x": 4}).inner.x == 4
    finally:
        sys.modules.pop(module_name, None)


def test_nested_config_without_default_is_required_when_not_a_config():
    class Needs(v1.Config):
        name: str

    with pytest.raises(v1.ConfigError, match=r"field 'name': Field required"):
        Needs()


# -- TOML --------------------------------------------------------------------------------

ENV_TOML = f"""
[env.taskset]
taskset_id = "demo"
system_prompt = "Be brief."
source = "{__name__}:load_rows"
rewards = ["{__name__}:score_answer"]

[[env.taskset.metrics]]
fn = "{__name__}:score_answer"
priority = 2

[env.harness]
model = "m"
max_turns = 4
sampling_args = {{ temperature = 0.2 }}

[env.harness.program]
base = true

[env.harness.client]
timeout = 30.0
"""


@pytest.fixture
def env_toml(tmp_path):
    path = tmp_path / "env.toml"
    path.write_text(ENV_TOML)
    return path


def python_env_config() -> v1.EnvConfig:
    return v1.EnvConfig(
        taskset={
            "taskset_id": "demo",
            "system_prompt": "Be brief.",
            "source": f"{__name__}:load_rows",
            "rewards": [f"{__name__}:score_answer"],
            "metrics": [{"fn": f"{__name__}:score_answer", "priority": 2}],
        },
        harness={
            "model": "m",
            "max_turns": 4,
            "sampling_args": {"temperature": 0.2},
            "program": {"base": True},
            "client": {"timeout": 30.0},
        },
    )


def test_from_toml_dotted_section(env_toml):
    config = v1.TasksetConfig.from_toml(env_toml, "env.taskset")
    assert config.taskset_id == "demo"
    assert config.rewards == [HandlerConfig(fn=f"{__name__}:score_answer")]
    assert config.metrics[0].priority == 2


def test_from_toml_section_as_list(env_toml):
    config = v1.HarnessConfig.from_toml(env_toml, ["env", "harness"])
    assert config.model == "m"
    assert config.max_turns == 4
    assert isinstance(config.program, v1.ProgramConfig) and config.program.base
    assert config.client is not None and config.client.timeout == 30.0


def test_from_toml_whole_document(tmp_path):
    path = tmp_path / "harness.toml"
    path.write_text('model = "x"\nmax_turns = 2\n')
    assert v1.HarnessConfig.from_toml(path) == v1.HarnessConfig(model="x", max_turns=2)
    assert v1.HarnessConfig.from_toml(str(path)).model == "x"


def test_toml_and_python_build_equal_configs(env_toml):
    assert v1.EnvConfig.from_toml(env_toml, "env") == python_env_config()


def test_from_toml_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(v1.ConfigError, match=re.escape(f"{path}: no such file")):
        v1.HarnessConfig.from_toml(path)


def test_from_toml_missing_section(env_toml):
    with pytest.raises(v1.ConfigError, match=re.escape(f"{env_toml}: section [env.nope] not found")):
        v1.HarnessConfig.from_toml(env_toml, "env.nope")
    with pytest.raises(v1.ConfigError, match=re.escape(f"{env_toml}: section [other] not found")):
        v1.HarnessConfig.from_toml(env_toml, ["other", "harness"])


def test_from_toml_section_through_a_value_is_not_found(env_toml):
    with pytest.raises(v1.ConfigError, match=re.escape("section [env.harness.model.x] not found")):
        v1.HarnessConfig.from_toml(env_toml, "env.harness.model.x")


def test_from_toml_invalid_toml(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[env.harness\nmodel = ")
    with pytest.raises(v1.ConfigError, match=re.escape(f"{path}: invalid TOML")):
        v1.HarnessConfig.from_toml(path)


def test_from_toml_bad_value_names_file_section_and_field(tmp_path):
    path = tmp_path / "env.toml"
    path.write_text("[env.harness]\nmax_turns = 0\n")
    with pytest.raises(v1.ConfigError, match=re.escape(f"{path} [env.harness]: field 'max_turns': Input should be greater")):
        v1.HarnessConfig.from_toml(path, "env.harness")


def test_from_toml_unknown_field_names_file_section_and_path(tmp_path):
    path = tmp_path / "env.toml"
    path.write_text("[env.harness]\nbogus = 1\n[env.taskset]\n[env.harness.client]\nnope = 2\n")
    with pytest.raises(v1.ConfigError) as info:
        v1.EnvConfig.from_toml(path, "env")
    message = str(info.value)
    assert f"{path} [env]: field 'harness.bogus': unknown field" in message.splitlines()
    assert f"{path} [env]: field 'harness.client.nope': unknown field" in message.splitlines()


def test_from_toml_bad_value_without_section_names_the_file(tmp_path):
    path = tmp_path / "harness.toml"
    path.write_text('max_turns = "ten"\n')
    with pytest.raises(v1.ConfigError, match=re.escape(f"{path}: field 'max_turns'")):
        v1.HarnessConfig.from_toml(path)


# -- references --------------------------------------------------------------------------


def test_import_ref_resolves_modules_and_attribute_paths():
    assert import_ref("json:dumps") is json.dumps
    assert import_ref("os.path:join") is os.path.join
    assert import_ref("collections:OrderedDict.fromkeys") == OrderedDict.fromkeys
    assert import_ref(f"{__name__}:NOT_CALLABLE") == {"a": 1}


@pytest.mark.parametrize("ref", ["json.dumps", "a:b:c", ":dumps", "json:", ""])
def test_import_ref_needs_one_colon(ref):
    with pytest.raises(
        v1.ConfigError, match=rf"field 'taskset\.source': {re.escape(repr(ref))} is not a 'module:object' reference"
    ):
        import_ref(ref, "taskset.source")


def test_import_ref_non_string():
    with pytest.raises(v1.ConfigError, match="field 'ref': 3 is not a 'module:object' reference"):
        import_ref(3)  # type: ignore[arg-type]


def test_import_ref_missing_module():
    with pytest.raises(
        v1.ConfigError, match=r"field 'f': cannot import module 'no_such_module_v1test' of 'no_such_module_v1test:fn'"
    ):
        import_ref("no_such_module_v1test:fn", "f")


def test_import_ref_missing_attribute():
    with pytest.raises(
        v1.ConfigError, match=r"field 'f': module 'json' has no attribute 'nope\.deeper' \(from 'json:nope\.deeper'\)"
    ):
        import_ref("json:nope.deeper", "f")


def test_resolve_callable_passes_callables_through_and_resolves_refs():
    assert resolve_callable(score_answer, "f") is score_answer
    assert resolve_callable(f"{__name__}:score_answer", "f") is score_answer


def test_resolve_callable_refuses_non_callables():
    with pytest.raises(v1.ConfigError, match="field 'rewards': expected a callable or a 'module:object' reference, got dict"):
        resolve_callable(f"{__name__}:NOT_CALLABLE", "rewards")
    with pytest.raises(v1.ConfigError, match=r"field 'x': expected a callable .* got int"):
        resolve_callable(5, "x")


def test_resolve_callable_reports_bad_refs():
    with pytest.raises(v1.ConfigError, match="is not a 'module:object' reference"):
        resolve_callable("nocolon", "f")


# -- ProgramConfig / HandlerConfig -------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "forms"),
    [
        ({"base": True, "fn": "m:f"}, "base and fn"),
        ({"base": True, "command": ["agent"]}, "base and command"),
        ({"fn": "m:f", "command": ["agent"]}, "fn and command"),
        ({"base": True, "fn": "m:f", "command": ["agent"]}, "base and fn and command"),
    ],
)
def test_program_is_exactly_one_form(fields, forms):
    with pytest.raises(v1.ConfigError, match=f"a program is exactly one of base, fn or command; got {forms}"):
        v1.ProgramConfig(**fields)


def test_program_command_must_not_be_empty():
    with pytest.raises(v1.ConfigError, match="command must name a program to run"):
        v1.ProgramConfig(command=[])


@pytest.mark.parametrize("fields", [{"base": True}, {"fn": "m:f"}, {"command": ["agent", "--flag"]}])
def test_program_single_form_is_accepted(fields):
    config = v1.ProgramConfig(**fields)
    assert {name: getattr(config, name) for name in fields} == fields


def test_harness_program_accepts_a_mapping_or_a_callable():
    def program(task, state):
        return None

    assert v1.HarnessConfig(program=program).program is program
    config = v1.HarnessConfig(program={"fn": "m:f"})
    assert isinstance(config.program, v1.ProgramConfig)
    assert config.program.fn == "m:f"
    with pytest.raises(v1.ConfigError, match=r"field 'program': .*exactly one of base, fn or command"):
        v1.HarnessConfig(program={"base": True, "fn": "m:f"})


def test_handler_config_accepts_a_bare_ref_or_callable():
    assert HandlerConfig.model_validate("m:f") == HandlerConfig(fn="m:f")
    assert HandlerConfig.model_validate(score_answer).fn is score_answer
    config = v1.TasksetConfig(rewards=["m:f", score_answer, {"fn": "m:g", "weight": 2, "priority": 3}])
    assert [entry.fn for entry in config.rewards] == ["m:f", score_answer, "m:g"]
    assert config.rewards[0].weight is None
    assert config.rewards[2].weight == 2.0
    assert config.rewards[2].priority == 3


def test_handler_config_refuses_unknown_fields():
    with pytest.raises(v1.ConfigError, match=r"field 'rewards\.0\.bogus': unknown field"):
        v1.TasksetConfig(rewards=[{"fn": "m:f", "bogus": 1}])
    with pytest.raises(v1.ConfigError, match=r"field 'fn': Field required"):
        HandlerConfig.model_validate({"weight": 1.0})


def test_assigning_a_bad_value_is_a_config_error() -> None:
    config = v1.HarnessConfig()
    with pytest.raises(v1.ConfigError, match="HarnessConfig: field 'max_turns': Input should be greater than or equal to 1"):
        config.max_turns = 0
    config.max_turns = 3
    assert config.max_turns == 3


def test_harness_token_limits_are_validated() -> None:
    assert v1.HarnessConfig(max_seq_len=4096, max_total_completion_tokens=512).max_seq_len == 4096
    with pytest.raises(v1.ConfigError, match="field 'max_seq_len': Input should be greater than or equal to 1"):
        v1.HarnessConfig(max_seq_len=0)
