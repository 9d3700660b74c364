"""Calendar spans for writing the time sets by hand: which local days a question's words name.

Used only by the data generators (:mod:`bench.time_set_zh`, :mod:`bench.time_set_evolving`)
to record, beside each question written by hand, the days its period words mean at its
"now" (weeks start on Monday, a month or a weekday without a year is the latest one not in
the future). The integrity test checks every answer lies in its question's span and a
same-topic memory lies outside it: the words themselves are never parsed here (that is the
plugin's job, measured by the benchmark).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

__all__ = ["Span", "days_ago", "local", "month", "named_month", "recent", "week", "weekday"]
__all__ += ["weekend", "year"]

Span = tuple[date, date]
ZONE_OFFSET = "+08:00"
"""The owner's zone of the time sets (Asia/Shanghai, no DST): stamps are written with it."""


def local(text: str) -> datetime:
    """``"2025-11-19 07:20"`` as an aware datetime in the owner's zone (UTC+8)."""
    return datetime.fromisoformat(f"{text.replace(' ', 'T')}:00{ZONE_OFFSET}")


def days_ago(now: str, n: int) -> Span:
    day = local(now).date() - timedelta(days=n)
    return day, day


def week(now: str, k: int) -> Span:
    """Monday … Sunday of the week ``k`` weeks from now's (0 this week, -1 last week)."""
    today = local(now).date()
    monday = today - timedelta(days=today.weekday()) + timedelta(weeks=k)
    return monday, monday + timedelta(days=6)


def weekday(now: str, k: int, wd: int) -> Span:
    """Weekday ``wd`` (0 Monday … 6 Sunday) of the week ``k`` weeks from now's."""
    day = week(now, k)[0] + timedelta(days=wd)
    return day, day


def weekend(now: str, k: int) -> Span:
    monday = week(now, k)[0]
    return monday + timedelta(days=5), monday + timedelta(days=6)


def _month_span(year_: int, month_: int) -> Span:
    first = date(year_, month_, 1)
    following = date(year_ + month_ // 12, month_ % 12 + 1, 1)
    return first, following - timedelta(days=1)


def month(now: str, k: int) -> Span:
    """The month ``k`` months from now's (0 this month, -1 last month)."""
    today = local(now).date()
    index = today.year * 12 + today.month - 1 + k
    return _month_span(index // 12, index % 12 + 1)


def named_month(now: str, m: int) -> Span:
    """Month ``m`` without a year: the latest one not in the future."""
    today = local(now).date()
    return _month_span(today.year if m <= today.month else today.year - 1, m)


def year(now: str, k: int) -> Span:
    y = local(now).year + k
    return date(y, 1, 1), date(y, 12, 31)


def recent(now: str, days: int) -> Span:
    today = local(now).date()
    return today - timedelta(days=days), today
