"""`python -m v1.testing`: the mock model server as a process, with built-in and user responders, over real HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.tools.patience import HANG_S

ROOT = Path(__file__).resolve().parents[2]
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {"word": {"type": "string"}, "limit": {"type": "integer"}, "mode": {"enum": ["fast", "slow"]}},
            "required": ["word", "mode"],
        },
    },
}


@contextmanager
def serving(*args: str, pythonpath: str = "") -> Iterator[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [pythonpath, str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    process = subprocess.Popen(
        [sys.executable, "-m", "v1.testing", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), process.stderr.read() if process.stderr else ""
        yield url
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=HANG_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def chat(url: str, messages: list[dict[str, object]], key: str = "none", model: str = "served", **body: object) -> httpx.Response:
    return httpx.post(
        f"{url}/chat/completions",
        json={"model": model, "messages": messages, **body},
        headers={"Authorization": f"Bearer {key}"},
        timeout=HANG_S,
    )


def test_a_user_reply_function_from_a_module(tmp_path: Path) -> None:
    (tmp_path / "my_replies.py").write_text("def shout(request):\n    return request.last_user_text.upper() + '!'\n")
    with serving("--reply", "my_replies:shout", pythonpath=str(tmp_path)) as url:
        answer = chat(url, [{"role": "user", "content": "hello"}])
        assert answer.status_code == 200
        assert answer.json()["choices"][0]["message"]["content"] == "HELLO!"


def test_tool_calling_with_a_key_and_a_strict_model() -> None:
    with serving("--reply", "tool-call", "--model", "served", "--strict-model", "--api-key", "sk-1") as url:
        ask = [{"role": "user", "content": "find it"}]
        refused = chat(url, ask, key="sk-wrong", tools=[TOOL])
        assert refused.status_code == 401 and "Incorrect API key" in refused.json()["error"]["message"]
        unknown = chat(url, ask, key="sk-1", model="other", tools=[TOOL])
        assert unknown.status_code == 404 and unknown.json()["error"]["message"] == "The model `other` does not exist."
        called = chat(url, ask, key="sk-1", tools=[TOOL]).json()["choices"][0]["message"]
        (call,) = called["tool_calls"]
        assert call["function"]["name"] == "lookup" and call["function"]["arguments"] == '{"word": "x", "mode": "fast"}'
        result = [*ask, called, {"role": "tool", "tool_call_id": call["id"], "content": "found: 42"}]
        final = chat(url, result, key="sk-1", tools=[TOOL]).json()["choices"][0]
        assert final["message"]["content"] == "found: 42" and final["finish_reason"] == "stop"
        assert httpx.get(f"{url}/models", timeout=HANG_S).json()["data"][0]["id"] == "served"


def test_failure_modes_and_a_deterministic_imperfect_reverser() -> None:
    with serving("--reply", "fail-503") as url:
        failed = chat(url, [{"role": "user", "content": "hi"}])
        assert failed.status_code == 503 and failed.json()["error"]["message"] == "mock failure 503"
    answers = []
    for _ in range(2):
        with serving("--reply", "imperfect-reverse") as url:
            answers.append(
                [
                    chat(url, [{"role": "user", "content": "abcdefgh"}]).json()["choices"][0]["message"]["content"]
                    for _ in range(8)
                ]
            )
    assert answers[0] == answers[1]
    assert "hgfedcba" in answers[0] and len(set(answers[0])) > 1  # right sometimes, slips other times


def test_an_unknown_responder_is_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "v1.testing", "--reply", "shouting"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "python -m v1.testing: error: --reply 'shouting': not a built-in responder "
        "(echo, reverse, imperfect-reverse, tool-call, fail-STATUS) nor a 'module:function' reference\n"
    )


def resident_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])


def test_the_command_line_server_counts_requests_and_keeps_none_of_them() -> None:
    """A load test sends it millions: kept, they grew it by gigabytes and its collector's passes into stalls."""
    process = subprocess.Popen([sys.executable, "-m", "v1.testing"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        origin = url.removesuffix("/v1")
        padding = "x" * 50_000
        with httpx.Client(timeout=HANG_S) as http:
            http.post(f"{url}/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "warm"}]})
            rss_before = resident_kib(process.pid)
            for _ in range(1000):  # 50 MB of request bodies in all
                body = {"model": "m", "messages": [{"role": "user", "content": padding}]}
                assert http.post(f"{url}/chat/completions", json=body).status_code == 200
            stats = http.get(f"{origin}/mock/stats").json()
        assert stats["requests"] == 1001 and stats["in_flight"] == 0
        assert resident_kib(process.pid) - rss_before < 20_000  # kept, the bodies alone would be 50,000 KiB
    finally:
        process.terminate()
        process.wait(timeout=HANG_S)
