"""The console's timeline of one chat (``console/timeline.py``, issue #48) on a real store.

By the owner's local day (Asia/Shanghai here, so a UTC evening is the next local day):
the chat's episodes (archived ones marked, another chat's never) and the memories
written that day in its partition; the window's days only; bad parameters are 400s.
The route itself is exercised against a running bot in ``tests/test_console_api.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.helpers import new_memory, view_of

pytestmark = pytest.mark.usefixtures("orm_db")

NOW = datetime(2026, 6, 10, 4, 0, tzinfo=UTC)  # 12:00 in Shanghai
USER = "QQPlatform_Private_31401"
OTHER = "QQPlatform_Private_31402"
GROUP = "QQPlatform_Group_31499"


def stamp(days: float, hour: int) -> datetime:
    """``days`` before NOW's UTC date, at ``hour`` UTC."""
    return (NOW - timedelta(days=days)).replace(hour=hour)


async def test_a_users_and_a_groups_days(store: Any) -> None:
    from amrita_plugin_memory.console.errors import ConsoleError
    from amrita_plugin_memory.console.timeline import TimelineAdmin
    from amrita_plugin_memory.core.calendar import OwnerCalendar, zone_named
    from amrita_plugin_memory.core.episodes import NewEpisode
    from amrita_plugin_memory.storage.episodes.store import EpisodeStore

    calendar = OwnerCalendar(zone_named("Asia/Shanghai"), lambda: NOW)
    store.calendar = calendar
    episodes = EpisodeStore()

    async def memory(partition: str, text: str, at: datetime, scope: str = "user") -> None:
        store.clock = lambda: at.isoformat(timespec="seconds")
        await store.add(new_memory(partition, scope, text, tags=["t"]))

    async def episode(chat: str, origin: str, at: datetime, summary: str) -> Any:
        start = at.timestamp()
        new = NewEpisode(
            chat=chat, origin=origin, start=start, end=start + 900, participants=("31401",),
            summary=summary, topics=("话题",), source="model", messages=5, chars=90,
        )  # fmt: skip
        return await episodes.keep(new, [])

    await memory(USER, "今天说过喜欢猫", stamp(0, 1))  # 06-10 09:00 local
    await memory(USER, "前天晚上说过住在杭州", stamp(3, 17))  # 06-08 01:00 local
    await memory(USER, "很久以前的记忆", stamp(40, 3))
    await memory(OTHER, "别人的记忆", stamp(0, 2))
    await memory(GROUP, "群里定了周五聚餐", stamp(1, 6), "group")
    await episode(USER, "private", stamp(0, 0), "聊了猫")
    gone = await episode(USER, "private", stamp(3, 16), "深夜聊了搬家")  # 06-08 00:00 local
    await episode(USER, "private", stamp(40, 3), "四十天前的对话")
    await episode(OTHER, "private", stamp(0, 0), "别人的私聊")
    await episode(GROUP, "group:31499", stamp(1, 5), "群里聊了聚餐")
    await episodes.archive(
        view_of(USER), gone.id, at=NOW.timestamp(), reason="deleted"
    )  # shown, marked archived

    admin = TimelineAdmin(store, episodes, calendar)
    mine = await admin.timeline({"user": "31401", "days": "7"})
    assert (mine["kind"], mine["partition"], mine["first_day"]) == ("user", USER, "2026-06-04")
    days = {d["day"]: d for d in mine["timeline"]}
    assert list(days) == ["2026-06-10", "2026-06-08"]  # newest first, empty days left out
    assert days["2026-06-10"]["weekday"] == "周三"
    assert [e["summary"] for e in days["2026-06-10"]["episodes"]] == ["聊了猫"]
    assert [m["content"] for m in days["2026-06-10"]["memories"]] == ["今天说过喜欢猫"]
    [late] = days["2026-06-08"]["episodes"]
    assert late["summary"] == "深夜聊了搬家" and late["archived"] is True
    assert [m["content"] for m in days["2026-06-08"]["memories"]] == ["前天晚上说过住在杭州"]
    text = str(mine)
    assert "别人" not in text and "群里" not in text and "四十天" not in text

    group = await admin.timeline({"group": "31499"})
    assert group["days"] == 30 and [d["day"] for d in group["timeline"]] == ["2026-06-09"]
    [day] = group["timeline"]
    assert [e["summary"] for e in day["episodes"]] == ["群里聊了聚餐"]
    assert [m["content"] for m in day["memories"]] == ["群里定了周五聚餐"]

    longer = await admin.timeline({"user": "31401", "days": 60})
    assert longer["timeline"][-1]["episodes"][0]["summary"] == "四十天前的对话"

    for bad in ({}, {"user": "1", "group": "2"}, {"user": "abc"}, {"user": "1", "days": "0"},
                {"group": "2", "days": "9999"}):  # fmt: skip
        with pytest.raises(ConsoleError):
            await admin.timeline(bad)
