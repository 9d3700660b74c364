"""Tool argument parsing and result shapes, shared by every tool of the plugin.

Every argument comes from an LLM (or a chat user) and is treated as hostile:
wrong types, unknown enum values, empty or oversized text produce a
:class:`ToolArgError` whose Chinese message goes back to the caller, and
:func:`guard_tool_call` turns every expected failure into
``{"ok": false, "error": ...}`` (in the words ``core/errors.WORDS`` gives its kind)
so nothing ever raises into the framework.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import date, tzinfo
from typing import Any

from nonebot import logger

from ..core.calendar import OwnerCalendar, event_span, parse_event_time
from ..core.errors import Described, ErrorKind, PluginError, describe
from ..ranking.when import Period, named_period

__all__ = [
    "LIMITS",
    "Limits",
    "ToolArgError",
    "dump_result",
    "guard_tool_call",
    "log_failure",
    "parse_enum",
    "parse_event_date",
    "parse_int",
    "parse_memory_id",
    "parse_number",
    "parse_optional_id",
    "parse_optional_text",
    "parse_tags",
    "parse_text",
    "parse_user_id",
    "parse_window",
    "period_words",
    "tool_error",
]


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on tool arguments (documented in the README)."""

    content_chars: int = 2000
    query_chars: int = 500
    tags: int = 10
    tag_chars: int = 32
    top_k_max: int = 20
    top_k_default: int = 5
    list_max: int = 50
    list_default: int = 20
    id_chars: int = 64


LIMITS = Limits()


class ToolArgError(PluginError, ValueError):
    """A tool argument is unusable; the message goes back to the model."""

    kind = ErrorKind.INVALID


def parse_optional_text(
    args: Mapping[str, Any], name: str, *, max_chars: int, blank_is_absent: bool = False
) -> str | None:
    """A stripped, bounded, non-empty string, or ``None`` when the argument is absent.

    ``blank_is_absent`` treats ``""`` like a missing argument (for optional
    fields models tend to send empty), instead of refusing it.
    """
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolArgError(f"参数 {name} 必须是字符串")
    value = value.strip()
    if not value:
        if blank_is_absent:
            return None
        raise ToolArgError(f"参数 {name} 不能为空")
    if len(value) > max_chars:
        raise ToolArgError(
            f"参数 {name} 过长（{len(value)} 字，上限 {max_chars} 字），请精简后重试"
        )
    return value


_DATE_CHARS = 40
_EARLIEST = date(1970, 1, 1)
_LATEST = date(9999, 12, 30)


def parse_event_date(args: Mapping[str, Any], name: str = "event_date") -> str | None:
    """An optional event time (``2026-12-01`` / ``2026-12`` / ``2026``) in its stored form."""
    value = parse_optional_text(args, name, max_chars=_DATE_CHARS, blank_is_absent=True)
    if value is None:
        return None
    try:
        return parse_event_time(value)
    except ValueError:
        raise ToolArgError(
            f"参数 {name} 的值 {value!r} 无效，应为 YYYY-MM-DD、YYYY-MM 或 YYYY（本地日期）"
        ) from None


def parse_window(args: Mapping[str, Any], zone: tzinfo) -> Period | None:
    """``since`` / ``until`` (local dates, inclusive; a month or a year covers all its days)
    as a :class:`Period` of the owner's days, or ``None`` when neither is given."""
    spans: dict[str, tuple[date, date]] = {}
    for name in ("since", "until"):
        text = parse_event_date(args, name)
        if text is not None:
            span = event_span(text)
            assert span is not None  # parse_event_date accepted it
            spans[name] = span
    if not spans:
        return None
    first = spans["since"][0] if "since" in spans else _EARLIEST
    last = spans["until"][1] if "until" in spans else _LATEST
    if first > last:
        raise ToolArgError(f"参数 since（{first}）晚于 until（{last}）")
    return Period.of_days(first, last, zone)


def period_words(text: str, calendar: OwnerCalendar) -> tuple[str, str] | None:
    """A period a person typed (``上周``, ``十月份``, ``last week``, ``2026-11``,
    ``2026-11-01..2026-11-30``) as ``since`` / ``until`` local dates; ``None``: not one."""
    text = text.strip()[:_DATE_CHARS]
    if ".." in text:
        first, _, last = text.partition("..")
        since, until = event_span(first.strip()), event_span(last.strip())
        if since is None or until is None or since[0] > until[1]:
            return None
        return since[0].isoformat(), until[1].isoformat()
    if (span := event_span(text)) is not None:
        return span[0].isoformat(), span[1].isoformat()
    named = named_period(text, calendar.now())
    if isinstance(named, Period):
        return named.first.isoformat(), named.last.isoformat()
    return None


