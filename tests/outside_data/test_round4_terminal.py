"""Round 4: text from outside reaches the terminal as text, never as escape sequences.

An upstream (or a program behind the endpoint) words its error as it likes; `v1 eval` prints the
first error of each type and, for a refused key, stops with it. Before, an OSC title sequence, a
screen clear, a colour and a bidi override in that text reached the user's terminal raw. Now every
character that is not printable (newlines and tabs aside) is printed as its escape.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_e2e_eval_failures import CONFIG, NO_CLIENT_RETRIES, v1_cli
from v1._util.terminal import printable
from v1.testing import MockModelServer, Reply

HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\r\u202eevil"


@pytest.mark.parametrize("status", [401, 400], ids=["fatal-key-error", "rollout-error"])
def test_an_upstreams_error_text_cannot_drive_the_users_terminal(tmp_path: Path, status: int) -> None:
    with MockModelServer(lambda request: Reply.fail(status, "refused " + HOSTILE), model="m") as server:
        result = v1_cli(
            "eval", CONFIG, "-b", server.url, "-m", "m", "-n", "1", "-r", "1", *NO_CLIENT_RETRIES,
            "--output-dir", str(tmp_path / "out"), cwd=tmp_path,
        )  # fmt: skip
    shown = result.stdout + result.stderr
    assert result.returncode != 0
    assert "refused \\x1b]0;owned\\x07\\x1b[2J\\x1b[31mred \\u202eevil" in shown, shown[-800:]
    for raw in ("\x1b]", "\x1b[2J", "\x1b[31m", "\x07", "\u202e"):
        assert raw not in shown


def test_printable_keeps_text_and_line_breaks_and_escapes_the_rest() -> None:
    assert printable("naïve 日本語 ✓\nnext\tcolumn") == "naïve 日本語 ✓\nnext\tcolumn"
    assert printable("a\x1b[0mb\x00c\x9bd\u2066e") == "a\\x1b[0mb\\x00c\\x9bd\\u2066e"
