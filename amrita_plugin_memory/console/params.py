"""Request values of the admin API, validated like tool arguments.

Query strings, path segments and JSON bodies come from a browser (or anyone
who got past the login) and are treated as hostile, exactly like tool
arguments: the same parsers (:mod:`..tools.args`), the same limits, the same
Chinese messages. A body must be a JSON object with known fields only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import tzinfo
from typing import Any

from ..core.records import IMPORTANCE_LEVELS
from ..ranking.when import Period
from ..storage.keys import normalize_key
from ..tools.args import (
    LIMITS,
    ToolArgError,
    parse_enum,
    parse_int,
    parse_memory_id,
    parse_optional_text,
    parse_tags,
    parse_text,
    parse_user_id,
    parse_window,
)
from ..upkeep.archive.restore import ArchiveRestoreError, parse_row_id
from .errors import bad_request

__all__ = [
    "PAGE_MAX",
    "SEARCH_MAX",
    "MemoryChanges",
    "archive_id",
    "arg",
    "json_body",
    "memory_changes",
    "memory_id",
    "optional_partition",
    "page",
    "partition_key",
    "search_query",
    "uni_id",
    "user_id",
]

PAGE_MAX = 100
"""Rows per page of a console table."""
SEARCH_MAX = 100
"""Deepest result of a semantic search (offset + limit)."""
OFFSET_MAX = 10_000_000
KEY_CHARS = 128
"""Longest partition key accepted (keys are uni_ids, far shorter)."""


def arg(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` of :mod:`..tools.args`; its :class:`ToolArgError` becomes a 400."""
    try:
        return fn(*args, **kwargs)
    except ToolArgError as exc:
        bad_request(str(exc))


def json_body(raw: bytes, allowed: Iterable[str]) -> dict[str, Any]:
    """The request body as a JSON object holding only ``allowed`` fields."""
    if len(raw) > 1_000_000:
        bad_request("请求体过大")
    try:
        body = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, ValueError):
        bad_request("请求体不是合法的 JSON")
    if not isinstance(body, dict):
        bad_request("请求体必须是 JSON 对象")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        bad_request(f"未知字段：{', '.join(str(k)[:32] for k in unknown)}")
    return body


def page(query: Mapping[str, Any], *, default_limit: int = 20) -> tuple[int, int]:
    """``(offset, limit)`` from the query string (limit 1..100)."""
    offset = arg(parse_int, query, "offset", low=0, high=OFFSET_MAX, default=0)
    limit = arg(parse_int, query, "limit", low=1, high=PAGE_MAX, default=default_limit)
    return offset, limit


def window(query: Mapping[str, Any], zone: tzinfo) -> Period | None:
    """``since`` / ``until`` (the owner's local dates, inclusive) as a period, or ``None``."""
    return arg(parse_window, query, zone)


def partition_key(value: Any) -> str:
    """A partition key as stored (any form, a legacy one too), bounded and printable."""
    key = arg(parse_text, {"partition": value}, "partition", max_chars=KEY_CHARS)
    if not key.isprintable():
        bad_request("参数 partition 含有不可见字符")
    return key


def optional_partition(value: Any) -> str | None:
    """A partition filter: ``None`` when absent or blank (every partition)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return partition_key(value)


def archive_id(value: Any) -> str:
    """An archive row id (:func:`..upkeep.archive.restore.parse_row_id`, a 400 if refused)."""
    try:
        return parse_row_id(value)
    except ArchiveRestoreError as exc:
        bad_request(str(exc))


def uni_id(value: Any) -> str:
    """A session uni_id in the installed Amrita's current format (the memo table's keys)."""
    key = arg(parse_text, {"uni_id": value}, "uni_id", max_chars=KEY_CHARS)
    if normalize_key(key) != key:
        bad_request(
            f"uni_id {key[:40]!r} 格式无效：应为当前格式的会话 ID，如 QQPlatform_Private_10001"
        )
    return key


def user_id(value: Any) -> str:
    """A QQ number (a path segment of the persona and user routes)."""
    return arg(parse_user_id, value)


def memory_id(value: Any) -> str:
    return arg(parse_memory_id, {"id": value})


def search_query(value: Any) -> str | None:
    """The semantic search text, or ``None`` when absent or blank (then the list is shown)."""
    return arg(
        parse_optional_text, {"q": value}, "q", max_chars=LIMITS.query_chars, blank_is_absent=True
    )


class MemoryChanges:
    """What a ``PATCH`` of a memory changes (at least one field)."""

    __slots__ = ("content", "importance", "tags")

    def __init__(self, content: str | None, tags: list[str] | None, importance: str | None):
        self.content = content
        self.tags = tags
        self.importance = importance

    @property
    def fields(self) -> str:
        names = ("content", "tags", "importance")
        return ",".join(n for n in names if getattr(self, n) is not None)


def memory_changes(body: Mapping[str, Any]) -> MemoryChanges:
    content = arg(parse_optional_text, body, "content", max_chars=LIMITS.content_chars)
    tags = arg(parse_tags, body)
    importance = arg(parse_enum, body, "importance", IMPORTANCE_LEVELS, None)
    if content is None and tags is None and importance is None:
        bad_request("至少提供 content、tags、importance 之一")
    return MemoryChanges(content, tags, importance)
