"""Where a chat's waiting lines split into conversations (``episodes/closing.py``, issue #48):
at an idle gap, at the owner's local day change, at ``max_lines``; the last conversation is
open until it is idle, its day is over or it is full."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

from tests.lazy import lazy_import

C = lazy_import("amrita_plugin_memory.episodes.closing")
E = lazy_import("amrita_plugin_memory.core.episodes")

ZONE = timezone(timedelta(hours=8))
# 2026-05-28 10:00 in UTC+8
T0 = datetime(2026, 5, 28, 10, 0, tzinfo=ZONE).timestamp()
IDLE = 1800.0


def day_of(at: float) -> date:
    return datetime.fromtimestamp(at, UTC).astimezone(ZONE).date()


def line(at: float, text: str = "hi", n: int = 0) -> object:
    return E.EpisodeLine(chat="c", origin="private", user_id="1", text=text, at=at, id=n)


def split(lines: list, now: float, max_lines: int = 400) -> tuple[list, list]:
    return C.split_conversations(
        lines, idle_seconds=IDLE, day_of=day_of, max_lines=max_lines, now=now
    )


def ats(conversations: list) -> list[list[float]]:
    return [[ln.at - T0 for ln in conv] for conv in conversations]


def test_nothing_waiting() -> None:
    assert split([], T0) == ([], [])


def test_idle_gap_cuts_and_the_last_stays_open_while_recent() -> None:
    lines = [line(T0), line(T0 + 60), line(T0 + 60 + IDLE + 1), line(T0 + 60 + IDLE + 100)]
    ended, rest = split(lines, now=T0 + 60 + IDLE + 200)
    assert ats(ended) == [[0, 60]]
    assert [ln.at - T0 for ln in rest] == [60 + IDLE + 1, 60 + IDLE + 100]


def test_a_gap_of_exactly_idle_seconds_does_not_cut() -> None:
    ended, rest = split([line(T0), line(T0 + IDLE)], now=T0 + IDLE + 1)
    assert ended == [] and len(rest) == 2


def test_last_conversation_ends_once_idle() -> None:
    ended, rest = split([line(T0), line(T0 + 10)], now=T0 + 10 + IDLE + 1)
    assert ats(ended) == [[0, 10]] and rest == []


def test_local_midnight_cuts_and_ends_yesterday() -> None:
    before = datetime(2026, 5, 28, 23, 55, tzinfo=ZONE).timestamp()
    after = datetime(2026, 5, 29, 0, 5, tzinfo=ZONE).timestamp()
    ended, rest = split([line(before), line(after)], now=after + 60)
    assert [[ln.at for ln in conv] for conv in ended] == [[before]]
    assert [ln.at for ln in rest] == [after]
    # Alone, yesterday's conversation is over at midnight even though not idle yet.
    ended, rest = split([line(before)], now=after)
    assert [[ln.at for ln in conv] for conv in ended] == [[before]] and rest == []


def test_midnight_in_utc_is_not_the_owners() -> None:
    # 23:55 and 00:05 UTC are 07:55 and 08:05 in UTC+8: one conversation.
    a = datetime(2026, 5, 28, 23, 55, tzinfo=UTC).timestamp()
    b = datetime(2026, 5, 29, 0, 5, tzinfo=UTC).timestamp()
    ended, rest = split([line(a), line(b)], now=b + 60)
    assert ended == [] and len(rest) == 2


def test_max_lines_cuts_and_a_full_conversation_ends() -> None:
    lines = [line(T0 + i, n=i + 1) for i in range(7)]
    ended, rest = split(lines, now=T0 + 8, max_lines=3)
    assert [len(c) for c in ended] == [3, 3] and len(rest) == 1
    ended, rest = split(lines[:6], now=T0 + 8, max_lines=3)
    assert [len(c) for c in ended] == [3, 3] and rest == []


def test_lines_are_ordered_by_time_then_id() -> None:
    lines = [line(T0 + 5, "b", 2), line(T0, "a", 3), line(T0 + 5, "c", 1)]
    ended, _ = split(lines, now=T0 + 2 * IDLE)
    assert [ln.text for ln in ended[0]] == ["a", "c", "b"]
