"""Small text helpers shared by every layer (one meaning per name)."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["cut", "load_model_json", "short_error", "single_line"]

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL | re.IGNORECASE)


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


def load_model_json(text: str) -> Any:
    """The JSON a model answered, also when it wrapped it in a Markdown code fence.

    Raises ``ValueError`` (``json.JSONDecodeError``) when it is not JSON.
    """
    fenced = _FENCE.match(text)
    return json.loads(fenced.group(1) if fenced else text)
