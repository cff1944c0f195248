"""Model text shown to a person is inert: nothing in it can act on a terminal or reorder what is read."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stateward.core.inert import BIDI_CONTROLS, inert

_ACTIVE_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def _active(ch: str) -> bool:
    return ch in BIDI_CONTROLS or unicodedata.category(ch) in _ACTIVE_CATEGORIES


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b]52;c;ZXZpbA==\x07", "\\x1b]52;c;ZXZpbA==\\x07"),  # OSC 52: write the clipboard
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear the screen, cursor home
        ("\x9b2J", "\\x9b2J"),  # C1 CSI
        ("a\x7fb", "a\\x7fb"),
        ("line\nnext\r\tx", "line\\nnext\\r\\tx"),
        ("invoice\u202efdp.exe", "invoice\\u202efdp.exe"),
        ("\u2066x\u2069 \u200e\u200f\u061c", "\\u2066x\\u2069 \\u200e\\u200f\\u061c"),
        ("zero\u200bwidth\u2028sep", "zero\\u200bwidth\\u2028sep"),
        ("[red]x[/red] [link=http://e]y[/link]", "[red]x[/red] [link=http://e]y[/link]"),  # not ours to escape
        ("C:\\temp 写一篇博客 ✓", "C:\\temp 写一篇博客 ✓"),
    ],
)
def test_control_and_bidi_characters_are_shown_escaped(text: str, shown: str) -> None:
    assert inert(text) == shown


def test_length_is_bounded_with_a_marker() -> None:
    out = inert("x" * 10_000, max_chars=100)
    assert out == "x" * 100 + "…[9900 more chars not shown]"
    assert inert("\x1b" * 50, max_chars=10) == "\\x1b\\x1b…[48 more chars not shown]"  # escapes count too
    assert inert(None) == ""


@given(st.text(max_size=300))
def test_the_output_holds_no_control_or_bidi_character(text: str) -> None:
    out = inert(text, max_chars=None)
    assert not any(_active(ch) for ch in out)
    assert not any(_active(ch) for ch in inert(text))


_printable = st.text(
    alphabet=st.characters(exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")), max_size=300
)


@given(_printable)
def test_printable_text_round_trips_unchanged(text: str) -> None:
    assert inert(text, max_chars=None) == text
    assert inert(text, max_chars=len(text)) == text
