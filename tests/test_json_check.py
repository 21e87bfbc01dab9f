"""`compact_json` writes what `json.dumps` writes, value for value, and refuses what it refuses, with the same error;
its text holds no more memory than its length."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import tracemalloc
import uuid
from typing import Any

import orjson
import pytest

from v1._util import json_check
from v1._util.json_check import compact_json, compact_json_read, compact_json_text, is_json


class Colour(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    HIGH = 3


class Tag(str):
    pass


@dataclasses.dataclass
class Point:
    x: int


def reference(value: Any, allow_nan: bool) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan).encode()


AGREED = [
    {"model": "m", "messages": [{"role": "user", "content": "héllo ☃ \u2028"}], "temperature": 0.7},
    {"n": 2**63 - 1, "wide": 2**64, "negative": -(2**70), "small": 1e-05, "large": 1e16, "zero": -0.0},
    {"nested": [[[[{"a": None, "b": True, "c": False}]]]], "empty": {}, "list": []},
    {1: "int key", 2.5: "float key", False: "bool key", None: "null key"},
    (1, 2, [3, (4,)]),
    {"level": Level.HIGH, "tag": Tag("x"), "tags": [Tag("y")]},
    "\ud800 alone",
    {"deep": json.loads("[" * 300 + "]" * 300)},
]


@pytest.mark.parametrize("allow_nan", [True, False])
@pytest.mark.parametrize("value", AGREED, ids=range(len(AGREED)))
def test_the_value_written_is_the_value_json_dumps_writes(value: Any, allow_nan: bool) -> None:
    try:
        expected = reference(value, allow_nan)
    except Exception as exc:
        with pytest.raises(type(exc)):
            compact_json(value, allow_nan=allow_nan)
        return
    written = compact_json(value, allow_nan=allow_nan)
    assert compact_json_text(value, allow_nan=allow_nan) == written.decode()
    text, read = compact_json_read(value, allow_nan=allow_nan)
    assert text == written
    if read is not None:  # the value the text reads as, with every type kept, and none of the value's own objects
        assert repr(read) == repr(json.loads(written)) and read is not value
    assert json.loads(written) == json.loads(expected)
    assert repr(json.loads(written)) == repr(json.loads(expected))  # an int stays an int, a float a float


@pytest.mark.parametrize("value", [float("nan"), {"t": float("inf")}, [1, -math.inf]])
def test_non_finite_numbers_are_written_as_json_dumps_writes_them_or_refused_alike(value: Any) -> None:
    assert compact_json(value) == reference(value, True)  # NaN, Infinity: never orjson's silent null
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        compact_json(value, allow_nan=False)
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        compact_json_read(value, allow_nan=False)
    assert compact_json_read(value) == (reference(value, True), None)  # NaN read back is not the value written


@pytest.mark.parametrize("value", [{"c": Colour.RED}, [uuid.UUID(int=1)], {"p": Point(1)}, {"s": {1, 2}}, b"bytes"])
def test_what_json_dumps_refuses_is_refused_though_orjson_would_write_it(value: Any) -> None:
    with pytest.raises(TypeError):
        reference(value, True)
    with pytest.raises(TypeError):
        compact_json(value)
    with pytest.raises(TypeError):
        compact_json_read(value)
    assert not is_json(value)


class Shade(str, enum.Enum):
    DARK = "dark"


def _circular() -> list[Any]:
    loop: list[Any] = [1]
    loop.append(loop)
    return loop


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _json_dumps_succeeds(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


JUDGED = [
    *AGREED,
    {"reward": float("nan"), "metrics": {"m": math.inf}},  # json.dumps writes NaN: JSON here
    {"ids": [uuid.UUID(int=7)]},
    {"deep": [[{"colour": Colour.RED}]]},  # orjson writes an Enum member's value; json.dumps refuses it
    [orjson.Fragment(b"[1]")],  # orjson writes a fragment's bytes as they are
    {"shade": Shade.DARK},
    {Tag("key"): 1},  # a str subclass as a key: json.dumps takes it
    {"set": {1}},
    {"complex": 1j},
    {"bytes": b"x", "array": bytearray(b"y")},
    {(1, 2): "tuple key"},
    [Ellipsis],
    _circular(),
    {"deep": _nested(2500)},  # deeper than marshal and orjson go
]


@pytest.mark.parametrize("value", JUDGED, ids=range(len(JUDGED)))
def test_is_json_says_what_json_dumps_says(value: Any) -> None:
    assert is_json(value) is _json_dumps_succeeds(value)


def test_a_lone_surrogate_is_refused_as_encoding_json_dumps_text_refuses_it() -> None:
    with pytest.raises(UnicodeEncodeError):
        reference({"content": "\udc80"}, True)
    with pytest.raises(UnicodeEncodeError):
        compact_json({"content": "\udc80"})
    with pytest.raises(UnicodeEncodeError):
        compact_json_text({"content": "\udc80"})


@pytest.mark.parametrize("content_bytes", [5, 1_500, 20_000])
def test_a_body_holds_about_its_own_length_of_memory_not_the_buffer_orjson_wrote_it_in(content_bytes: int) -> None:
    """orjson 3.12+ returns its text in a buffer of at least 4 KiB, about ten times a body's length; a request
    body is kept while its call is in flight, so 10,000 rollouts of 20 KB conversations allocated 5 GB more."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * content_bytes}]}
    tracemalloc.start()
    try:
        kept = [compact_json(body) for _ in range(50)]
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    # only what json_check allocated and still holds: another thread's allocations meanwhile don't count
    own = snapshot.filter_traces([tracemalloc.Filter(True, json_check.__file__)])
    held = sum(stat.size for stat in own.statistics("filename"))
    length = len(kept[0])
    assert kept[0] == reference(body, True)
    assert 50 * length <= held < 50 * (length + 200), f"{held / 50:.0f} bytes held a body of {length}"
