"""Member personas (Openmim's L2) as plain data: merging updates and reading the model's answer.

A persona is a short list of ``field: value`` facts about one user id,
across groups. The extraction model answers with JSON
(``{"updates": [{"user", "field", "value", "confidence"}]}``), found the way
:func:`~..core.text.load_model_json` finds it (past a ``<think>`` preamble,
prose or a code fence); everything in that answer is untrusted. :func:`parse_updates` keeps only well-formed
updates about members who spoke in the analysed messages and were asked
about, with enough confidence, and says why it dropped the rest (for a debug
log). :func:`merge_fields` applies them: one value per field, the newest
wins, and the oldest fields go first when the persona outgrows its limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.text import load_model_json, single_line
from .labels import neutralize_labels

__all__ = [
    "FIELD_MAX_CHARS",
    "VALUE_MAX_CHARS",
    "ParsedUpdates",
    "PersonaField",
    "PersonaUpdate",
    "fields_from_json",
    "fields_to_json",
    "merge_fields",
    "parse_updates",
    "persona_chars",
    "render_persona",
]

FIELD_MAX_CHARS = 16
"""A field name is short ("兴趣", "职业/身份"); longer ones are not a field name."""
VALUE_MAX_CHARS = 200
"""A value above this (or one that alone outgrows the persona's limit) is dropped as over-long."""


@dataclass(slots=True)
class PersonaField:
    field: str
    value: str
    updated_at: float


@dataclass(frozen=True, slots=True)
class PersonaUpdate:
    user_id: str
    field: str
    value: str
    confidence: float


@dataclass(slots=True)
class ParsedUpdates:
    """The updates to merge, and one reason per dropped part (debug log only)."""

    updates: list[PersonaUpdate] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def persona_chars(fields: Iterable[PersonaField]) -> int:
    """Size of a persona as shown: ``field：value`` per line."""
    return sum(len(f.field) + len(f.value) + 2 for f in fields)


def merge_fields(
    fields: list[PersonaField],
    updates: Iterable[tuple[str, str]],
    *,
    now: float,
    max_chars: int,
) -> list[PersonaField]:
    """``fields`` with ``(field, value)`` updates applied, cut to ``max_chars``.

    An update replaces the field's value and makes it the newest; the result
    is ordered oldest first, and the oldest fields are dropped while the
    persona is over ``max_chars``.
    """
    merged = {f.field: f for f in sorted(fields, key=lambda f: f.updated_at)}
    for name, value in updates:
        merged.pop(name, None)
        merged[name] = PersonaField(name, value, now)
    out = list(merged.values())
    while out and persona_chars(out) > max_chars:
        out.pop(0)
    return out


def render_persona(label: str, fields: Iterable[PersonaField]) -> str:
    """``label：`` and one ``- field：value`` line per field (the persona block's text).

    Fields and values were extracted from members' messages: a label-like word
    in them is neutralised (:func:`.labels.neutralize_labels`), so a value
    cannot start another member's persona.
    """
    lines = [f"{label}："]
    lines += [f"- {neutralize_labels(f.field)}：{neutralize_labels(f.value)}" for f in fields]
    return "\n".join(lines)


def fields_to_json(fields: Iterable[PersonaField]) -> list[list[Any]]:
    return [[f.field, f.value, f.updated_at] for f in fields]


def fields_from_json(raw: Any) -> list[PersonaField]:
    """Fields as stored; anything malformed is skipped (the column is JSON)."""
    out: list[PersonaField] = []
    if not isinstance(raw, list):
        return out
    for item in raw:
        if (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and isinstance(item[1], str)
            and isinstance(item[2], int | float)
        ):
            out.append(PersonaField(item[0], item[1], float(item[2])))
    return out


def _confidence(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if 0.0 <= number <= 1.0 else None


def parse_updates(
    text: str,
    *,
    labels: Mapping[str, str],
    allowed: Iterable[str],
    min_confidence: float,
    max_persona_chars: int,
) -> ParsedUpdates:
    """The valid updates of the model's answer ``text``.

    ``labels`` maps each label shown to the model to its user id; only updates
    for ids in ``allowed`` (members who spoke in the analysed messages and were
    asked about) are kept. Malformed JSON yields no update at all.
    """
    result = ParsedUpdates()
    try:
        data = load_model_json(text, key="updates")
    except ValueError as exc:
        result.ignored.append(f"not JSON ({exc})")
        return result
    items = data.get("updates") if isinstance(data, dict) else None
    if not isinstance(items, list):
        result.ignored.append('no "updates" list')
        return result
    allowed_ids = set(allowed)
    for index, item in enumerate(items):
        reason = _check_item(item, labels, allowed_ids, min_confidence, max_persona_chars)
        if isinstance(reason, str):
            result.ignored.append(f"updates[{index}]: {reason}")
        else:
            result.updates.append(reason)
    return result


def _check_item(
    item: Any,
    labels: Mapping[str, str],
    allowed: set[str],
    min_confidence: float,
    max_persona_chars: int,
) -> PersonaUpdate | str:
    """The update ``item`` describes, or why it is dropped."""
    if not isinstance(item, dict):
        return "not an object"
    label, name, value = item.get("user"), item.get("field"), item.get("value")
    if not isinstance(label, str) or not isinstance(name, str) or not isinstance(value, str):
        return "user, field and value must be strings"
    user_id = labels.get(label.strip())
    if user_id is None:
        return "unknown label"
    if user_id not in allowed:
        return "member not analysed in this request"
    confidence = _confidence(item.get("confidence"))
    if confidence is None:
        return "confidence must be a number in [0, 1]"
    if confidence < min_confidence:
        return f"confidence {confidence:.2f} below {min_confidence:.2f}"
    name, value = single_line(name), single_line(value)
    if not name or not value:
        return "empty field or value"
    if len(name) > FIELD_MAX_CHARS:
        return f"field name over {FIELD_MAX_CHARS} characters"
    if (
        len(value) > VALUE_MAX_CHARS
        or persona_chars([PersonaField(name, value, 0)]) > max_persona_chars
    ):
        return "value over-long"
    return PersonaUpdate(user_id, name, value, confidence)
