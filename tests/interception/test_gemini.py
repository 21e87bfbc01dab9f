"""The Gemini dialect: translation both ways, hostile bodies answered 4xx in Google's error shape, and the official
`google-genai` SDK (streaming and not, function calling) as the program's client, over real HTTP."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.interception import BadRequest
from v1.interception import _gemini as gemini
from v1.testing import MockModelServer, MockRequest, Reply
from v1.types import Response, ResponseMessage, ToolCall, Usage

genai = pytest.importorskip("google.genai")
types = pytest.importorskip("google.genai.types")

ARGS = {"a": 1, "b": 2}


def test_a_conversation_translates_to_canonical_messages() -> None:
    body = {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Add"}, {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]},
            {
                "role": "model",
                "parts": [
                    {"text": "thinking...", "thought": True},
                    {"functionCall": {"name": "add", "args": ARGS}, "thoughtSignature": "sig"},
                    {"functionCall": {"id": "c2", "name": "add", "args": {"a": 3, "b": 4}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"id": "c2", "name": "add", "response": {"output": "7"}}},
                    {"functionResponse": {"name": "add", "response": {"error": "overflow"}}},
                ],
            },
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "add", "parameters": {"type": "OBJECT", "properties": {"a": {"type": "INTEGER"}}}}
                ]
            },
            {"function_declarations": [{"name": "sub", "parametersJsonSchema": {"type": "object"}}]},
            {"googleSearch": {}},
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["add"]}},
        "generationConfig": {"temperature": 0.5, "maxOutputTokens": 64, "stopSequences": ["END"], "thinkingConfig": {}},
    }
    request = gemini.parse_request(body, model="models/gemini-x", method="streamGenerateContent")
    assert request.stream and request.model == "gemini-x"
    system, user, assistant, first, second = request.messages
    assert system == {"role": "system", "content": "Be brief."}
    assert user["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert assistant["reasoning_content"] == "thinking..." and assistant["reasoning_signature"] == "sig"
    assert [call["id"] for call in assistant["tool_calls"]] == ["call_1_1", "c2"]
    assert first == {"role": "tool", "tool_call_id": "c2", "content": "7"}
    assert second == {"role": "tool", "tool_call_id": "call_1_1", "content": "overflow", "is_error": True}
    assert [tool.name for tool in request.tools or ()] == ["add", "sub"]
    assert (request.tools or [])[0].parameters == {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert request.sampling_args == {
        "temperature": 0.5,
        "max_tokens": 64,
        "stop": ["END"],
        "tool_choice": {"type": "function", "function": {"name": "add"}},
    }
    assert any("googleSearch" in warning for warning in request.warnings)
    assert any("thinkingConfig" in warning for warning in request.warnings)


def test_an_answer_renders_as_one_candidate() -> None:
    message = ResponseMessage(
        content="Sure.",
        reasoning_content="hm",
        reasoning_signature="sig",
        tool_calls=[ToolCall(id="c1", name="add", arguments=json.dumps(ARGS))],
        finish_reason="tool_calls",
    )
    response = Response(id="r1", created=0, model="m", message=message, usage=Usage(prompt_tokens=3, completion_tokens=2))
    body = gemini.render(response, "gemini-x", gemini.parse_request({"contents": [{"parts": [{"text": "x"}]}]}))
    (candidate,) = body["candidates"]
    assert candidate["content"]["parts"] == [
        {"text": "hm", "thought": True, "thoughtSignature": "sig"},
        {"text": "Sure."},
        {"functionCall": {"id": "c1", "name": "add", "args": ARGS}},
    ]
    assert candidate["finishReason"] == "STOP"
    assert body["usageMetadata"] == {"promptTokenCount": 3, "candidatesTokenCount": 2, "totalTokenCount": 5}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ([], "JSON object"),
        ({}, "contents: field required"),
        ({"contents": "hi"}, "contents: field required"),
        ({"contents": [{"role": "system", "parts": []}]}, "role must be 'user' or 'model'"),
        ({"contents": [{"parts": "hi"}]}, "parts must be a list"),
        ({"contents": [{"parts": [{"executableCode": {}}]}]}, "a user part must hold"),
        ({"contents": [{"parts": [{"functionResponse": {"name": "f", "response": {}}}]}]}, "answers no earlier functionCall"),
        ({"contents": [{"parts": [{"inlineData": {"mimeType": "audio/wav", "data": "x"}}]}]}, "only images"),
        ({"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": []}}]}]}, "args must be an object"),
        ({"contents": [{"parts": [{"text": "x"}]}], "tools": {"googleSearch": {}}}, "tools must be a list"),
        ({"contents": [{"parts": [{"text": "x"}]}], "tools": [{"functionDeclarations": [{"name": ""}]}]}, "name must be"),
        ({"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"candidateCount": 2}}, "one candidate"),
        ({"contents": [{"parts": [{"text": "x"}]}], "toolConfig": {"functionCallingConfig": {"mode": "X"}}}, "mode"),
    ],
)
def test_bad_bodies_are_bad_requests(body: Any, fragment: str) -> None:
    with pytest.raises(BadRequest, match=fragment):
        gemini.parse_request(body, model="m", method="generateContent")


def respond(request: MockRequest) -> Reply:
    if request.last_message.get("role") == "tool":
        return Reply.text("The sum is 3.")
    return Reply.tool("add", ARGS)


ADD = types.FunctionDeclaration(
    name="add",
    description="Add two integers.",
    parameters=types.Schema(
        type=types.Type.OBJECT,
        properties={"a": types.Schema(type=types.Type.INTEGER), "b": types.Schema(type=types.Type.INTEGER)},
    ),
)


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
async def test_the_google_genai_sdk_calls_a_function_through_the_endpoint(stream: bool) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        endpoint = state.get_endpoint_config()
        client = genai.Client(
            api_key=endpoint["api_key"],
            http_options=types.HttpOptions(base_url=endpoint["base_url"].removesuffix("/v1"), api_version="v1beta"),
        )
        config = types.GenerateContentConfig(
            system_instruction="Use the add tool.",
            tools=[types.Tool(function_declarations=[ADD])],
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        )
        contents: list[Any] = [types.Content(role="user", parts=[types.Part(text="What is 1+2?")])]
        for _ in range(2):
            if stream:
                parts: list[Any] = []
                async for chunk in await client.aio.models.generate_content_stream(
                    model="gemini-test", contents=contents, config=config
                ):
                    parts += chunk.candidates[0].content.parts or []
                    state.setdefault("chunks", 0)
                    state["chunks"] += 1
            else:
                answer = await client.aio.models.generate_content(model="gemini-test", contents=contents, config=config)
                parts = list(answer.candidates[0].content.parts)
                state["usage"] = answer.usage_metadata.total_token_count
            calls = [part.function_call for part in parts if part.function_call]
            if not calls:
                state["answer"] = "".join(part.text or "" for part in parts)
                return
            contents.append(types.Content(role="model", parts=parts))
            response = types.FunctionResponse(
                id=calls[0].id, name="add", response={"output": str(calls[0].args["a"] + calls[0].args["b"])}
            )
            contents.append(types.Content(role="user", parts=[types.Part(function_response=response)]))

    with MockModelServer(respond) as mock:
        harness = vf.Harness(program=program, client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m")
        state = await harness.run("What is 1+2?")
    assert state["error"] is None, state["error"]
    assert state["answer"] == "The sum is 3."
    first, second = state["trajectory"]
    assert first["prompt"] == [{"role": "system", "content": "Use the add tool."}, {"role": "user", "content": "What is 1+2?"}]
    (call,) = first["completion"][0]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == ARGS
    assert second["prompt"][-1] == {"role": "tool", "tool_call_id": call["id"], "content": "3"}  # the id made the round trip
    assert [(step["extras"]["dialect"], step["extras"]["stream"]) for step in state["trajectory"]] == [("gemini", stream)] * 2
    assert mock.requests[0].tools[0]["function"]["parameters"]["properties"]["a"] == {"type": "integer"}
    if stream:
        assert state["chunks"] > 3  # the text arrived in pieces
    else:
        assert state["usage"] > 0


async def test_hostile_requests_get_googles_error_shape() -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        endpoint = state.get_endpoint_config()
        root = endpoint["base_url"].removesuffix("/v1") + "/v1beta/models/gemini-test"
        good = {"x-goog-api-key": endpoint["api_key"]}
        body = {"contents": [{"parts": [{"text": "hi"}]}]}
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            answers = [
                await http.post(f"{root}:generateContent", json=body, headers={"x-goog-api-key": "wrong"}),
                await http.post(f"{root}:generateContent", json=body),
                await http.get(f"{root}:generateContent", headers=good),
                await http.post(f"{root}:generateContent", content=b"{not json", headers=good),
                await http.post(f"{root}:generateContent", json={"contents": [{"parts": [{"bad": 1}]}]}, headers=good),
                await http.post(f"{root}:embedContent", json=body, headers=good),
                await http.post(f"{root}:generateContent", json=body, headers=good),
            ]
        state["answers"] = [(answer.status_code, answer.json()) for answer in answers]

    with MockModelServer(lambda request: Reply.text("hello")) as mock:
        state = await vf.Harness(program=program, client=vf.ClientConfig(api_base_url=mock.url), model="m").run("x")
    assert state["error"] is None, state["error"]
    *refused, (ok_status, ok_body) = state["answers"]
    assert [status for status, _ in refused] == [401, 401, 405, 400, 400, 400]
    for status, body in refused:
        assert (
            set(body) == {"error"} and body["error"]["code"] == status and body["error"]["status"] in gemini.STATUS_NAMES.values()
        )
    assert ok_status == 200 and ok_body["candidates"][0]["content"]["parts"] == [{"text": "hello"}]
    assert len(state["trajectory"]) == 1


async def test_count_tokens_estimates_without_a_model_call() -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        endpoint = state.get_endpoint_config()
        client = genai.Client(
            api_key=endpoint["api_key"],
            http_options=types.HttpOptions(base_url=endpoint["base_url"].removesuffix("/v1"), api_version="v1beta"),
        )
        counted = await client.aio.models.count_tokens(model="gemini-test", contents="x" * 400)
        state["sdk"] = counted.total_tokens
        url = endpoint["base_url"].removesuffix("/v1") + "/v1beta/models/gemini-test:countTokens"
        body = {"contents": [{"parts": [{"text": "y" * 800}]}]}
        good = {"x-goog-api-key": endpoint["api_key"]}
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            answers = [
                await http.post(url, json={"generateContentRequest": {"model": "models/gemini-test", **body}}, headers=good),
                await http.post(url, json=body, headers={"x-goog-api-key": "wrong"}),
                await http.post(url, json={"contents": []}, headers=good),
                await http.get(url, headers=good),
            ]
        state["answers"] = [(answer.status_code, answer.json()) for answer in answers]

    with MockModelServer(lambda request: Reply.text("never asked")) as mock:
        state = await vf.Harness(program=program, client=vf.ClientConfig(api_base_url=mock.url), model="m").run("x")
        assert mock.requests == []
    assert state["error"] is None, state["error"]
    assert 100 <= state["sdk"] <= 130
    (whole, whole_body), (wrong_key, _), (empty, empty_body), (get, _) = state["answers"]
    assert whole == 200 and 200 <= whole_body["totalTokens"] <= 230
    assert (wrong_key, empty, get) == (401, 400, 405)
    assert empty_body["error"]["status"] == "INVALID_ARGUMENT" and "contents" in empty_body["error"]["message"]
    assert state["trajectory"] == []
