"""v1.registry: parts by name, one Protocol per family, one error for an unknown name, entry points read only when needed."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import v1 as vf
from harnesses import CodexHarness
from tests.tools.patience import HANG_S
from v1.clients._resolve import client_class
from v1.env._loading import loader_of
from v1.interception._lookup import all_dialects, dialect_for_path
from v1.registry import CLIENT_TYPES, DIALECTS, HARNESSES, SANDBOX_BACKENDS, TASKSETS, Registry, factory_of, object_with
from v1.sandbox import LocalBackend, PrimeBackend, get_backend, register_backend

ROOT = Path(__file__).resolve().parent.parent


def widgets() -> Registry[object]:
    return Registry("widget", "v1.tests.no_such_group", factory_of("spin"), {"round": "v1.sandbox._local:LocalBackend"})


class Spinner:
    def spin(self) -> None: ...


def test_an_unknown_name_is_one_line_naming_the_kind_the_name_the_known_and_the_closest() -> None:
    with pytest.raises(vf.UnknownNameError) as caught:
        SANDBOX_BACKENDS.get("lokal")
    assert str(caught.value) == "unknown sandbox backend 'lokal' (did you mean 'local'?); known: local, prime"
    assert isinstance(caught.value, vf.ConfigError)
    assert (caught.value.kind, caught.value.name, caught.value.known) == ("sandbox backend", "lokal", ["local", "prime"])
    assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)


@pytest.mark.parametrize("name", ["", "x" * 100_000, "../../etc/passwd", "local\n", 7, None, ["local"]])
def test_hostile_names_are_unknown_in_one_short_line(name: object) -> None:
    with pytest.raises(vf.UnknownNameError) as caught:
        SANDBOX_BACKENDS.get(name)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message and len(message) < 200 and message.endswith("known: local, prime")


def test_every_family_answers_an_unknown_name_the_same_way() -> None:
    for registry, name in ((CLIENT_TYPES, "openai_chat"), (DIALECTS, "mesages"), (HARNESSES, "codx"), (TASKSETS, "gsm8")):
        with pytest.raises(vf.UnknownNameError, match=rf"^unknown {registry.kind} '{name}' \(did you mean '\w+'\?\); known: "):
            registry.get(name)
    with pytest.raises(vf.UnknownNameError, match=r"^unknown client type 'openai_chat' \(did you mean"):
        client_class("openai_chat")
    with pytest.raises(vf.ConfigError, match=r"field 'client_type': unknown client type 'nope'; known: anthropic_messages, "):
        vf.ClientConfig(client_type="nope")
    with pytest.raises(vf.ConfigError, match=r"field 'backend': unknown sandbox backend 'dockr'; known: local, prime"):
        vf.SandboxConfig(backend="dockr")


def test_every_built_in_resolves_to_a_part_of_its_family() -> None:
    assert client_class("openai_chat_completions") is vf.clients.OpenAIChatCompletionsClient  # type: ignore[attr-defined]
    assert [dialect.name for dialect in all_dialects()] == DIALECTS.names()
    assert DIALECTS.names() == ["chat_completions", "completions", "responses", "messages", "gemini"]
    assert dialect_for_path("/v1/chat/completions").name == "chat_completions"
    assert get_backend("local").name == "local" and SANDBOX_BACKENDS.get("prime") is PrimeBackend
    assert HARNESSES.get("codex") is CodexHarness
    assert all(issubclass(HARNESSES.get(name), vf.Harness) for name in HARNESSES.names())
    assert TASKSETS.get("reverse_text")().config.taskset_id == "reverse_text"
    assert all(callable(TASKSETS.get(name)) for name in TASKSETS.names())
    assert all(callable(CLIENT_TYPES.get(name)) for name in CLIENT_TYPES.names())


def test_a_name_is_taken_once_and_registering_the_same_part_again_is_allowed() -> None:
    registry = widgets()
    with pytest.raises(
        vf.PluginError, match=r"^widget 'round' is taken \(built in: 'v1.sandbox._local:LocalBackend'\); choose another"
    ):
        registry.register("round", Spinner)
    registry.register("round", LocalBackend)
    registry.register("square", Spinner)
    registry.register("square", Spinner)
    with pytest.raises(vf.PluginError, match=r"^widget 'square' is taken \(registered in code: .*:Spinner\)"):
        registry.register("square", LocalBackend)
    assert registry.names() == ["round", "square"] and registry.get("square") is Spinner
    assert registry.origin("square") == "registered in code"


def test_register_backend_refuses_a_built_in_name_but_refreshes_the_same_backend() -> None:
    with pytest.raises(vf.PluginError, match="sandbox backend 'local' is taken"):
        register_backend("local", PrimeBackend)
    first = get_backend("prime")
    register_backend("prime", PrimeBackend)
    assert get_backend("prime") is not first and SANDBOX_BACKENDS.get("local") is LocalBackend


@pytest.mark.parametrize("name", ["", "a b", "-dash", "x" * 101, "a/b", 3])
def test_a_malformed_name_cannot_be_registered(name: object) -> None:
    with pytest.raises(vf.PluginError, match=r"widget name .*: use letters, digits"):
        widgets().register(name, Spinner)  # type: ignore[arg-type]


def test_a_part_of_the_wrong_kind_or_a_bad_reference_is_refused_in_one_line() -> None:
    registry = widgets()
    registry.register("number", 42)
    registry.register("spinless", object)
    registry.register("missing", "no_such_module_anywhere:Thing")
    registry.register("typo", "v1.sandbox._local:LocalBackendd")
    with pytest.raises(vf.PluginError, match=r"^widget 'number' \(registered in code\): 42 is an int, not a class or factory"):
        registry.get("number")
    with pytest.raises(vf.PluginError, match=r"is a class object, not a class with spin$"):
        registry.get("spinless")
    with pytest.raises(vf.PluginError, match=r"'no_such_module_anywhere:Thing' failed to import: ModuleNotFoundError"):
        registry.get("missing")
    with pytest.raises(vf.PluginError, match=r"failed to import: AttributeError: .*LocalBackendd"):
        registry.get("typo")
    dialects = Registry("dialect", "v1.tests.none", object_with("route"), {})
    dialects.register("class", Spinner)
    with pytest.raises(vf.PluginError, match="is a class Spinner, not an object with route"):
        dialects.get("class")


def test_entry_points_are_read_on_the_first_unknown_name_never_at_import() -> None:
    probe = """
