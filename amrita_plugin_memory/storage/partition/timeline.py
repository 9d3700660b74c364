"""When each memory of a partition was said and what time it tells of: for period questions.

A question naming a period ("上周", "in October", ``since`` / ``until``) matches a
memory by its **event time** where one is known (``event_time``: a day, month or year,
matched by overlap with the period's days) and by its **record time** otherwise (the
moment it was said, ``created_at``, or last rewritten, ``updated_at``, in the owner's
zone: a message at 07:30 Beijing time belongs to that Beijing day, never to the UTC day
before). The times are parsed once per cached partition (``Entry.derived``), not once per
question: recall at 1,000 memories stays within its per-turn budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from ...core.calendar import EVENT_TIME_KEY, OwnerCalendar, event_span
from ...core.records import MemoryRecord
from ...ranking.when import FIRST_CHAT, Period, named_period

__all__ = [
    "RowTime",
    "of_period",
    "period_first",
    "period_test",
    "resolve",
    "row_time",
    "row_times",
    "rows_within",
]

_TIMES_KEY = "times"
"""Key of the rows' :class:`RowTime` list in a cached partition entry's ``derived`` dict."""


@dataclass(frozen=True, slots=True)
class RowTime:
    """One memory's times, in the owner's zone."""

    said: datetime | None
    """When it was first said (``created_at``)."""
    rewritten: datetime | None
    """When its text was last written (``updated_at``; the same as :attr:`said` if never)."""
    event: tuple[date, date] | None
    """The days its event time covers (``None``: unknown)."""

    def within(self, period: Period) -> bool:
        """Whether the memory belongs to ``period``: its event time where known, else when
        it was said (or last rewritten: an update is the newer statement)."""
        if self.event is not None:
            return period.overlaps(*self.event)
        return any(t is not None and period.holds(t) for t in (self.said, self.rewritten))

    @property
    def first_day(self) -> date | None:
        """The day it was first said (what "our first chat" compares)."""
        return None if self.said is None else self.said.date()


def row_time(meta: Mapping[str, Any], calendar: OwnerCalendar) -> RowTime:
    """The times of one memory from its stored metadata."""
    said = calendar.local(str(meta.get("created_at") or meta.get("updated_at") or ""))
    rewritten = calendar.local(str(meta.get("updated_at") or "")) or said
    return RowTime(said, rewritten, event_span(meta.get(EVENT_TIME_KEY)))


def row_times(
    entry: Any, metas: Sequence[Mapping[str, Any]], calendar: OwnerCalendar
) -> list[RowTime]:
    """Every row's times, cached with the partition's snapshot when there is one."""
    if entry is None:
        return [row_time(m, calendar) for m in metas]
    times = entry.derived.get(_TIMES_KEY)
    if times is None:
        times = entry.derived[_TIMES_KEY] = [row_time(m, calendar) for m in metas]
    return times


def of_period(rows: Mapping[str, Any], window: Period, calendar: OwnerCalendar) -> list[Any]:
    """The memories of a Chroma ``get`` answer that belong to ``window`` (its event time,
    else when it was said), in the order they were said."""
    ids = list(rows["ids"])
    docs = rows.get("documents") or [None] * len(ids)
    metas = [dict(m or {}) for m in (rows.get("metadatas") or [None] * len(ids))]
    inside = [
        MemoryRecord.from_chroma(i, d, m)
        for i, d, m in zip(ids, docs, metas, strict=False)
        if row_time(m, calendar).within(window)
    ]
    inside.sort(key=lambda r: (r.created_at, r.id))
    return inside


def period_test(
    text: str, now: datetime | None, calendar: OwnerCalendar, *, on: bool = True
) -> Callable[[MemoryRecord], bool]:
    """Whether a memory belongs to the period ``text`` names, relative to ``now`` (always
    false when it names none, or only "our first chat" / "last time", or ``on`` is false)."""
    named = named_period(text, now or calendar.now()) if on else None
    if not isinstance(named, Period):
        return lambda record: False
    return lambda record: row_time(record.to_metadata(), calendar).within(named)


def resolve(named: Period | str, times: Sequence[RowTime], zone: Any) -> Period | None:
    """The period of a question: a :class:`Period` as it is; "our first chat"
    (``FIRST_CHAT``) is the day the partition's oldest memory was said."""
    if isinstance(named, Period):
        return named
    if named == FIRST_CHAT:
        days = [d for t in times if (d := t.first_day) is not None]
        return Period.of_days(min(days), min(days), zone) if days else None
    return None  # LAST_CHAT: past conversations, not memories


def rows_within(
    period: Period,
    times: Sequence[RowTime],
    metas: Sequence[Mapping[str, Any]],
    keep: Callable[[Mapping[str, Any]], bool],
) -> list[int]:
    """The rows of ``period`` that ``keep`` lets through."""
    return [r for r, t in enumerate(times) if t.within(period) and keep(metas[r])]


def period_first(
    ranked: Sequence[str],
    distances: Mapping[str, float | None],
    within: set[str],
    topic: float,
) -> list[str]:
    """``ranked`` with the memories of the named period first, among those on its topic.

    On its topic: a vector distance within ``1 / topic`` of the best candidate's (the
    relative closeness the combined score starts from). The rest keep their order: a
    memory of the period about something else does not jump ahead of the topic, and a
    question naming no period never gets here (nothing loses by age).
    """
    if topic <= 0 or not within:
        return list(ranked)
    known = [d for d in distances.values() if d is not None]
    best = min(known) if known else None

    def on_topic(memory_id: str) -> bool:
        d = distances.get(memory_id)
        if best is None or d is None:
            return False
        return d <= 0 or best / d >= topic

    first = [i for i in ranked if i in within and on_topic(i)]
    chosen = set(first)
    return first + [i for i in ranked if i not in chosen]
