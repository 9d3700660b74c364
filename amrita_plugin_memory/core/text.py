"""Small text helpers shared by every layer (one meaning per name)."""

from __future__ import annotations

__all__ = ["cut", "short_error", "single_line"]


def single_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) collapsed to one space."""
    return " ".join(text.split())


def cut(text: str, limit: int) -> str:
    """:func:`single_line`, shortened to at most ``limit`` characters (ending in ``…``)."""
    text = single_line(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_error(exc: BaseException) -> str:
    """``ClassName: first line of the message`` (bounded), for one-line error reports."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{exc.__class__.__name__}: {first[:300]}" if first else exc.__class__.__name__
