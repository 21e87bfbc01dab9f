"""`v1._util.entropy`: ids and secrets drawn from buffered OS randomness: right shapes, unique across threads, never shared with a fork."""

from __future__ import annotations

import base64
import os
import re
import threading
import uuid

import pytest

from v1._util import entropy as _entropy
from v1._util.entropy import BLOCK_BYTES, random_bits, random_bytes, token_hex, token_urlsafe, uuid4_hex


def test_shapes_match_the_stdlib_functions_they_replace() -> None:
    assert re.fullmatch(r"[0-9a-f]{24}", token_hex(12))
    key = token_urlsafe(24)
    assert len(key) == 32 and base64.urlsafe_b64decode(key) and re.fullmatch(r"[A-Za-z0-9_-]+", key)
    for count in (1, 2, 3, 5, 24):  # unpadded, as `secrets.token_urlsafe`, whatever the count
        text = token_urlsafe(count)
        assert "=" not in text and len(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))) == count
    parsed = uuid.UUID(uuid4_hex())
    assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
    assert all(0 <= random_bits(62) < 2**62 for _ in range(1000))
    assert max(random_bits(3) for _ in range(2000)) == 7 and min(random_bits(3) for _ in range(2000)) == 0
    assert len(random_bytes(BLOCK_BYTES + 1)) == BLOCK_BYTES + 1  # larger than a block: straight from the OS


def test_draws_across_block_boundaries_and_threads_never_repeat() -> None:
    drawn: list[str] = []
    lock = threading.Lock()

    def draw() -> None:
        mine = [token_hex(24) for _ in range(5_000)]  # 120 kB per thread: many blocks, refilled under contention
        with lock:
            drawn.extend(mine)

    threads = [threading.Thread(target=draw) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(drawn) == 40_000 and len(set(drawn)) == 40_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_draws_its_parents_buffered_bytes() -> None:
    random_bytes(1)  # the parent holds a partly used block
    assert _entropy._offset > 0
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next draw, then leave without running pytest's teardown
        os.close(read_end)
        os.write(write_end, token_hex(32).encode())
        os._exit(0)
    os.close(write_end)
    child_draw = os.read(read_end, 128).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    assert len(child_draw) == 64
    assert child_draw != token_hex(32), "the child drew the same bytes as its parent's next draw"
