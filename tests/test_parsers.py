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
        vf.load_example_dataset("reverse_text", split="validation")
    out = io.StringIO()
    rollouts = [
        {"prompt": [{"role": "user", "content": "abc"}], "completion": [{"role": "assistant", "content": "cba"}], "reward": 1.0}
    ]
    vf.print_prompt_completions_sample({"outputs": rollouts * 5, "metadata": {}}, n=2, console=Console(file=out, width=120))  # type: ignore[typeddict-item]
    text = out.getvalue()
    assert text.count("user: abc") == 2 and "assistant: cba" in text and "1.000" in text


def test_parser_keeps_extra_attributes_and_refuses_a_non_callable_extract_fn() -> None:
    parser = vf.Parser(extract_fn=str.upper, style="terse")
    assert parser.parse("abc") == "ABC" and parser.style == "terse"  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="extract_fn must be callable"):
        vf.Parser("not a function")  # type: ignore[arg-type]


def test_get_assistant_messages_keeps_only_the_assistant_turns_in_order() -> None:
    parser = vf.Parser()
    completion = [*said("last"), {"role": "tool", "tool_call_id": "1", "content": "r"}, "junk"]
    assert [m["content"] for m in parser.get_assistant_messages(completion)] == ["first try", "last"]  # type: ignore[arg-type]
    assert parser.get_assistant_messages("plain") == [{"role": "assistant", "content": "plain"}]
    assert parser.get_assistant_messages([]) == [] and parser.get_assistant_messages(None) == []


def test_parse_answer_of_content_parts_and_missing_content() -> None:
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "<answer>4"}, {"type": "text", "text": "2</answer>"}]}]
    assert vf.XMLParser(["answer"]).parse_answer(parts) == "42"
    assert vf.Parser().parse_answer([{"role": "assistant", "content": None, "tool_calls": []}]) == ""
    assert vf.Parser().parse_answer("as is") == "as is"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("<answer>unclosed", None),
        ("</answer> close before open <answer>", None),
        ("<answer>a</answer> then <answer>unclosed", "a"),
        ("<answer>outer <answer>inner</answer> tail</answer>", "inner"),
        ("<answer></answer>", ""),
        ("<ANSWER>case</ANSWER>", None),
        ("<answer>\n  multi\nline  \n</answer>", "multi\nline"),
    ],
)
def test_xml_parser_on_malformed_completions(text: str, expected: str | None) -> None:
    assert vf.XMLParser(["answer"]).parse(text).answer == expected


def test_xml_parser_is_linear_on_huge_hostile_input() -> None:
    """100k unclosed openings (a quadratic regex scan would take minutes) and a 5 MB answer."""
    parser = vf.XMLParser(["reasoning", "answer"])
    assert parser.parse("<answer>" * 100_000).answer is None
    big = "x" * 5_000_000
    assert parser.parse_answer(said(f"<reasoning>r</reasoning><answer>{big}</answer>")) == big
    assert parser.get_format_reward_func()(said("<reasoning>" * 100_000)) == 0.0


def test_xml_parser_strip_false_alternatives_and_the_last_message_with_the_field() -> None:
    parser = vf.XMLParser(["reasoning", ("code", "answer")], answer_field="answer")
    assert parser.parse("<answer> 7 </answer>", strip=False).code == " 7 "
    assert parser.answer_field == "code"
    completion = [{"role": "assistant", "content": "<code>early</code>"}, {"role": "assistant", "content": "no tags"}]
    assert parser.parse_answer(completion) == "early"
    assert parser.get_format_str() == "<reasoning>\n...\n</reasoning>\n<code>\n...\n</code>  (or <answer> in its place)"
    with pytest.raises(ValueError, match="list of tag names"):
        vf.XMLParser("answer")  # type: ignore[arg-type]
    for bad in ([], [()], ["<script>"], [("ok", 3)]):
        with pytest.raises(ValueError, match="tag names"):
            vf.XMLParser(bad)  # type: ignore[arg-type]


def test_think_parser_edge_cases() -> None:
    think = vf.ThinkParser()
    assert think.parse("") == "" and think.parse("</think>") == ""
    assert think.parse("reasoning without an opening tag</think> answer") == "answer"
    assert think.parse("<think>a</think>b</think>c") == "b</think>c"
    score = think.get_format_reward_func()
    assert score(said("<think>a</think>b</think>c")) == 0.0  # a second think block after the answer
    assert score(said("<think>a</think>   ")) == 0.0  # no answer after the block
    assert score(said("<think>" * 100_000 + "</think> ok")) == 1.0
    maybe = vf.MaybeThinkParser(vf.extract_boxed_answer)
    assert maybe.parse_answer(said(r"<think>\boxed{1}</think>\boxed{2}")) == "2"
    assert maybe.parse_answer(said(r"<think>unclosed \boxed{3}")) == "3"  # no block to drop: all of it is the answer


async def test_format_reward_scores_real_rollouts_through_the_harness(mock: MockModelServer, make_harness: Any) -> None:
    """`rewards=[parser.get_format_reward_func()]` is a v1 reward: called with the rollout's completion (and more)."""
    replies = iter(["<reasoning>r</reasoning><answer>7</answer>", "<reasoning>only</reasoning>", "plain"])
    mock.responder = lambda request: Reply.text(next(replies))
    parser = vf.XMLParser(["reasoning", "answer"])
    taskset = vf.Taskset(
        source=[{"question": f"q{i}", "answer": "7"} for i in range(3)], rewards=[parser.get_format_reward_func()]
    )
    harness = make_harness(taskset=taskset, max_turns=1)
    rewards = [(await harness.run(task))["reward"] for task in taskset.tasks()]
    assert sorted(rewards) == [0.0, 0.5, 1.0]
