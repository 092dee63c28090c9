"""Text from a submission, made safe to write and to show.

A submission chooses its answer's messages, its integrity data and its folder's name. None of
that may break the report or speak to the instructor's terminal: a lone surrogate (from JSON's
``"\\ud800"`` or a folder name that is not UTF-8) cannot be encoded, and would cut a file short;
an ANSI escape sequence or a carriage return printed raw can erase a warning and print fake
totals. ``clean`` makes a string encodable; ``shown`` also escapes every character that is not
printable (control characters, ANSI escapes, bidirectional overrides, line breaks), in the
report, the feedback and on the terminal alike.
"""

from __future__ import annotations


def clean(text: object) -> str:
    """``text`` as a str that encodes to UTF-8: lone surrogates become ``\\udcff``-style escapes."""
    text = text if isinstance(text, str) else str(text)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown(text: object) -> str:
    """``clean(text)`` with every non-printable character escaped (``\\x1b``, ``\\n``, ``\\u202e``)."""
    text = clean(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
