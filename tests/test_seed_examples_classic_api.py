"""The seeds' code examples for parsers, messages, logging, EvalConfig, the Prime plugin and vf-eval.

Each example runs as the seed writes it, with ``import v1 as vf`` for ``import verifiers as vf``
and the model URL pointed at the mock server; placeholders the seed leaves (``...``) are filled in
and say so. Examples that cannot run here, and why:

- seed 002 ``vf-eval continuation-quality -n1 -r1 -d -v``: that environment is on the Prime hub,
  not in this project (``v1 eval`` says so in one line, exit 2; tested below).
- seed 002 ``vf-eval ... -x '{"interleaved_rollouts": true}'``: v1 has no such setting (every
  rollout's model calls already go through the interception endpoint, token ids included), so
  the key is refused as unknown, one line, exit 2 (tested below).
- seed 002 ``vf-eval wiki-search -n1 -r1 -d -v -e configs/endpoints.py`` names no model: vf-eval
  defaults to ``gpt-4.1-mini`` in its registry; v1 asks the server at ``-b`` for its one model, so
  the run here adds ``-b`` (the model URL).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.cli import main
from v1.testing import MockModelServer, MockRequest, Reply

ROOT = Path(__file__).resolve().parent.parent


def test_seed_001_xml_parser_examples() -> None:
    parser = vf.XMLParser(fields=["reasoning", "answer"])
    # Parses: <reasoning>...</reasoning><answer>...</answer>
    parsed = parser.parse("<reasoning>\nstep\n</reasoning>\n<answer>\n12\n</answer>")
    assert (parsed.reasoning, parsed.answer) == ("step", "12")

    # With alternatives:
    parser = vf.XMLParser(fields=["reasoning", ("code", "answer")])
    # Accepts either <code> or <answer> for second field
    assert parser.parse("<code>x = 1</code>").code == "x = 1" and parser.parse("<answer>2</answer>").code == "2"
    assert parser.parse_answer([{"role": "assistant", "content": "<code>x = 1</code>"}]) == "x = 1"
    assert parser.get_format_str() and parser.get_fields() == ["reasoning", "code"]
    assert parser.format(reasoning="r", code="c") == "<reasoning>\nr\n</reasoning>\n<code>\nc\n</code>"


def test_seed_001_system_message_from_path(tmp_path: Path) -> None:
    (tmp_path / "system_prompt.txt").write_bytes(b"Be exact.\r\n\tTabs stay.\n")
    message = vf.SystemMessage.from_path(tmp_path / "system_prompt.txt")
    assert message.role == "system" and message.content == "Be exact.\r\n\tTabs stay.\n"


async def test_seed_001_logging_examples(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    with vf.log_level("DEBUG"):
        # verifiers logs at DEBUG level here
        assert vf.log_level  # the seed's block body is "..."
    # reverts to previous level

    env = vf.load_environment("reverse_text")  # `env` and generate's arguments are the seed's "..."
    rows = env.eval_rows(2)
    with vf.quiet_verifiers():
        # verifiers logging is quieted here
        outputs = await env.generate(rows, client_config, "mock", rollouts_per_example=1)  # v1's generate is awaited
    assert len(outputs["outputs"]) == 2 and len(mock.requests) == 2


def test_seed_001_eval_config_and_prime_plugin() -> None:
    config = vf.EvalConfig(
        env_id="reverse_text",
        env_args={},
        env_dir_path="./environments",
        model="mock",
        client_config=vf.ClientConfig(),
        sampling_args={},
        num_examples=1,
        rollouts_per_example=1,
        max_concurrent=1,
    )
    assert config.independent_scoring is False and config.extra_env_kwargs == {} and config.save_results is False
    plugin = vf.get_plugin()
    assert plugin.api_version == vf.PRIME_PLUGIN_API_VERSION == 1
    assert plugin.build_module_command(plugin.eval_module, ["--help"])[1:] == ["-m", "v1.cli._eval", "--help"]


def test_seed_004_custom_parser_and_the_parser_call_forms() -> None:
    class MyCustomParser(vf.Parser):
        def parse(self, text: str) -> Any:
            """Parse text according to custom logic."""
            # Your parsing logic here
            parsed_data = text.strip().upper()  # filled in: the seed's placeholder
            return parsed_data

        def get_format_reward_func(self):  # type: ignore[no-untyped-def]
            """Return format compliance reward function."""

            def format_reward_func(completion, **kwargs):  # type: ignore[no-untyped-def]
                # Your format checking logic here
                format_score = float(self.parse_answer(completion) == "OK")  # filled in
                return format_score

            return format_reward_func

    parser = MyCustomParser()
    assert parser.parse_answer([{"role": "assistant", "content": " ok "}]) == "OK"
    assert parser.get_format_reward_func()([{"role": "assistant", "content": "ok"}], answer="x") == 1.0
    # Seed 004's other forms: Parser(**kwargs) keeps attributes, parse(text, strip=True), ThinkParser(extract_fn, **kwargs).
    assert vf.Parser(tag="v").tag == "v"  # type: ignore[attr-defined]
    assert vf.XMLParser(["answer"], answer_field="answer").parse("<answer> a </answer>", strip=True).answer == "a"
    assert vf.ThinkParser(extract_fn=str.strip, note="n").parse("<think>t</think> b ") == "b"
    assert parser.get_assistant_messages([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]) == [
        {"role": "assistant", "content": "a"}
    ]


def echo(request: MockRequest) -> Reply:
    return Reply.text(request.last_user_text[::-1])


@pytest.fixture
def registry_dir(tmp_path: Path, mock: MockModelServer) -> Path:
    """A working directory with vf-eval's ``configs/endpoints.py``, its URLs pointed at the mock."""
    mock.responder = echo
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "endpoints.py").write_text(
        "ENDPOINTS = {\n"
        f'    "haiku": {{"model": "claude-haiku", "url": "{mock.url}", "key": "SEED_KEY"}},\n'
        f'    "deepseek-reasoner": {{"model": "deepseek-reasoner", "url": "{mock.url}", "key": "SEED_KEY"}},\n'
        "}\n"
    )
    return tmp_path