import importlib.metadata as metadata
read = []
real = metadata.entry_points
# only v1's own groups: pydantic reads its "pydantic" plugin group on its own schedule
metadata.entry_points = lambda **kw: str(kw.get("group")).startswith("v1.") and read.append(kw["group"]) or real(**kw)
import v1
v1.SandboxConfig(backend="local"); v1.ClientConfig(client_type="anthropic_messages"); v1.load_environment("reverse_text")
print(read)
try:
    v1.SandboxConfig(backend="nope")
except v1.ConfigError:
    pass
print(read)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "['v1.sandbox_backends']"]


def test_a_toml_loader_by_name_builds_the_registered_taskset(tmp_path: Path) -> None:
    path = tmp_path / "env.toml"
    path.write_text('[env.taskset]\nloader = "reverse_text"\n[env.harness]\nmax_turns = 1\n')
    env = vf.load_environment(str(path))
    assert env.taskset.config.taskset_id == "reverse_text" and len(env.taskset.rows()) > 0
    assert loader_of("codex", "env.harness") is CodexHarness
    assert loader_of("tasksets.reverse_text:load_taskset", "env.taskset") is TASKSETS.get("reverse_text")


def test_a_module_object_reference_works_wherever_a_name_does() -> None:
    ref = "v1.sandbox._local:LocalBackend"
    assert vf.SandboxConfig(backend=ref).backend == ref
    assert isinstance(get_backend(ref), LocalBackend) and SANDBOX_BACKENDS.origin(ref) == "a module:object reference"
    assert ref not in SANDBOX_BACKENDS.names()
    assert client_class("v1.clients._openai_responses:OpenAIResponsesClient").__name__ == "OpenAIResponsesClient"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("a:b:c", r"sandbox backend 'a:b:c': not a name, nor a 'module:object' reference"),
        ("v1.sandbox._local:", r"sandbox backend 'v1.sandbox._local:': not a name, nor a 'module:object' reference"),
        ("x" * 500 + ":y", r"sandbox backend 'xxxxx.*\.\.\.: not a name, nor a 'module:object' reference"),
        ("no_such_module_anywhere:Backend", r"sandbox backend reference 'no_such_module_anywhere:Backend' failed to import"),
        (
            "v1.sandbox._local:INSTALL_HINT",
            r"sandbox backend reference 'v1.sandbox._local:INSTALL_HINT' is a str, not a class or factory with",
        ),
    ],
)
def test_a_bad_reference_is_one_line(ref: str, message: str) -> None:
    with pytest.raises(vf.ConfigError, match=rf"^SandboxConfig: field 'backend': {message}") as caught:
        vf.SandboxConfig(backend=ref)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400


