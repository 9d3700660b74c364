"""Periods of the owner's local time, and the arithmetic both languages' parsers share.

A :class:`Period` is a half-open span of aware moments in the zone of the
``now`` it was computed from (the owner's local zone): whole local days for
"昨天" / "last week", a few hours for "昨天晚上" / "last night" / "刚才".
:class:`Anchor` turns "N days back", "the previous week", "the latest October
not in the future" into periods, relative to the moment a message was sent.
Weeks start on Monday. A span that starts after now is a future period: the
anchor gives ``None`` for it (a question about the future names no past
messages); a span that reaches past today is cut at the end of today.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from enum import Enum

__all__ = [
    "FIRST_CHAT",
    "LAST_CHAT",
    "PARTS",
    "Anchor",
    "Miss",
    "Named",
    "Period",
    "Rule",
    "joined",
    "scan",
]

FIRST_CHAT = "first chat"
"""A question about "our first conversation": the caller knows the partition's oldest memory."""

LAST_CHAT = "last chat"
"""A question about "the last time we talked" (上次聊天): the caller knows the latest one."""

_TICK = timedelta(microseconds=1)
_DAY = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Period:
    """Moments ``start`` (inclusive) … ``end`` (exclusive), aware, in ``now``'s zone."""

    start: datetime
    end: datetime

    @property
    def first(self) -> date:
        """The first local day the period touches."""
        return self.start.date()

    @property
    def last(self) -> date:
        """The last local day the period touches (inclusive)."""
        return (self.end - _TICK).date()

    def holds(self, moment: datetime) -> bool:
        """Whether the aware ``moment`` falls within ``[start, end)``."""
        local = moment.astimezone(self.start.tzinfo)
        return self.start <= local < self.end

    def holds_day(self, day: date) -> bool:
        """Whether the local ``day`` is one of the period's days."""
        return self.first <= day <= self.last

    def overlaps(self, first: date, last: date) -> bool:
        """Whether the days ``first`` … ``last`` (an event time's span) share a day with it."""
        return first <= self.last and last >= self.first

    @classmethod
    def of_days(cls, first: date, last: date, zone: tzinfo) -> Period:
        """The whole local days ``first`` … ``last`` of ``zone``."""
        return cls(_midnight(first, zone), _midnight(last + _DAY, zone))


def _midnight(day: date, zone: tzinfo | None) -> datetime:
    return datetime.combine(day, time(), zone)


PARTS: dict[str, tuple[int, int]] = {
    "dawn": (0, 5),  # 凌晨 半夜 深夜
    "early": (5, 9),  # 早上 早晨 清晨 今早
    "morning": (5, 12),  # 上午, "morning"
    "noon": (11, 14),  # 中午, "noon"
    "afternoon": (12, 18),  # 下午
    "dusk": (17, 19),  # 傍晚
    "evening": (18, 24),  # 晚上 夜里 昨晚, "evening" / "night"
}
"""Parts of a day (local hours, end exclusive; 24 is the next midnight). They overlap on
purpose: a word covers the hours people use it for, not a partition of the clock."""


def _shift_month(year: int, month: int, back: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) - back
    return index // 12, index % 12 + 1


def _month_end(year: int, month: int) -> date:
    following_year, following = _shift_month(year, month, -1)
    return date(following_year, following, 1) - _DAY