SEED_002_RUNS = [
    "gsm8k -n1 -r1 -d -v -b {url}",
    "gsm8k -n1 -r1 -d -v -m haiku -e configs/endpoints.py",
    "alphabet-sort -n1 -r1 -d -v -m haiku -e configs/endpoints.py",
    "wiki-search -n1 -r1 -d -v -e configs/endpoints.py -b {url}",
    "math-python -n1 -r1 -v -d -m deepseek-reasoner -e configs/endpoints.py",
    "alphabet-sort -n1 -r1 -v -d -m Qwen/Qwen3-4B-Instruct-2507 -b {url}",
]


@pytest.mark.parametrize("line", SEED_002_RUNS)
def test_seed_002_vf_eval_commands_run(registry_dir: Path, mock: MockModelServer, line: str) -> None:
    """``uv run vf-eval ...`` as ``python -m v1.cli._eval ...`` (what the ``vf-eval`` script runs)."""
    args = line.format(url=mock.url).split()
    env = {**os.environ, "SEED_KEY": "sk-seed", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "v1.cli._eval", *args, "--no-save"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        cwd=registry_dir,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "1/1 rollouts, reward" in result.stderr and " - DEBUG - " in result.stderr  # -d and -v
    assert len(mock.requests) >= 1
    if "-m haiku" in line:
        assert mock.requests[0].body["model"] == "claude-haiku" and mock.requests[0].headers["Authorization"] == "Bearer sk-seed"


def test_seed_002_commands_that_cannot_run_here_say_why_in_one_line(
    mock: MockModelServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["eval", "continuation-quality", "-n1", "-r1", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown environment 'continuation-quality': no module" in err and err.count("\n") == 0, err
    assert not out.exists() and mock.requests == []


def test_seed_002_interleaved_rollouts_line_runs_and_says_the_option_is_ignored(
    mock: MockModelServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = f'alphabet-sort -n1 -r1 -m Qwen/Qwen3-4B-Instruct-2507 -b {mock.url} -x {{"interleaved_rollouts":true}}'
    assert main(["eval", *line.split(), "--output-dir", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    [warning] = [line for line in err.splitlines() if "interleaved_rollouts" in line]
    assert warning.startswith(
        "v1 eval: warning: -x/--extra-env-kwargs: 'interleaved_rollouts' is not a setting of Env 'alphabet_sort'"
    )
    assert mock.requests, "the eval ran"
