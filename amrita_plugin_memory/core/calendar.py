"""The owner's calendar: which day a moment belongs to, and how a date is shown.

Stored stamps stay absolute (aware UTC ISO strings, ``core/records.utc_now``);
every *day* — a day boundary, a period in a question ("昨天", "上周"), a
ledger day, a date shown to a model or a person — is a day of the owner's
time zone (``[memory] timezone``; empty: the machine's local zone). One
object per process (``MemoryRuntime.calendar``), handed to whoever needs a day.

Why not the machine's zone everywhere: the plugin's users are mostly in
UTC+8 while bots often run on UTC servers; a message at 07:30 Beijing time
is "today" to its sender, not yesterday. Weeks start on Monday.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "EVENT_TIME_KEY",
    "WEEKDAYS_ZH",
    "MachineZone",
    "OwnerCalendar",
    "event_span",
    "parse_event_time",
    "zone_named",
]

WEEKDAYS_ZH = ("周一", "周二", "周三", "周四", "周五", "周六", "周日")
"""Weekday names as shown to a model beside a date (Monday first)."""


class MachineZone(tzinfo):
    """The machine's local zone, with its real rules (DST included), read from the C library.

    ``datetime.now().astimezone()`` gives a fixed offset: right today, wrong for a
    stamp on the other side of a DST change. This asks ``time.localtime`` per moment.
    """

    def _local(self, dt: datetime) -> time.struct_time:
        stamp = (dt.replace(tzinfo=None) - datetime(1970, 1, 1)).total_seconds()
        # ``dt`` is wall time here (tzinfo is self): find the offset by a first guess.
        guess = time.localtime(stamp)
        return time.localtime(stamp - guess.tm_gmtoff)

    def utcoffset(self, dt: datetime | None) -> timedelta:
        if dt is None:
            return timedelta(seconds=time.localtime().tm_gmtoff)
        return timedelta(seconds=self._local(dt).tm_gmtoff)

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def tzname(self, dt: datetime | None) -> str:
        return (time.localtime() if dt is None else self._local(dt)).tm_zone

    def fromutc(self, dt: datetime) -> datetime:
        stamp = (dt.replace(tzinfo=None) - datetime(1970, 1, 1)).total_seconds()
        offset = time.localtime(stamp).tm_gmtoff
        return dt + timedelta(seconds=offset)

    def __repr__(self) -> str:
        return "MachineZone()"


def zone_named(name: str) -> tzinfo:
    """The zone ``name`` (IANA, such as ``Asia/Shanghai``); ``""``: the machine's.

    Raises ``ValueError`` for a name the zone database does not know.
    """
    name = name.strip()
    if not name:
        return MachineZone()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"未知的时区 {name!r}（应为 IANA 名称，如 Asia/Shanghai）") from None


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class OwnerCalendar:
    """Days, weeks and shown dates in the owner's zone; stamps in, local days out."""

    zone: tzinfo = field(default_factory=MachineZone)
    clock: Callable[[], datetime] = _utc_now
    """Now, aware (tests and the benchmarks replace it; never naive)."""

    @classmethod
    def named(cls, name: str) -> OwnerCalendar:
        """The calendar of ``[memory] timezone`` (validated there: see ``zone_named``)."""
        return cls(zone_named(name))

    @property
    def name(self) -> str:
        """The zone's IANA name, or ``local (UTC+08:00)`` for the machine's."""
        key = getattr(self.zone, "key", None)
        if isinstance(key, str):
            return key
        offset = self.now().utcoffset() or timedelta(0)
        minutes = int(offset.total_seconds() // 60)
        sign = "+" if minutes >= 0 else "-"
        return f"local (UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d})"

    def now(self) -> datetime:
        """Now, in the owner's zone."""
        return self.clock().astimezone(self.zone)

    def today(self) -> date:
        return self.now().date()

    def local(self, moment: datetime | str | float | None) -> datetime | None:
        """``moment`` (aware datetime, ISO stamp — naive means UTC — or epoch seconds)
        in the owner's zone; ``None`` when unreadable."""
        if moment is None or moment == "":
            return None
        if isinstance(moment, (int, float)):
            return datetime.fromtimestamp(float(moment), UTC).astimezone(self.zone)
        if isinstance(moment, str):
            try:
                moment = datetime.fromisoformat(moment.strip())
            except ValueError:
                return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(self.zone)

    def day_of(self, moment: datetime | str | float | None) -> date | None:
        """The owner's calendar day of ``moment`` (``None`` when unreadable)."""
        local = self.local(moment)
        return None if local is None else local.date()

    def show_date(self, moment: datetime | str | float | None) -> str:
        """``2026-12-04`` (the owner's day), or ``""`` when unreadable."""
        day = self.day_of(moment)
        return "" if day is None else day.isoformat()

    def show_day(self, moment: datetime | str | float | None) -> str:
        """``2026-12-04 周五``: a date with its weekday, for a model reading dated lines."""
        day = self.day_of(moment)
        return "" if day is None else f"{day.isoformat()} {WEEKDAYS_ZH[day.weekday()]}"

    def show_time(self, moment: datetime | str | float | None) -> str:
        """``2026-12-04 07:30`` in the owner's zone, or ``""`` when unreadable."""
        local = self.local(moment)
        return "" if local is None else local.strftime("%Y-%m-%d %H:%M")

    def show_stamp(self, moment: datetime | str | float | None) -> str:
        """``2026-12-04T07:30:00+08:00``: a stamp in the owner's zone with its offset (a
        tool's answer, the console), or ``""`` when unreadable."""
        local = self.local(moment)
        return "" if local is None else local.isoformat(timespec="seconds")

    def start_of(self, day: date) -> datetime:
        """The first moment of ``day`` in the owner's zone (aware)."""
        naive = datetime(day.year, day.month, day.day)
        if isinstance(self.zone, MachineZone):
            # mktime resolves the wall time with the machine's own rules.
            return datetime.fromtimestamp(time.mktime(naive.timetuple()), UTC).astimezone(self.zone)
        return naive.replace(tzinfo=self.zone)

    def next_midnight(self, moment: datetime | None = None) -> datetime:
        """The start of the owner's day after ``moment`` (default: now)."""
        local = self.now() if moment is None else moment.astimezone(self.zone)
        return self.start_of(local.date() + timedelta(days=1))

    def week_of(self, day: date) -> tuple[date, date]:
        """Monday … Sunday of the week holding ``day``."""
        monday = day - timedelta(days=day.weekday())
        return monday, monday + timedelta(days=6)


EVENT_TIME_KEY = "event_time"
"""Chroma metadata key of when a memory's event happened (absent: unknown)."""


def parse_event_time(value: str) -> str:
    """An event time in its stored form: ``2026-12-01`` (a day), ``2026-12`` (a month)
    or ``2026`` (a year); the precision is the form. A full ISO stamp counts as its day
    (as written: an importer's local stamp keeps its own date).

    Raises ``ValueError`` (in Chinese, for a tool's caller) for anything else.
    """
    text = value.strip()
    try:
        if len(text) == 4 and text.isdigit():
            return f"{date(int(text), 1, 1).year:04d}"
        if len(text) == 7 and text[4] == "-":
            day = date(int(text[:4]), int(text[5:]), 1)
            return f"{day.year:04d}-{day.month:02d}"
        if len(text) == 10:
            return date.fromisoformat(text).isoformat()
        if len(text) > 10:
            return datetime.fromisoformat(text).date().isoformat()
    except ValueError:
        pass
    raise ValueError(f"事件时间 {value!r} 无法识别（应为 YYYY-MM-DD、YYYY-MM 或 YYYY）")


def event_span(value: object) -> tuple[date, date] | None:
    """The days a stored event time covers (first, last), or ``None`` when absent or bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        text = parse_event_time(value)
    except ValueError:
        return None
    if len(text) == 4:
        return date(int(text), 1, 1), date(int(text), 12, 31)
    if len(text) == 7:
        first = date(int(text[:4]), int(text[5:]), 1)
        following = date(first.year + first.month // 12, first.month % 12 + 1, 1)
        return first, following - timedelta(days=1)
    day = date.fromisoformat(text)
    return day, day
