"""Parsers, answer extraction, `ensure_keys`, the judge reward (against the mock server) and the sample printer."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

import v1 as vf
from v1.testing import MockModelServer, MockRequest, Reply


def said(text: str) -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": "first try"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": text},
    ]


def test_extract_boxed_answer_takes_the_last_box_with_nested_braces() -> None:
    assert vf.extract_boxed_answer(r"so \boxed{1} no wait \boxed{\frac{1}{2}}.") == r"\frac{1}{2}"
    assert vf.extract_boxed_answer("42") == "42"
    assert vf.extract_boxed_answer("42", strict=True) == ""
    assert vf.extract_boxed_answer(r"\boxed{unclosed", strict=True) == ""


def test_extract_hash_answer() -> None:
    assert vf.extract_hash_answer("3 + 4 = 7\n#### 1,007 ") == "1007"
    assert vf.extract_hash_answer("no marker") is None


def test_parser_reads_the_last_assistant_message() -> None:
    parser = vf.Parser(vf.extract_boxed_answer)
    assert parser.parse_answer(said(r"it is \boxed{5}")) == "5"
    assert parser.parse_answer([{"role": "user", "content": "hi"}]) is None
    reward = parser.get_format_reward_func()
    assert reward(said("x")) == 1.0 and reward(said("  ")) == 0.0


def test_xml_parser_fields_alternatives_format_and_reward() -> None:
    parser = vf.XMLParser(["reasoning", ("code", "answer")])
    parsed = parser.parse("<reasoning>\nthink\n</reasoning>\n<answer> 7 </answer>")
    assert parsed.reasoning == "think" and parsed.code == "7"
    assert parser.get_fields() == ["reasoning", "code"]
    assert parser.parse_answer(said("<reasoning>r</reasoning><code>print(1)</code>")) == "print(1)"
    assert vf.XMLParser(["reasoning"]).parse_answer(said("<answer>a</answer>")) is None
    assert vf.XMLParser(["reasoning", "answer"]).parse_answer(said("<answer>a</answer><answer>b</answer>")) == "b"
    assert parser.format(reasoning="r", answer="7") == "<reasoning>\nr\n</reasoning>\n<answer>\n7\n</answer>"
    reward = parser.get_format_reward_func()
    assert reward(said("<reasoning>r</reasoning><answer>7</answer>")) == 1.0
    assert reward(said("<reasoning>r</reasoning>")) == 0.5
    with pytest.raises(ValueError, match="unknown field 'bogus'"):
        parser.format(bogus=1)
    with pytest.raises(ValueError, match="tag names"):
        vf.XMLParser(["not a tag"])


def test_think_parsers() -> None:
    think = vf.ThinkParser(vf.extract_boxed_answer)
    assert think.parse_answer(said(r"<think>hmm \boxed{1}</think> \boxed{2}")) == "2"
    assert think.parse_answer(said(r"\boxed{2}")) == ""
    reward = think.get_format_reward_func()
    assert reward(said("<think>a</think>answer")) == 1.0 and reward(said("answer")) == 0.0
    maybe = vf.MaybeThinkParser()
    assert maybe.parse_answer(said("<think>a</think> b")) == "b" and maybe.parse_answer(said("b")) == "b"


def test_ensure_keys_lists_every_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_TEST_PRESENT", "x")
    monkeypatch.delenv("V1_TEST_A", raising=False)
    monkeypatch.setenv("V1_TEST_B", "")
    vf.ensure_keys(["V1_TEST_PRESENT"])
    with pytest.raises(vf.MissingKeyError) as caught:
        vf.ensure_keys(["V1_TEST_PRESENT", "V1_TEST_A", "V1_TEST_B"])
    assert caught.value.keys == ["V1_TEST_A", "V1_TEST_B"] and isinstance(caught.value, ValueError)
    assert "export V1_TEST_A=... V1_TEST_B=..." in str(caught.value)


def judge_or_answer(request: MockRequest) -> Reply:
    """The policy answers "Paris"; as a judge it says yes when the response matches the ground truth."""
    text = request.last_user_text
    if text.startswith("Given a question"):
        truth = text.split("Ground-truth answer:\n")[1].split("\n")[0]
        response = text.split("Response:\n")[1].split("\n")[0]
        return Reply.text("yes" if truth.lower() == response.lower() else "no")
    return Reply.text("Paris")


async def test_judge_reward_calls_the_model_through_the_endpoint_unrecorded(mock: MockModelServer, make_harness: Any) -> None:
    mock.responder = judge_or_answer
    judge = vf.judge_reward(name="correct")
    rows = [{"question": "Capital of France?", "answer": "paris"}, {"question": "Capital of Peru?", "answer": "Lima"}]
    taskset = vf.Taskset(source=rows, rewards=[judge])
    harness = make_harness(taskset=taskset, max_turns=1)
    right, wrong = [await harness.run(task) for task in taskset.tasks()]
    assert right["reward"] == 1.0 and wrong["reward"] == 0.0
    assert right["metrics"]["correct"] == 1.0 and right["judge_responses"] == {"correct": "yes"}
    assert len(right["trajectory"]) == 1  # the judge's call is not a step of the policy
    assert len(mock.requests) == 4 and "Capital of Peru?" in mock.requests[3].last_user_text


def test_load_example_dataset_and_print_sample() -> None:
    dataset = vf.load_example_dataset("reverse_text")
    assert len(dataset) > 0 and {"question", "answer", "prompt"} <= set(dataset.column_names)
    with pytest.raises(vf.ConfigError, match="split"):
        vf.load_example_dataset("reverse_text", split="test")
    out = io.StringIO()
    rollouts = [
        {"prompt": [{"role": "user", "content": "abc"}], "completion": [{"role": "assistant", "content": "cba"}], "reward": 1.0}
    ]
    vf.print_prompt_completions_sample({"outputs": rollouts * 5, "metadata": {}}, n=2, console=Console(file=out, width=120))  # type: ignore[typeddict-item]
    text = out.getvalue()
    assert text.count("user: abc") == 2 and "assistant: cba" in text and "1.000" in text