def parse_text(args: Mapping[str, Any], name: str, *, max_chars: int) -> str:
    """A required, stripped, bounded, non-empty string."""
    value = parse_optional_text(args, name, max_chars=max_chars)
    if value is None:
        raise ToolArgError(f"缺少参数 {name}")
    return value


def parse_enum(
    args: Mapping[str, Any], name: str, allowed: tuple[str, ...], default: str | None
) -> str | None:
    value = args.get(name, default)
    if value is None or (value == "" and default is None):
        return default
    if not isinstance(value, str) or value.strip().lower() not in allowed:
        raise ToolArgError(f"参数 {name} 的值 {value!r} 无效，允许的取值：{', '.join(allowed)}")
    return value.strip().lower()


def parse_int(args: Mapping[str, Any], name: str, *, low: int, high: int, default: int) -> int:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool):
        raise ToolArgError(f"参数 {name} 必须是整数")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if not isinstance(value, int):
        raise ToolArgError(f"参数 {name} 必须是整数")
    if not low <= value <= high:
        raise ToolArgError(f"参数 {name} 必须在 {low} 到 {high} 之间（收到 {value}）")
    return value


def parse_number(
    args: Mapping[str, Any], name: str, *, low: float, high: float, default: float
) -> float:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ToolArgError(f"参数 {name} 必须是数字") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolArgError(f"参数 {name} 必须是数字")
    if not low <= float(value) <= high:
        raise ToolArgError(f"参数 {name} 必须在 {low} 到 {high} 之间（收到 {value}）")
    return float(value)


def parse_tags(args: Mapping[str, Any], *, required: bool = False) -> list[str] | None:
    value = args.get("tags")
    if value is None:
        return [] if required else None
    if isinstance(value, str):
        # Models often send "a, b" instead of ["a", "b"].
        value = value.replace("，", ",").split(",")
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ToolArgError("参数 tags 必须是字符串数组")
    tags: list[str] = []
    for tag in value:
        tag = tag.strip()
        if not tag or tag in tags:
            continue
        if len(tag) > LIMITS.tag_chars:
            raise ToolArgError(f"标签 {tag[:20]!r}… 过长（上限 {LIMITS.tag_chars} 字）")
        tags.append(tag)
    if len(tags) > LIMITS.tags:
        raise ToolArgError(f"标签过多（{len(tags)} 个，上限 {LIMITS.tags} 个）")
    return tags


def parse_memory_id(args: Mapping[str, Any]) -> str:
    value = args.get("id")
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return parse_text({"id": value}, "id", max_chars=LIMITS.id_chars)


def parse_optional_id(args: Mapping[str, Any], name: str) -> str | None:
    """An optional memory id (``""`` counts as absent: models send empty optional fields)."""
    value = args.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return parse_optional_text({name: value}, name, max_chars=LIMITS.id_chars, blank_is_absent=True)


USER_ID_DIGITS = 20
"""Longest user id accepted (QQ numbers have at most 11 digits today)."""


def parse_user_id(value: object) -> str:
    """A QQ number given by an operator (``--user``, the console's path): digits only."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    text = value.strip() if isinstance(value, str) else ""
    if not text:
        raise ToolArgError("请提供用户的 QQ 号（user_id）")
    if not (text.isascii() and text.isdigit()) or text.startswith("0"):
        raise ToolArgError(f"QQ 号（user_id）{text[:24]!r} 无效：应为不以 0 开头的数字")
    if len(text) > USER_ID_DIGITS:
        raise ToolArgError(f"QQ 号（user_id）过长（{len(text)} 位，最多 {USER_ID_DIGITS} 位）")
    return text


async def guard_tool_call(
    prefix: str, name: str, call: Callable[[], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    """Run a tool body, turning every expected failure into an error result.

    Shared by the surface tools, the ``/memory`` commands and the L3 loop's tools: an
    expected failure (a ``core/errors.PluginError``, or a file error) comes back in the
    words of its kind (``core/errors.WORDS``: bad arguments as they are, service failures
    with a clear "nothing was done"), logged as the table says, so no exception ever
    reaches the framework (or a traceback the chat). A fenced write (the work was
    voided) and an unexpected error propagate.
    """
    try:
        return await call()
    except Exception as exc:
        said = describe(exc)
        if said is None or said.tool is None:
            raise
        log_failure(prefix, name, said)
        return tool_error(said.tool)


def log_failure(prefix: str, name: str, said: Described) -> None:
    """The log line of an expected failure, as ``core/errors.WORDS`` says (if any)."""
    if said.log is not None:
        getattr(logger, said.level)(f"{prefix} {name} {said.log}")


def dump_result(result: Mapping[str, Any]) -> str:
    """Compact JSON, cheap for a model to read."""
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"))


def tool_error(message: str) -> dict[str, Any]:
    """The result of a tool call that did nothing."""
    return {"ok": False, "error": message}
