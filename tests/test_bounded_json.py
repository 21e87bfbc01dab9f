"""`v1._util.bounded_json`: the one reader of outside JSON refuses what would widen (deep, huge, non-finite) in one clear error."""

from __future__ import annotations

import json

import pytest

import v1
from v1._util import bounded_json as _bounded_json
from v1._util.bounded_json import MAX_DEPTH, UnsafeJSONError, loads


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_depth_up_to_the_limit_parses_and_one_more_is_refused_in_one_line() -> None:
    assert _bounded_json.loads(nested(MAX_DEPTH)) is not None
    with pytest.raises(UnsafeJSONError, match=rf"^results.jsonl line 3: nested more than {MAX_DEPTH} levels deep$"):
        _bounded_json.loads(nested(MAX_DEPTH + 1), "results.jsonl line 3")
    with pytest.raises(UnsafeJSONError, match="nested more than"):  # past the interpreter's own stack: no RecursionError
        _bounded_json.loads(nested(200_000).encode())


@pytest.mark.parametrize("text", ["1e999", "-1e999", "NaN", "Infinity", '{"t": -Infinity}'])
def test_numbers_must_be_finite(text: str) -> None:
    with pytest.raises(UnsafeJSONError, match="finite numbers only"):
        _bounded_json.loads(text, "the body")


def test_size_limit_and_error_kinds() -> None:
    with pytest.raises(UnsafeJSONError, match=r"^x: larger than 4 bytes$"):
        _bounded_json.loads('"hello"', "x", max_bytes=4)
    with pytest.raises(UnsafeJSONError, match=r"^x: not valid JSON \(Expecting value"):
        _bounded_json.loads("not json", "x")
    assert issubclass(UnsafeJSONError, v1.Error) and issubclass(UnsafeJSONError, ValueError)
    assert _bounded_json.loads(b'{"a": [1, 2.5, "s", null, true]}') == {"a": [1, 2.5, "s", None, True]}


def test_check_depth_bounds_a_value_that_arrived_parsed() -> None:
    deep: object = {}
    for _ in range(MAX_DEPTH):
        deep = {"a": deep}
    with pytest.raises(UnsafeJSONError, match=r"^the arguments: nested more than"):
        _bounded_json.check_depth(deep, "the arguments")
    shallow = {"a": [{"b": 1}]}
    assert _bounded_json.check_depth(shallow) is shallow


# orjson reads first; every document below is one where it differs from json.loads (or could),
# so each must come out exactly as json.loads gives it: value, type, or refusal.
_EDGES = [
    b"12345678901234567890123",  # wider than 64 bits: orjson would give a float
    b"-9223372036854775809",
    b"[18446744073709551616, 1]",
    b'{"id": 99999999999999999999}',
    b'"\\ud800"',  # a lone surrogate escape: orjson refuses it
    b'"\\udc00 tail"',
    b"\xef\xbb\xbf[1]",  # a UTF-8 byte order mark
    b'{"a": 1, "a": 2}',
    b"[1e-400, -0, -0.0, 1E5]",
    b'{"nested": [[[{"x": null}]]], "s": "caf\xc3\xa9"}',
    '"\ud83d\ude00 as str"',
    "[12345678901234567890]",
]


@pytest.mark.parametrize("text", _EDGES)
def test_the_orjson_fast_path_gives_exactly_what_json_loads_gives(text: str | bytes) -> None:
    expected = json.loads(text)
    for finite in (True, False):
        value = loads(text, finite=finite)
        assert value == expected and repr(value) == repr(expected)  # repr: an int stays an int, -0.0 stays -0.0


@pytest.mark.parametrize("text", [b"[1e999]", b"NaN", b"[-Infinity]", b"1" + b"0" * 400 + b".5"])
def test_non_finite_numbers_are_refused_or_kept_as_json_loads_keeps_them(text: bytes) -> None:
    with pytest.raises(UnsafeJSONError, match="finite numbers only"):
        loads(text)
    assert repr(loads(text, finite=False)) == repr(json.loads(text))


@pytest.mark.parametrize("kind", [str, bytes, bytearray])
def test_objects_alone_count_toward_the_depth_limit_in_every_kind_of_text(kind: type) -> None:
    def document(depth: int) -> str | bytes | bytearray:
        text = '{"a":' * depth + "1" + "}" * depth  # no "[": only counting "{" sees the depth
        return text if kind is str else kind(text.encode())

    assert loads(document(MAX_DEPTH)) is not None
    with pytest.raises(UnsafeJSONError, match=rf"^x: nested more than {MAX_DEPTH} levels deep$"):
        loads(document(MAX_DEPTH + 1), "x")


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_a_wide_integer_beside_brackets_in_bytes_is_read_as_json_loads_reads_it(kind: type) -> None:
    text = kind(b'{"n":[{"m":123456789012345678901}]}')
    assert repr(loads(text)) == repr(json.loads(text)) == "{'n': [{'m': 123456789012345678901}]}"
