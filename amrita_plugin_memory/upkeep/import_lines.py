"""An import file read and checked, every line, before anything is written.

``ambot memory import FILE`` (and the admin API's ``POST /api/memory/import``) take
memories from elsewhere: JSON Lines, one memory a line::

    {"user_id": "12345", "content": "…", "created_at": "2023-05-08T13:56:00+08:00"}

with optional ``event_time`` (``core/calendar.parse_event_time``), ``tags``, ``importance``,
``scope`` (``user``; ``group`` with ``group_id``), ``group_id``, ``origin`` (``private`` or
``group:<id>``) and ``source`` (``""`` or ``auto``). The file ``ambot memory export``
writes (one JSON document, ``upkeep/users/user_data.EXPORT_FORMAT``) is recognised and
read as the same lines: its ``memories`` and ``group_memories`` (the archive is not
imported: it holds what was deleted or replaced).

The file is hostile until checked: a line that is not a JSON object, a field of the wrong
type, an unknown field or value, a date that cannot be read, a group scope without its
group, an origin of another group, a line or a file over its bound: every bad line is
named (line number and field, in Chinese) in one :class:`ImportFileError` and nothing is
written. A ``created_at`` without a zone offset is a time of the owner's zone
(``[memory] timezone``, :class:`~..core.calendar.OwnerCalendar`); it is stored as aware
UTC ISO. Partition keys are made by ``storage/keys`` from the ids, in the installed
Amrita's format.

Each line gets a fixed memory id derived from what it says (the partition's kind and id,
the origin, the text and the instant of ``created_at``): importing the same file again
finds every id stored already and adds nothing (``MemoryStore.write``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..core.calendar import OwnerCalendar, parse_event_time
from ..core.errors import ErrorKind, PluginError
from ..core.records import IMPORTANCE_LEVELS, ORIGIN_PRIVATE, SOURCE_AUTO, origin_of_group
from ..core.writes import NewMemory
from ..storage.keys import group_key, parse_key, user_key
from .users.user_data import EXPORT_FORMAT

__all__ = [
    "CONTENT_CHARS",
    "FILE_BYTES",
    "LINE_BYTES",
    "MAX_LINES",
    "ImportFileError",
    "ImportLine",
    "is_export_document",
    "parse_items",
    "parse_lines",
]

FILE_BYTES = 32 * 1024 * 1024
"""Largest import file (32 MiB; an export document too)."""
LINE_BYTES = 64 * 1024
"""Longest line of a JSON Lines file (64 KiB, UTF-8)."""
MAX_LINES = 100_000
"""Most memories in one file (the highest ``per_session_memory_limit``)."""
CONTENT_CHARS = 2000
"""Longest memory text (as ``write_memory`` allows)."""
TAG_CHARS = 32
MAX_TAGS = 10
ID_DIGITS = 20
SHOWN_ERRORS = 20
"""Bad lines named in the error (the count says how many there are in all)."""
CLOCK_SKEW = timedelta(minutes=5)
"""How far in the future a ``created_at`` may be (another machine's clock)."""
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)

FIELDS = frozenset(
    {
        "user_id",
        "content",
        "created_at",
        "event_time",
        "tags",
        "importance",
        "scope",
        "group_id",
        "origin",
        "source",
    }
)


class ImportFileError(PluginError, ValueError):
    """The file (or a request's lines) cannot be imported; nothing was written."""

    kind = ErrorKind.INVALID


@dataclass(frozen=True, slots=True)
class ImportLine:
    """One checked memory of the file, ready to write (its fixed id included)."""

    line: int
    """Its line in the file (1-based); in an export document, its position among the
    document's memories and group memories."""
    user_id: str
    group_id: str | None
    memory: NewMemory

    def to_json(self) -> dict[str, Any]:
        """The line again, in the file's form (with ``line``; ``created_at`` in UTC): what
        ``ambot memory import`` sends a running bot."""
        m = self.memory
        out: dict[str, Any] = {
            "line": self.line,
            "user_id": self.user_id,
            "content": m.content,
            "created_at": m.created_at,
            "tags": list(m.tags),
            "importance": m.importance,
            "scope": m.scope,
            "origin": m.origin,
        }
        if self.group_id is not None:
            out["group_id"] = self.group_id
        if m.event_time:
            out["event_time"] = m.event_time
        if m.source:
            out["source"] = m.source
        return out