def test_a_factory_that_fails_is_a_plugin_error_naming_it() -> None:
    with pytest.raises(
        vf.PluginError, match=r"^sandbox backend 'os:getcwdb' \(a module:object reference\): its factory returned"
    ):
        get_backend("os:getcwdb")
    with pytest.raises(vf.PluginError, match=r"^sandbox backend 'os:getenv' .*: its factory failed: TypeError: "):
        get_backend("os:getenv")


def test_the_bundled_harnesses_and_tasksets_are_v1s_own_entry_points() -> None:
    """The registry names no `harnesses.*` or `tasksets.*` module: they are declared in pyproject.toml like a
    plugin's, and count as built in (a plugin cannot take their names)."""
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert set(HARNESSES.names()) >= set(declared["v1.harnesses"]) and "codex" in declared["v1.harnesses"]
    assert set(TASKSETS.names()) >= set(declared["v1.tasksets"]) and "reverse_text" in declared["v1.tasksets"]
    assert HARNESSES.origin("codex") == TASKSETS.origin("gsm8k") == "built in"
    upward = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "v1" / "registry").rglob("*.py")
        if '"harnesses.' in path.read_text() or '"tasksets.' in path.read_text()
    ]
    assert upward == []


def test_a_family_checks_a_part_against_its_protocol() -> None:
    """The members a part must have come from the family's Protocol, and the refusal names them."""

    class HalfClient:
        async def get_response(self) -> None: ...

    CLIENT_TYPES.register("half_client_for_test", HalfClient)
    with pytest.raises(
        vf.PluginError,
        match=r"is a class .*HalfClient, not a class with get_response, stream_response, upstream_locations, close$",
    ):
        CLIENT_TYPES.get("half_client_for_test")
    with pytest.raises(vf.PluginError, match=r"not a class or factory with available, create, delete$"):
        SANDBOX_BACKENDS.get("tests.test_registry:ROOT")
    with pytest.raises(
        vf.PluginError,
        match=r"not an object with name, prefix, route, path_pattern, parse_request, render, render_stream, "
        r"stream_writer, error_body, before_call, after_call, token_counter$",
    ):
        DIALECTS.get("tests.test_registry:Spinner")


def test_a_stale_install_without_v1s_entry_points_says_to_reinstall_in_one_line(tmp_path: Path) -> None:
    """v1's built-ins are its own entry points: a copy of v1 whose declaration lists none (metadata written before
    they moved there) answers every lookup of a built-in with one line saying to reinstall, not a KeyError."""
    shutil.copytree(ROOT / "v1", tmp_path / "v1", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "v1"\nversion = "0.1.0"\n')
    probe = """
import v1
from v1.registry import DIALECTS
print(v1.__file__)
for lookup in (lambda: v1.SandboxConfig(backend="local"), lambda: v1.ClientConfig(client_type="openai_responses"), DIALECTS.names):
    try:
        lookup()
    except v1.ConfigError as exc:
        print(type(exc).__name__, str(exc).replace(chr(10), " | "))
"""
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    where, backend, client, dialects = out.stdout.splitlines()
    assert where == str(tmp_path / "v1" / "__init__.py")
    stale = "v1's metadata declares no entry points in group {!r} (a stale install); reinstall v1, e.g. `pip install -e .` in its checkout"
    assert backend == (
        "ConfigError SandboxConfig: field 'backend': no built-in sandbox backend is installed: "
        f"{stale.format('v1.sandbox_backends')} (got 'local')"
    )
    assert client == (
        "ConfigError ClientConfig: field 'client_type': no built-in client type is installed: "
        f"{stale.format('v1.clients')} (got 'openai_responses')"
    )
    assert dialects == f"PluginError no built-in dialect is installed: {stale.format('v1.dialects')}"


def test_a_bundled_name_is_taken_before_any_lookup() -> None:
    """v1's entry points are its built-ins from the start: registering over one is refused even in a registry that
    has looked nothing up yet."""
    harnesses = Registry(HARNESSES.kind, HARNESSES.group, HARNESSES.check)
    with pytest.raises(vf.PluginError, match=r"^harness 'codex' is taken \(built in: 'harnesses.codex:CodexHarness'\)"):
        harnesses.register("codex", Spinner)
    assert harnesses.get("codex") is CodexHarness and harnesses.origin("codex") == "built in"
