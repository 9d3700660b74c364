"""Where one chat's waiting lines split into conversations, and which have ended (issue #48).

A conversation is a run of lines of one chat; it is cut where two lines are more
than ``idle_seconds`` apart, where the owner's local day changes between two
lines, and where it has ``max_lines`` lines (a bound). A conversation has ended
when a line follows it, when its last line is more than ``idle_seconds`` old,
when its day is before today (the local day's end), or when it reached
``max_lines``; only the last conversation of a chat can still be going on.

Pure: no store, no clock (``now`` and ``day_of`` are given), so the closer,
the benchmarks and the tests share it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date

from ..core.episodes import EpisodeLine

__all__ = ["split_conversations"]


def _cut_before(
    prev: EpisodeLine,
    line: EpisodeLine,
    size: int,
    *,
    idle_seconds: float,
    day_of: Callable[[float], date],
    max_lines: int,
) -> bool:
    """Whether ``line`` starts a new conversation after ``prev`` (one of ``size`` lines)."""
    return (
        size >= max_lines or line.at - prev.at > idle_seconds or day_of(line.at) != day_of(prev.at)
    )


def split_conversations(
    lines: Sequence[EpisodeLine],
    *,
    idle_seconds: float,
    day_of: Callable[[float], date],
    max_lines: int,
    now: float,
) -> tuple[list[list[EpisodeLine]], list[EpisodeLine]]:
    """``(ended, open_rest)``: the ended conversations of one chat's ``lines``, oldest
    first, and the lines of the conversation still going on (empty when none is).

    ``lines`` are sorted by time (then id) first; ``day_of`` gives the owner's local
    day of a time (``OwnerCalendar.day_of``). ``max_lines`` below one counts as one.
    """
    max_lines = max(1, max_lines)
    ordered = sorted(lines, key=lambda ln: (ln.at, ln.id))
    conversations: list[list[EpisodeLine]] = []
    for line in ordered:
        current = conversations[-1] if conversations else None
        if current is None or _cut_before(
            current[-1],
            line,
            len(current),
            idle_seconds=idle_seconds,
            day_of=day_of,
            max_lines=max_lines,
        ):
            conversations.append([line])
        else:
            current.append(line)
    if not conversations:
        return [], []
    last = conversations[-1]
    last_line = last[-1]
    ended_last = (
        len(last) >= max_lines
        or now - last_line.at > idle_seconds
        or day_of(last_line.at) < day_of(now)
    )
    if ended_last:
        return conversations, []
    return conversations[:-1], last
