"""Small text helpers shared by every layer (one meaning per name)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from .errors import ErrorKind, PluginError

__all__ = [
    "MODEL_ANSWER_MAX_CHARS",
    "MODEL_JSON_MAX_DEPTH",
    "ModelJSONError",
    "cut",
    "distinct_json",
    "json_values",
    "load_model_json",
    "short_error",
    "single_line",
    "strip_reasoning",
]


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


# ---------------------------------------------------------------------------
# JSON in a model's answer
# ---------------------------------------------------------------------------

MODEL_ANSWER_MAX_CHARS = 200_000
"""A longer answer is not read at all (the JSON answers asked for are a few thousand characters)."""
MODEL_JSON_MAX_DEPTH = 64
"""Brackets nested deeper than this make the answer malformed (the answers asked for nest 3 deep)."""
_FAILED_WORK_FACTOR = 4
"""``{`` / ``[`` that start no JSON value are tried while the characters read by those
failed attempts stay within this many times the answer's length (a bound on the work)."""

# Possessive runs of spaces: "<" + thousands of spaces cost every split of the run.
_REASONING_TAG = re.compile(r"<\s*+(/?)\s*+think(?:ing)?\s*+>", re.IGNORECASE)
_JSON_START = re.compile(r"[\[{]")
_BRACKET = re.compile(r"[\[\]{}]")
_DECODER = json.JSONDecoder()


class ModelJSONError(PluginError, ValueError):
    """The answer holds no usable JSON; the message says why, never quoting the answer."""

    kind = ErrorKind.INVALID


def strip_reasoning(text: str) -> str:
    """``text`` without the reasoning a model wrote before its answer.

    Reasoning models (DeepSeek-R1, Qwen3 in thinking mode, many local models)
    put their thoughts, drafts included, in ``<think>…</think>`` (or
    ``<thinking>``); some chat templates send only the closing tag. Everything
    up to the **last** closing tag is dropped, and an opening tag left without
    one (an unclosed think) hides everything after it.
    """
    closing = [m for m in _REASONING_TAG.finditer(text) if m.group(1)]
    if closing:
        text = text[closing[-1].end() :]
    opening = _REASONING_TAG.search(text)
    return text[: opening.start()] if opening else text


def _too_deep(text: str) -> bool:
    """Whether brackets (strings not told apart) ever nest deeper than the bound."""
    depth = 0
    for match in _BRACKET.finditer(text):
        if match.group() in "[{":
            depth += 1
            if depth > MODEL_JSON_MAX_DEPTH:
                return True
        elif depth:
            depth -= 1
    return False


def json_values(text: str) -> list[Any]:
    """Every JSON object or array in a model's answer, outside its reasoning, in order.

    Whatever surrounds them is skipped: prose before and after, a Markdown
    code fence, a note, full-width punctuation (``：{…}。``). A value inside
    another is not listed again. Raises :class:`ModelJSONError` for an answer
    over :data:`MODEL_ANSWER_MAX_CHARS` or nested deeper than
    :data:`MODEL_JSON_MAX_DEPTH` (never ``RecursionError``).
    """
    if len(text) > MODEL_ANSWER_MAX_CHARS:
        raise ModelJSONError(f"answer over {MODEL_ANSWER_MAX_CHARS} characters")
    body = strip_reasoning(text)
    if _too_deep(body):
        raise ModelJSONError(f"brackets nested deeper than {MODEL_JSON_MAX_DEPTH}")
    values: list[Any] = []
    position, budget = 0, _FAILED_WORK_FACTOR * max(len(body), 1_000)
    while (start := _JSON_START.search(body, position)) is not None:
        try:
            value, position = _DECODER.raw_decode(body, start.start())
        except json.JSONDecodeError as exc:
            budget -= exc.pos - start.start() + 1
        except RecursionError:  # nesting the bracket count above could not see (in strings)
            budget -= len(body) - start.start()
        else:
            values.append(value)
            continue
        if budget < 0:
            raise ModelJSONError("too much text that starts JSON and breaks off")
        position = start.start() + 1
    return values


def distinct_json(values: Iterable[Any]) -> list[Any]:
    """``values`` without repeats (equal JSON, key order aside), first occurrence first."""
    seen: set[str] = set()
    out: list[Any] = []
    for value in values:
        canonical = json.dumps(value, sort_keys=True, ensure_ascii=False)
        if canonical not in seen:
            seen.add(canonical)
            out.append(value)
    return out


def load_model_json(text: str, *, key: str | None = None) -> Any:
    """The JSON a model answered, found in whatever it wrapped it in (see :func:`json_values`).

    With ``key``, the object holding that key is the answer even when the text
    holds other JSON too (an example in prose, a citation ``[1]``). Otherwise,
    or when no object holds it, the answer must hold exactly one JSON value
    (repeats of the same value count once), which is returned for the caller
    to judge. Two *different* candidates are never guessed between: that
    raises :class:`ModelJSONError` (a ``ValueError``), as does an answer with
    no JSON at all.
    """
    values = json_values(text)
    if key is not None:
        keyed = distinct_json(v for v in values if isinstance(v, dict) and key in v)
        if len(keyed) == 1:
            return keyed[0]
        if keyed:
            raise ModelJSONError(f'{len(keyed)} different objects with "{key}"')
    found = distinct_json(values)
    if not found:
        raise ModelJSONError("no JSON object or array outside the reasoning")
    if len(found) > 1:
        raise ModelJSONError(f"{len(found)} different JSON values and none is the answer")
    return found[0]
