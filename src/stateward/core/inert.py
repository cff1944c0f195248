"""Text from a model (or anything an agent wrote) made inert before a person sees it.

Whatever a terminal, a browser or a rich-text renderer could act on is shown as a visible escape
instead: C0 and C1 control characters and DEL (so no ANSI or OSC sequence can move the cursor, clear
the screen or write the clipboard), bidirectional overrides, embeddings, isolates and marks (so text
cannot be made to read in another order than it is stored), and every other invisible format or
separator character. Printable text, backslashes included, comes out unchanged. The result is
bounded in length and says how much was left out.

Pure: no I/O. Rich markup (``[red]``) is not escaped here, because it is not a character problem:
printers must pass the result as plain text, never as markup.
"""

from __future__ import annotations

import unicodedata

DEFAULT_MAX_CHARS = 500

# Always escaped, whatever their category: the bidirectional controls of Unicode TR9.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
)
# Control, format, surrogate, private use, unassigned, line and paragraph separators.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def needs_escape(ch: str) -> bool:
    """Whether one character is shown escaped rather than as itself."""
    return ch in BIDI_CONTROLS or unicodedata.category(ch) in _ESCAPED_CATEGORIES


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def inert(text: str | None, max_chars: int | None = DEFAULT_MAX_CHARS) -> str:
    """``text`` with every character a renderer could act on shown escaped (``\\x1b``, ``\\u202e``),
    cut to at most about ``max_chars`` characters with a marker naming how much was left out."""
    if text is None:
        return ""
    if text.isascii() and text.isprintable():  # nothing to escape: one character each, cut the same way
        if max_chars is None or len(text) <= max_chars:
            return text
        return f"{text[:max_chars]}…[{len(text) - max_chars} more chars not shown]"
    out: list[str] = []
    length = 0
    for index, ch in enumerate(text):
        piece = _escaped(ch) if needs_escape(ch) else ch
        if max_chars is not None and length + len(piece) > max_chars:
            out.append(f"…[{len(text) - index} more chars not shown]")
            break
        out.append(piece)
        length += len(piece)
    return "".join(out)
