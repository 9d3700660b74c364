"""Active memory's extraction answer as plain data: what to add, update or archive.

The extraction model sees a batch of one user's messages and the user's
related memories, each behind a short reference (``M1``, ``M2``, …, never a
raw id), and answers with JSON::

    {"memories": [
        {"op": "add", "content": "…", "importance": "low|medium|high", "tags": ["…"]},
        {"op": "update", "ref": "M2", "content": "<the new full text>"},
        {"op": "archive", "ref": "M3"}
    ]}

Models do not answer with that object alone. What is understood (the rule,
in this order; :func:`~..core.text.json_values` finds the JSON):

1. Reasoning is dropped first: ``<think>…</think>`` / ``<thinking>…</thinking>``
   (drafts of the answer inside it are never taken), everything before a lone
   closing tag, everything after an unclosed opening tag.
2. Around the JSON anything may stand: prose before and after, a Markdown
   fence (```` ```json ````), a note, full-width punctuation (``：{…}。``).
3. The answer is the object with a ``"memories"`` key. Without one, a
   top-level list whose items are all objects with an ``"op"`` (``[]`` too)
   is taken as the memories list. Other JSON (an example, a citation
   ``[1]``, an unrelated object) is ignored; an object or list repeated
   verbatim counts once.
4. Malformed: no such object or list, two *different* ones (never guessed
   between), an answer over :data:`~..core.text.MODEL_ANSWER_MAX_CHARS`
   characters, or brackets nested deeper than
   :data:`~..core.text.MODEL_JSON_MAX_DEPTH` (never an exception).

Everything in that answer is untrusted. :func:`parse_memory_ops` keeps only
well-formed operations on references that were shown, at most ``max_ops`` of
them and at most one per reference, and gives one reason per dropped item
(for a debug log; never the text). A malformed answer makes the caller write
nothing and offer the batch again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.calendar import parse_event_time
from ..core.records import IMPORTANCE_LEVELS
from ..core.text import distinct_json, json_values

__all__ = ["OPS", "MemoryOp", "OpLimits", "ParsedOps", "parse_memory_ops", "reference"]

OPS: tuple[str, ...] = ("add", "update", "archive")

OpName = Literal["add", "update", "archive"]


def reference(index: int) -> str:
    """The reference shown to the model for the ``index``-th related memory (0-based)."""
    return f"M{index + 1}"


@dataclass(frozen=True, slots=True)
class OpLimits:
    """Bounds an operation must keep (the same as the chat tools' where they overlap)."""

    max_ops: int
    content_chars: int
    tags: int
    tag_chars: int


@dataclass(frozen=True, slots=True)
class MemoryOp:
    """One valid operation; ``ref`` is set for update and archive."""

    op: OpName
    content: str = ""
    ref: str = ""
    importance: str = "medium"
    tags: tuple[str, ...] = ()
    event_time: str = ""
    """When it happened (``core/calendar.parse_event_time``'s form; ``""``: not given)."""
    replaces: str = ""
    """An ``add`` that is the newer version of a fact shown as this reference (the older
    stays, linked: it answers "before" questions)."""


@dataclass(slots=True)
class ParsedOps:
    """The operations to apply, one reason per dropped item, and whether the answer was malformed."""

    ops: list[MemoryOp] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    malformed: bool = False


def parse_memory_ops(text: str, *, refs: Collection[str], limits: OpLimits) -> ParsedOps:
    """The valid operations of the model's answer ``text`` (see the module docstring).

    ``refs`` are the references that were shown. Items past ``limits.max_ops``
    are dropped whatever they hold, so a runaway answer cannot do more than
    the configured amount of work.
    """
    result = ParsedOps()
    items = _answer(text, result)
    if items is None:
        result.malformed = True
        return result
    used: set[str] = set()
    for index, item in enumerate(items):
        if index >= limits.max_ops:
            result.ignored.append(f"memories[{index}:]: beyond max_ops={limits.max_ops}")
            break
        checked = _check_item(item, refs, used, limits)
        if isinstance(checked, str):
            result.ignored.append(f"memories[{index}]: {checked}")
            continue
        if checked.ref:
            used.add(checked.ref)
        result.ops.append(checked)
    return result


def _is_ops_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, dict) and "op" in i for i in value)


def _answer(text: str, result: ParsedOps) -> list[Any] | None:
    """The memories list of the answer (rule 3 of the module docstring), or ``None`` with the reason."""
    try:
        values = json_values(text)
    except ValueError as exc:
        result.ignored.append(f"malformed: {exc}")
        return None
    answers = distinct_json(
        v["memories"] for v in values if isinstance(v, dict) and "memories" in v
    )
    if not answers:
        answers = distinct_json(v for v in values if _is_ops_list(v))
    if not answers:
        result.ignored.append('malformed: no "memories" list' if values else "malformed: no JSON")
        return None
    if len(answers) > 1:
        result.ignored.append(f"malformed: {len(answers)} different answers")
        return None
    if not isinstance(answers[0], list):
        result.ignored.append('malformed: "memories" is not a list')
        return None
    return answers[0]


def _content(item: Mapping[str, Any], limits: OpLimits) -> str:
    """The stripped ``content`` of ``item``, or an empty string when it is not valid text."""
    value = item.get("content")
    if not isinstance(value, str):
        return ""
    value = value.strip()
    return value if len(value) <= limits.content_chars else ""


def _tags(value: Any, limits: OpLimits) -> tuple[str, ...] | None:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > limits.tags:
        return None
    tags: list[str] = []
    for tag in value:
        if not isinstance(tag, str) or not tag.strip() or len(tag.strip()) > limits.tag_chars:
            return None
        tags.append(tag.strip())
    return tuple(dict.fromkeys(tags))


def _check_item(
    item: Any, refs: Collection[str], used: set[str], limits: OpLimits
) -> MemoryOp | str:
    if not isinstance(item, dict):
        return "not an object"
    op = item.get("op")
    if op not in OPS:
        return "unknown op"
    if op == "add":
        content = _content(item, limits)
        if not content:
            return "content missing, not text, empty or over-long"
        importance = item.get("importance", "medium")
        if importance not in IMPORTANCE_LEVELS:
            return "unknown importance"
        tags = _tags(item.get("tags"), limits)
        if tags is None:
            return "tags not a list of short texts"
        replaces = item.get("replaces")
        if replaces is not None:
            if not isinstance(replaces, str) or replaces.strip() not in refs:
                return "replaces: ref not shown"
            replaces = replaces.strip()
            if replaces in used:
                return "replaces: ref already changed by an earlier op"
            used.add(replaces)
        return MemoryOp(
            "add",
            content=content,
            importance=importance,
            tags=tags,
            event_time=_event(item),
            replaces=replaces or "",
        )
    ref = item.get("ref")
    if not isinstance(ref, str) or ref.strip() not in refs:
        return "ref not shown"
    ref = ref.strip()
    if ref in used:
        return "ref already changed by an earlier op"
    if op == "archive":
        return MemoryOp("archive", ref=ref)
    content = _content(item, limits)
    if not content:
        return "content missing, not text, empty or over-long"
    return MemoryOp("update", content=content, ref=ref, event_time=_event(item))


def _event(item: Mapping[str, Any]) -> str:
    """The item's ``event`` date in its stored form; ``""`` when absent or unreadable (a bad
    date drops the date, never the fact)."""
    value = item.get("event")
    if not isinstance(value, str) or not value.strip() or len(value) > 40:
        return ""
    try:
        return parse_event_time(value)
    except ValueError:
        return ""
