"""Text from outside quoted in a log line: control and bidirectional characters escaped, everything else kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spanedge.logsafe import escaped
from tests.logtext import raw_controls


@pytest.mark.parametrize(
    ("sent", "logged"),
    [
        ("/apps/\x00", "/apps/\\x00"),
        ("invoice\u202egpj.exe", "invoice\\u202egpj.exe"),
        ("a\nINFO fake line\r", "a\\nINFO fake line\\r"),
        ("\x1b[2J\tx", "\\x1b[2J\\tx"),
        ("\x85\u2028\u2066", "\\x85\\u2028\\u2066"),
        ("\ud800", "\\ud800"),
    ],
)
def test_control_and_bidi_characters_are_escaped(sent: str, logged: str) -> None:
    assert escaped(sent) == logged


def test_letters_accents_emoji_and_backslashes_stay() -> None:
    text = "Zürich – 東京 ✓ 🚚 C:\\temp 'quoted'"
    assert escaped(text) == text


def test_a_value_is_shown_as_its_text() -> None:
    assert escaped(KeyError("\u202e")) == "'\\u202e'"
    assert escaped(ValueError("site a\x00b")) == "site a\\x00b"
    assert escaped(42) == "42"


@given(st.text())
def test_nothing_unsafe_is_left_and_escaping_twice_changes_nothing(text: str) -> None:
    once = escaped(text)
    assert raw_controls(once) == []
    assert escaped(once) == once
