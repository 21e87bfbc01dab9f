"""`ClientConfig()` reads `OPENAI_BASE_URL` (and then the key from `OPENAI_API_KEY`) as the OpenAI SDK does."""

from __future__ import annotations

import pytest

import v1 as vf
from v1.testing import MockModelServer, Reply

PRIME_URL = "https://api.pinference.ai/api/v1"


@pytest.fixture(autouse=True)
def no_openai_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)


def test_without_openai_base_url_the_defaults_are_the_seeds() -> None:
    config = vf.ClientConfig()
    assert (config.api_base_url, config.api_key_var) == (PRIME_URL, "PRIME_API_KEY")


def test_openai_base_url_is_the_default_url_and_openai_api_key_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
    config = vf.ClientConfig()
    assert (config.api_base_url, config.api_key_var) == ("http://localhost:8000/v1", "OPENAI_API_KEY")
    assert config.model_fields_set == set(), "a default, not a field the user named"
    assert vf.ClientConfig(api_base_url="http://other/v1").api_key_var == "PRIME_API_KEY", "a named URL keeps the seed's key"
    named = vf.ClientConfig(api_key_var="MY_KEY")
    assert (named.api_base_url, named.api_key_var) == ("http://localhost:8000/v1", "MY_KEY")
    assert vf.ClientConfig({"client_type": "openai_completions"}).api_base_url == "http://localhost:8000/v1"


def test_an_empty_openai_base_url_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "")
    assert vf.ClientConfig().api_base_url == PRIME_URL


async def test_a_default_client_calls_openai_base_url_with_openai_api_key(
    mock: MockModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", mock.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    mock.responder = lambda request: Reply.text("answered")
    state = await vf.Harness(client=vf.ClientConfig(max_retries=0), model="m").run({"prompt": "hi"})
    assert state["error"] is None, state["error"]
    assert state["completion"] == [{"role": "assistant", "content": "answered"}]
    [request] = mock.requests
    assert request.headers.get("Authorization") == "Bearer sk-from-the-environment"
