"""The time a question names, and the script it is written in: what picks the ranking's channels.

Pure functions (no storage, no framework). A question that names a time
("在5月2号我买了什么", "我们第一次聊天的时候", "What did Maria do on 7 July,
2023?", "in December 2023") asks about what was said then; every memory carries
the date it was written (``created_at``), so the ranking can prefer memories of
that period (:func:`named_period`, used by ``storage/partition/retrieval.search``).

Recognised, and only these (measured on MemoryBank-CN and LoCoMo, see
docs/retrieval.md): a full date (``2023年5月2日``, ``5月2号`` / ``5月2日``: the
latest such day not after now; ``7 July, 2023``, ``July 7, 2023``,
``8th December, 2023``), a month with its year (``December 2023``, ``2023年12月``),
the days around now (今天 昨天 前天, ``yesterday``), and the first conversation
(我们第一次聊天 / 对话: the day of the partition's oldest memory). Relative
spans ("last week", "上周") and a month without a year are not recognised:
their reference point is unclear ("last week" in a question about a past
conversation means the week before that conversation, not before now).
Days are calendar days of ``now``'s time zone: the ranking passes UTC, the zone of
the stored stamps (and of the dates ``<MEMORIES>`` shows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Literal

__all__ = ["FIRST_CHAT", "Period", "has_cjk", "named_period"]


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a CJK ideograph, kana or hangul (the query's script is "CJK")."""
    return any(
        "\u4e00" <= ch <= "\u9fff"
        or "\u3400" <= ch <= "\u4dbf"
        or "\u3040" <= ch <= "\u30ff"
        or "\uac00" <= ch <= "\ud7af"
        for ch in text
    )


@dataclass(frozen=True, slots=True)
class Period:
    """[start, end) in the owner's zone (interim; the parser branch replaces it)."""

    start: datetime
    end: datetime

    @property
    def first(self) -> date:
        return self.start.date()

    @property
    def last(self) -> date:
        return (self.end - timedelta(microseconds=1)).astimezone(self.start.tzinfo).date()

    def holds(self, moment: datetime) -> bool:
        return self.start <= moment.astimezone(self.start.tzinfo) < self.end

    def holds_day(self, day: date) -> bool:
        return self.first <= day <= self.last

    def overlaps(self, first: date, last: date) -> bool:
        return first <= self.last and self.first <= last

    @classmethod
    def of_days(cls, first: date, last: date, zone: tzinfo) -> Period:
        start = datetime(first.year, first.month, first.day, tzinfo=zone)
        end = datetime(last.year, last.month, last.day, tzinfo=zone) + timedelta(days=1)
        return cls(start, end)


FIRST_CHAT = "first chat"
"""What :func:`named_period` returns for "our first conversation": the caller knows
the partition's oldest memory, this module does not."""

_MONTHS = {
    name: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_EN_DAY_FIRST = re.compile(rf"\b{_DAY}\s+{_MONTH},?\s*{_YEAR}\b", re.IGNORECASE)
_EN_MONTH_FIRST = re.compile(rf"\b{_MONTH}\s+{_DAY},?\s*{_YEAR}\b", re.IGNORECASE)
_EN_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE)
_EN_YESTERDAY = re.compile(r"\byesterday\b", re.IGNORECASE)
_ZH_DATE = re.compile(
    r"(?:(?P<year>(?:19|20)\d\d)\s*年\s*)?(?P<month>\d{1,2})\s*月\s*(?P<day>\d{1,2})\s*[日号號]"
)
_ZH_MONTH_YEAR = re.compile(r"(?P<year>(?:19|20)\d\d)\s*年\s*(?P<month>\d{1,2})\s*月(?!\s*\d)")
_ZH_DAYS_AGO = {"今天": 0, "昨天": 1, "前天": 2}
_ZH_FIRST_CHAT = re.compile(r"第一次(?:和你)?(?:对话|聊天|聊|交谈|说话)")


_ZONE: list[tzinfo] = []


def _p(first: date, last: date) -> Period:
    return Period.of_days(first, last, _ZONE[0])


def _day(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _month_span(year: int, month: int) -> Period | None:
    if not 1 <= month <= 12:
        return None
    first = date(year, month, 1)
    following = date(year + month // 12, month % 12 + 1, 1)
    return _p(first, following - timedelta(days=1))


def _zh_period(text: str, today: date) -> Period | str | None:
    if m := _ZH_DATE.search(text):
        month, day = int(m["month"]), int(m["day"])
        if m["year"]:
            found = _day(int(m["year"]), month, day)
        else:  # the latest such day not after today
            found = _day(today.year, month, day)
            if found is not None and found > today:
                found = _day(today.year - 1, month, day)
        return _p(found, found) if found is not None else None
    if m := _ZH_MONTH_YEAR.search(text):
        return _month_span(int(m["year"]), int(m["month"]))
    if _ZH_FIRST_CHAT.search(text):
        return FIRST_CHAT
    for word, ago in _ZH_DAYS_AGO.items():
        if word in text:
            day = today - timedelta(days=ago)
            return _p(day, day)
    return None


def _en_period(text: str, today: date) -> Period | None:
    for pattern in (_EN_DAY_FIRST, _EN_MONTH_FIRST):
        if m := pattern.search(text):
            found = _day(int(m["year"]), _MONTHS[m["month"].lower()], int(m["day"]))
            if found is not None:
                return _p(found, found)
    if m := _EN_MONTH_YEAR.search(text):
        return _month_span(int(m["year"]), _MONTHS[m["month"].lower()])
    if _EN_YESTERDAY.search(text):
        day = today - timedelta(days=1)
        return _p(day, day)
    return None


def named_period(text: str, now: datetime) -> Period | str | None:
    """The days ``text`` names (:class:`Period`), :data:`FIRST_CHAT`, or ``None``."""
    today = now.date()
    _ZONE[:] = [now.tzinfo or UTC]
    if has_cjk(text):
        return _zh_period(text, today) or _en_period(text, today)
    return _en_period(text, today)


def tense(text: str) -> Literal["now", "before"] | None:
    """Interim (the parser branch replaces it)."""
    if any(w in text for w in ("以前", "之前", "原来", "过去", "曾经")) or "before" in text:
        return "before"
    if any(w in text for w in ("现在", "目前", "如今")) or "now" in text:
        return "now"
    return None
