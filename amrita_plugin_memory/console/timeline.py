"""``GET /api/memory/timeline?user=<qq>|group=<gid>[&days=N]``: one chat's days (issue #48).

For a user's private chat or a group, the last ``days`` of the owner's local
days (:class:`~..core.calendar.OwnerCalendar`), newest first: each day with the
conversation episodes of that chat (``EpisodeStore.of_chat_any``, archived ones
marked) and the memories learned that day in the chat's partition (by when they
were written, read newest first through the console's own listing,
:func:`~..upkeep.listing.newest_page`, until the window's first day; at most
:data:`MEMORY_MAX` of them). A user's timeline holds their private chat's
episodes only; a group's episodes are on the group's timeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, timedelta
from typing import Any

from ..core.calendar import WEEKDAYS_ZH, OwnerCalendar
from ..core.episodes import EpisodeRecord
from ..core.records import MemoryRecord
from ..storage.episodes.store import EpisodeStore
from ..storage.keys import group_key, user_key
from ..storage.memory_store import MemoryStore
from ..tools.args import parse_int
from ..upkeep.listing import newest_page
from . import params
from .errors import bad_request, guarded
from .memories import record_json

__all__ = ["DAYS_DEFAULT", "DAYS_MAX", "MEMORY_MAX", "TimelineAdmin"]

DAYS_DEFAULT = 30
DAYS_MAX = 366
MEMORY_MAX = 1000
"""The most memories one timeline reads (newest first); ``memories_cut`` says when hit."""
_PAGE = 200


def episode_json(episode: EpisodeRecord, calendar: OwnerCalendar) -> dict[str, Any]:
    """One episode for the page (its times in the owner's zone; members: a count)."""
    return {
        "id": episode.id,
        "origin": episode.origin,
        "start_at": calendar.show_stamp(episode.start),
        "end_at": calendar.show_stamp(episode.end),
        "summary": episode.summary,
        "topics": list(episode.topics),
        "source": episode.source,
        "messages": episode.messages,
        "chars": episode.chars,
        "participants": len(episode.participants),
        "archived": episode.archived,
    }


class TimelineAdmin:
    """The timeline of one chat over the stores of one process."""

    def __init__(self, store: MemoryStore, episodes: EpisodeStore, calendar: OwnerCalendar) -> None:
        self.store = store
        self.episodes = episodes
        self.calendar = calendar

    @staticmethod
    def _chat(query: Mapping[str, Any]) -> tuple[str, str, str]:
        """``(kind, id, partition)`` from ``user`` or ``group`` (exactly one)."""
        user, group = query.get("user"), query.get("group")
        if (user is None) == (group is None):
            bad_request("请给出 user=<QQ 号> 或 group=<群号> 之一")
        if user is not None:
            uid = params.user_id(user)
            return "user", uid, user_key(uid)
        gid = params.user_id(group)  # a group number: digits, like a QQ number
        return "group", gid, group_key(gid)

    async def _memories(self, partition: str, first: date) -> tuple[list[MemoryRecord], bool]:
        """The partition's memories written on ``first`` or later (newest first), and
        whether :data:`MEMORY_MAX` cut the read short."""
        found: list[MemoryRecord] = []
        offset = 0
        while len(found) < MEMORY_MAX:
            page, total = await newest_page(self.store, partition, offset=offset, limit=_PAGE)
            for record in page:
                day = self.calendar.day_of(record.created_at)
                if day is not None and day >= first:
                    found.append(record)
            offset += _PAGE
            oldest = [self.calendar.day_of(r.created_at) for r in page]
            if offset >= total or any(d is not None and d < first for d in oldest):
                return found[:MEMORY_MAX], False
        return found[:MEMORY_MAX], True

    async def timeline(self, query: Mapping[str, Any]) -> dict[str, Any]:
        kind, chat_id, partition = self._chat(query)
        days = params.arg(parse_int, query, "days", low=1, high=DAYS_MAX, default=DAYS_DEFAULT)
        calendar = self.calendar

        async def run() -> dict[str, Any]:
            today = calendar.today()
            first = today - timedelta(days=days - 1)
            start = calendar.start_of(first).timestamp()
            episodes = await self.episodes.of_chat_any(partition, start=start, archived=True)
            memories, cut = await self._memories(partition, first)
            by_day: dict[date, dict[str, list[dict[str, Any]]]] = {}

            def slot(day: date | None) -> dict[str, list[dict[str, Any]]] | None:
                if day is None or day < first:
                    return None
                return by_day.setdefault(day, {"episodes": [], "memories": []})

            for episode in episodes:
                if (entry := slot(calendar.day_of(episode.start))) is not None:
                    entry["episodes"].append(episode_json(episode, calendar))
            for record in reversed(memories):  # oldest first within a day
                if (entry := slot(calendar.day_of(record.created_at))) is not None:
                    entry["memories"].append(record_json(record))
            return {
                "kind": kind,
                "id": chat_id,
                "partition": partition,
                "days": days,
                "first_day": first.isoformat(),
                "timezone": calendar.name,
                "memories_cut": cut,
                "timeline": [
                    {"day": d.isoformat(), "weekday": WEEKDAYS_ZH[d.weekday()], **by_day[d]}
                    for d in sorted(by_day, reverse=True)
                ],
            }

        return await guarded("console_timeline", run)