class _Bad(PluginError, ValueError):
    """One field of one line is unusable (collected into :class:`ImportFileError`)."""

    kind = ErrorKind.INVALID


def _digits(value: Any, name: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise _Bad(f"{name} 必须是 QQ 号/群号（数字字符串）")
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or text.startswith("0"):
        raise _Bad(f"{name} {text[:24]!r} 无效：应为不以 0 开头的数字")
    if len(text) > ID_DIGITS:
        raise _Bad(f"{name} 过长（{len(text)} 位，最多 {ID_DIGITS} 位）")
    return text


def _choice(obj: Mapping[str, Any], name: str, allowed: Sequence[str], default: str) -> str:
    value = obj.get(name)
    if value is None:
        return default
    if not isinstance(value, str) or value not in allowed:
        shown = repr(value)[:24]
        raise _Bad(f"{name} {shown} 无效：应为 {' / '.join(a or '空' for a in allowed)}")
    return value


def _content(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Bad("content 必须是非空字符串")
    text = value.strip()
    if len(text) > CONTENT_CHARS:
        raise _Bad(f"content 过长（{len(text)} 字，上限 {CONTENT_CHARS} 字）")
    return text


def _tags(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise _Bad("tags 必须是字符串数组")
    tags: list[str] = []
    for raw in value:
        tag = raw.strip()
        if len(tag) > TAG_CHARS:
            raise _Bad(f"tags 中的 {tag[:20]!r}… 过长（上限 {TAG_CHARS} 字）")
        if tag and tag not in tags:
            tags.append(tag)
    if len(tags) > MAX_TAGS:
        raise _Bad(f"tags 过多（{len(tags)} 个，上限 {MAX_TAGS} 个）")
    return tags


def _created_at(value: Any, calendar: OwnerCalendar) -> str:
    """Aware UTC ISO; a stamp without an offset is a time of the owner's zone."""
    if not isinstance(value, str) or not value.strip():
        raise _Bad("缺少 created_at（ISO 8601 时间，如 2023-05-08T13:56:00+08:00）")
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise _Bad(f"created_at {value[:40]!r} 不是 ISO 8601 时间") from None
    if moment.tzinfo is None:  # a wall time of the owner's zone (its rules, DST included)
        moment = moment.replace(tzinfo=calendar.zone)
    moment = moment.astimezone(UTC)
    if moment < EARLIEST:
        raise _Bad(f"created_at {value[:40]!r} 早于 1970 年")
    if moment > calendar.clock() + CLOCK_SKEW:
        raise _Bad(f"created_at {value[:40]!r} 在未来")
    return moment.isoformat()


def _event_time(value: Any) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise _Bad("event_time 必须是字符串（YYYY-MM-DD、YYYY-MM 或 YYYY）")
    try:
        return parse_event_time(value)
    except ValueError as exc:
        raise _Bad(str(exc)) from None


def _origin(obj: Mapping[str, Any], scope: str, group_id: str | None) -> str:
    """``private`` / ``group:<id>``, agreeing with ``group_id`` (a group memory's is its own)."""
    value = obj.get("origin")
    if value is None:
        return origin_of_group(group_id) if group_id is not None else ORIGIN_PRIVATE
    if not isinstance(value, str):
        raise _Bad("origin 必须是字符串（private 或 group:<群号>）")
    if value == ORIGIN_PRIVATE:
        if scope == "group":
            raise _Bad(f"origin 为 private，而 scope 为 group（群 {group_id} 的记忆写于该群）")
        if group_id is not None:
            raise _Bad(f"origin 为 private，与 group_id {group_id} 不符")
        return value
    prefix, _, gid = value.partition(":")
    if prefix != "group" or not gid:
        raise _Bad(f"origin {value[:40]!r} 无效：应为 private 或 group:<群号>")
    gid = _digits(gid, "origin 中的群号")
    if group_id is not None and gid != group_id:
        raise _Bad(f"origin {value[:40]!r} 与 group_id {group_id} 不符")
    return origin_of_group(gid)


def _memory_id(kind: str, owner: str, origin: str, content: str, created_at: str) -> str:
    """The fixed id of an imported memory: the same line always gets the same id.

    The partition enters as its kind and id, not its key, so a later change of
    Amrita's key format (``upkeep/rekey``) does not make an old file new again.
    """
    said = json.dumps([kind, owner, origin, content, created_at], ensure_ascii=False)
    return hashlib.sha256(said.encode("utf-8")).hexdigest()[:32]


def _line(obj: Any, number: int, calendar: OwnerCalendar) -> ImportLine:
    if not isinstance(obj, dict):
        raise _Bad("应为 JSON 对象")
    unknown = sorted(str(k)[:32] for k in obj if k not in FIELDS)
    if unknown:
        raise _Bad(f"未知字段 {', '.join(unknown[:5])}")
    user_id = _digits(obj.get("user_id"), "user_id")
    content = _content(obj.get("content"))
    created_at = _created_at(obj.get("created_at"), calendar)
    scope = _choice(obj, "scope", ("user", "group"), "user")
    group_id = None if obj.get("group_id") is None else _digits(obj["group_id"], "group_id")
    if scope == "group" and group_id is None:
        raise _Bad("scope 为 group 时必须给出 group_id")
    origin = _origin(obj, scope, group_id)
    owner = group_id if scope == "group" and group_id is not None else user_id
    memory = NewMemory(
        partition=group_key(owner) if scope == "group" else user_key(owner),
        scope=scope,
        content=content,
        tags=_tags(obj.get("tags")),
        importance=_choice(obj, "importance", IMPORTANCE_LEVELS, "medium"),
        origin=origin,
        source=_choice(obj, "source", ("", SOURCE_AUTO), ""),
        # A group memory records who wrote it (their export lists it, their forget unmarks it).
        author=user_id if scope == "group" else "",
        event_time=_event_time(obj.get("event_time")),
        created_at=created_at,
        memory_id=_memory_id(scope, owner, origin, content, created_at),
    )
    return ImportLine(number, user_id, group_id, memory)


def _checked(
    items: Sequence[tuple[int, Any]],
    calendar: OwnerCalendar,
    unit: str,
    unreadable: Sequence[tuple[int, str]] = (),
) -> list[ImportLine]:
    """Every item checked; the bad ones (and the ``unreadable`` lines) named together, in
    the file's order (:class:`ImportFileError`)."""
    lines: list[ImportLine] = []
    bad = list(unreadable)
    for number, obj in items:
        try:
            lines.append(_line(obj, number, calendar))
        except _Bad as exc:
            bad.append((number, str(exc)))
    if bad:
        _refuse([f"第 {n} {unit}：{said}" for n, said in sorted(bad)], unit)
    if not lines:
        raise ImportFileError("导入文件中没有任何记忆")
    return lines


def _refuse(bad: list[str], unit: str) -> None:
    shown = "\n  ".join(bad[:SHOWN_ERRORS])
    more = f"\n  ……另有 {len(bad) - SHOWN_ERRORS} {unit}有误" if len(bad) > SHOWN_ERRORS else ""
    raise ImportFileError(f"导入文件有 {len(bad)} {unit}无效，未写入任何记忆：\n  {shown}{more}")


def _json_lines(raw: bytes) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """The lines read as JSON, and those that cannot be (number, why)."""
    items: list[tuple[int, Any]] = []
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if len(line) > LINE_BYTES:
            bad.append((number, f"过长（{len(line)} 字节，上限 {LINE_BYTES} 字节）"))
            continue
        if not line.strip():
            continue
        try:
            items.append((number, json.loads(line.decode("utf-8"))))
        except UnicodeDecodeError:
            bad.append((number, "不是 UTF-8 文本"))
        except ValueError:
            bad.append((number, "不是合法的 JSON"))
    return items, bad


def _export_items(document: Mapping[str, Any]) -> list[tuple[int, Any]]:
    """The memories of an ``ambot memory export`` document as lines of the file's form."""
    user_id = document.get("user_id")
    items: list[tuple[int, Any]] = []
    for key, scope in (("memories", "user"), ("group_memories", "group")):
        rows = document.get(key) or []
        if not isinstance(rows, list):
            raise ImportFileError(f"导出文件的 {key} 应为数组")
        for row in rows:
            number = len(items) + 1
            if not isinstance(row, dict):
                items.append((number, row))  # refused with its number
                continue
            line: dict[str, Any] = {"user_id": user_id, "scope": scope}
            for name in ("content", "created_at", "event_time", "tags", "importance", "origin"):
                if name in row:
                    line[name] = row[name]
            line["source"] = row.get("source") or ""
            if scope == "group":
                parsed = _group_of(row.get("partition"))
                if parsed is not None:
                    line["group_id"] = parsed
            items.append((number, line))
    return items


def _group_of(partition: Any) -> str | None:
    """The group id of an exported group memory's partition key (any known key form)."""
    if not isinstance(partition, str) or len(partition) > 128:
        return None
    try:
        parsed = parse_key(partition)
    except Exception:  # not a uni_id
        return None
    return str(parsed[1]) if parsed is not None and parsed[0] == "group" else None


def parse_lines(text: str | bytes, calendar: OwnerCalendar) -> list[ImportLine]:
    """Every memory of an import file (JSON Lines, or an ``ambot memory export``
    document), checked; raises :class:`ImportFileError` naming every bad line.

    ``calendar`` is the owner's (``MemoryRuntime.calendar``): the zone of a
    ``created_at`` without an offset, and now.
    """
    raw = text.encode("utf-8") if isinstance(text, str) else text
    if len(raw) > FILE_BYTES:
        raise ImportFileError(f"导入文件过大（{len(raw)} 字节，上限 {FILE_BYTES} 字节）")
    document = _whole_document(raw)
    unreadable: list[tuple[int, str]] = []
    if document is not None:
        if document.get("user_id") is None:
            raise ImportFileError("导出文件缺少 user_id")
        items, unit = _export_items(document), "条"
    else:
        (items, unreadable), unit = _json_lines(raw), "行"
    if len(items) + len(unreadable) > MAX_LINES:
        count = len(items) + len(unreadable)
        raise ImportFileError(f"导入文件的记忆过多（{count} 条，上限 {MAX_LINES} 条）")
    return _checked(items, calendar, unit, unreadable)


def _whole_document(raw: bytes) -> dict[str, Any] | None:
    """The export document, if the file is one (a JSON Lines file never carries its format)."""
    head = raw.lstrip()[:1]
    if head != b"{":
        return None
    try:
        document = json.loads(raw.decode("utf-8"))
    except ValueError:  # several lines, or not JSON at all: read line by line
        return None
    if isinstance(document, dict) and document.get("format") == EXPORT_FORMAT:
        return document
    return None


def is_export_document(raw: bytes) -> bool:
    """Whether an import file is an ``ambot memory export`` document (its report counts
    items, not lines)."""
    return _whole_document(raw) is not None


def parse_items(items: Any, calendar: OwnerCalendar, *, most: int) -> list[ImportLine]:
    """Lines sent by ``ambot memory import`` to a running bot (:meth:`ImportLine.to_json`):
    at most ``most``, each with its ``line`` number; checked like a file's lines."""
    if not isinstance(items, list) or not items:
        raise ImportFileError("lines 必须是非空数组")
    if len(items) > most:
        raise ImportFileError(f"一次最多导入 {most} 条（收到 {len(items)} 条）")
    numbered: list[tuple[int, Any]] = []
    for position, item in enumerate(items, start=1):
        number = item.get("line") if isinstance(item, dict) else None
        if not isinstance(number, int) or isinstance(number, bool) or not 0 < number <= MAX_LINES:
            number = position
        body = {k: v for k, v in item.items() if k != "line"} if isinstance(item, dict) else item
        numbered.append((number, body))
    return _checked(numbered, calendar, "行")