@dataclass(frozen=True, slots=True)
class Anchor:
    """``now`` (the owner's aware local moment) and the periods counted back from it."""

    now: datetime

    @property
    def today(self) -> date:
        return self.now.date()

    @property
    def zone(self) -> tzinfo:
        return self.now.tzinfo or UTC

    def days(self, first: date, last: date) -> Period | None:
        """Whole days ``first`` … ``last``, cut at today; ``None`` when it starts after today."""
        if first > self.today or last < first:
            return None
        return Period.of_days(first, min(last, self.today), self.zone)

    def day(self, back: int) -> Period | None:
        """The day ``back`` days before today (0: today)."""
        if not 0 <= back <= 36_500:
            return None
        day = self.today - timedelta(days=back)
        return self.days(day, day)

    def back_span(self, nearest: int, farthest: int) -> Period | None:
        """The days ``farthest`` … ``nearest`` days back ("前几天": 2 … 6)."""
        return self.days(
            self.today - timedelta(days=farthest), self.today - timedelta(days=nearest)
        )

    def recent(self, count: int) -> Period | None:
        """The last ``count`` days, today included."""
        if not 1 <= count <= 36_500:
            return None
        return self.back_span(0, count - 1)

    def monday(self, back: int) -> date:
        """The Monday of the week ``back`` weeks before this one."""
        return self.today - timedelta(days=self.today.weekday() + 7 * back)

    def week(self, back: int) -> Period | None:
        """Monday … Sunday of the week ``back`` weeks before this one (0: this week so far)."""
        if not 0 <= back <= 5_000:
            return None
        monday = self.monday(back)
        return self.days(monday, monday + timedelta(days=6))

    def weekend(self, back: int | None) -> Period | None:
        """Saturday and Sunday of the week ``back`` weeks before this one; ``None``: the
        latest weekend that has begun (this one on a Saturday or Sunday, else last week's)."""
        if back is None:
            back = 0 if self.today.weekday() >= 5 else 1
        saturday = self.monday(back) + timedelta(days=5)
        return self.days(saturday, saturday + _DAY)

    def weekday(self, weekday: int, back: int | None, *, before_today: bool = False) -> date:
        """Weekday ``weekday`` (0 = Monday) of the week ``back`` weeks back; ``None``: the
        latest one not after today (``before_today``: strictly before it)."""
        if back is not None:
            return self.monday(back) + timedelta(days=weekday)
        gap = (self.today.weekday() - weekday) % 7
        if gap == 0 and before_today:
            gap = 7
        return self.today - timedelta(days=gap)

    def month(self, year: int, month: int) -> Period | None:
        """A calendar month (so far, when it is this month)."""
        if not 1 <= month <= 12 or not 1 <= year <= 9998:
            return None
        return self.days(date(year, month, 1), _month_end(year, month))

    def month_back(self, back: int) -> Period | None:
        """The calendar month ``back`` months before this one (0: this month so far)."""
        if not 0 <= back <= 12_000:
            return None
        return self.month(*_shift_month(self.today.year, self.today.month, back))

    def latest_month(self, month: int, *, before_this: bool = False) -> Period | None:
        """The latest ``month`` not in the future ("十月份", "in October"); ``before_this``:
        strictly before this month ("last October" in October is a year ago)."""
        if not 1 <= month <= 12:
            return None
        year = self.today.year
        if month > self.today.month or (before_this and month == self.today.month):
            year -= 1
        return self.month(year, month)

    def year(self, year: int) -> Period | None:
        """A calendar year (so far, when it is this year)."""
        if not 1 <= year <= 9998:
            return None
        return self.days(date(year, 1, 1), date(year, 12, 31))

    def calendar_day(self, year: int | None, month: int, day: int) -> date | None:
        """The day ``year-month-day``; no year: the latest such day not after today (a
        29 February goes back to the last leap year). ``None`` for no such day."""
        if year is not None:
            try:
                return date(year, month, day)
            except ValueError:
                return None
        for candidate in range(self.today.year, self.today.year - 9, -1):
            try:
                found = date(candidate, month, day)
            except ValueError:
                continue
            if found <= self.today:
                return found
        return None

    def hours(self, day: date, part: str) -> Period | None:
        """The hours of ``part`` (:data:`PARTS`) on ``day``; ``None`` when they start after now."""
        begin, end = PARTS[part]
        zone = self.zone
        start = datetime.combine(day, time(begin), zone)
        if start > self.now:
            return None
        stop = _midnight(day + _DAY, zone) if end == 24 else datetime.combine(day, time(end), zone)
        return Period(start, stop)

    def part_alone(self, part: str) -> Period | None:
        """``part`` said without a day ("晚上我说…"): today's, or yesterday's while today's
        is still ahead."""
        return self.hours(self.today, part) or self.hours(self.today - _DAY, part)

    def last_hours(self, count: int) -> Period:
        """The ``count`` hours before now ("刚才", "just now")."""
        return Period(self.now - timedelta(hours=count), self.now)


class Miss(Enum):
    """A rule's "not this match" (look further), and a language's "names no time"."""

    SKIP = 0


Named = Period | str | None
"""What a recognised expression means: a period, :data:`FIRST_CHAT` / :data:`LAST_CHAT`,
or ``None`` (a time that names no past period: the future, or no such day)."""

Rule = tuple[re.Pattern[str], Callable[[re.Match[str], str, Anchor], Named | Miss]]
"""A precompiled pattern and what one of its matches means."""


def scan(rules: Sequence[Rule], text: str, anchor: Anchor) -> Named | Miss:
    """The meaning of the first match of the first rule that recognises one (rules are in
    order of precedence: the most specific first); :attr:`Miss.SKIP` when none does."""
    for pattern, meaning in rules:
        for match in pattern.finditer(text):
            found = meaning(match, text, anchor)
            if found is not Miss.SKIP:
                return found
    return Miss.SKIP


def joined(far: Period | None, near: Period | None) -> Period | None:
    """From the start of ``far`` to the end of ``near`` ("几个月前": 6 … 2 months back)."""
    if far is None or near is None:
        return near or far
    return Period(far.start, near.end)
