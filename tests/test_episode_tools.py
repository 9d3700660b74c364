"""``read_memory`` with a period also lists that period's past conversations (issue #48):
the chat's own episodes (a private chat's in private, the group's in that group, never a
private one in a group), dated in the owner's zone; without a period, or with episodes
switched off, nothing is added to the answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime
from tests.lazy import lazy_import

pytestmark = pytest.mark.usefixtures("orm_db")

CS = lazy_import("amrita_plugin_memory.core.config_sections")
E = lazy_import("amrita_plugin_memory.core.episodes")
K = lazy_import("amrita_plugin_memory.storage.keys")
S = lazy_import("amrita_plugin_memory.storage.episodes.store")
SC = lazy_import("amrita_plugin_memory.storage.scope")

BEIJING = timezone(timedelta(hours=8))


def moment(day: int, hour: int) -> float:
    return datetime(2026, 11, day, hour, 0, tzinfo=BEIJING).timestamp()


def episode(chat: str, origin: str, start: float, summary: str) -> Any:
    return E.NewEpisode(
        chat=chat, origin=origin, start=start, end=start + 1800, participants=("1",),
        summary=summary, topics=(), source="extract", messages=4, chars=80,
        day=datetime.fromtimestamp(start, BEIJING).date().isoformat(),
    )  # fmt: skip


@pytest.fixture
async def tools(tmp_path: Path) -> AsyncIterator[Any]:
    from amrita_plugin_memory.tools.memory_tools import MemoryTools

    rt = make_runtime(tmp_path, timezone="Asia/Shanghai")
    store = S.EpisodeStore()
    private, room = K.user_key("1"), K.group_key("777")
    await store.keep(episode(private, "private", moment(10, 6), "聊了下周的面试"), [])
    await store.keep(episode(room, "group:777", moment(10, 20), "群里约周末去爬山"), [])
    await store.keep(episode(private, "private", moment(20, 21), "聊了养猫的事"), [])
    yield MemoryTools(rt.store, rt.memo, calendar=rt.calendar, memory_limit=50, episodes=store)
    await rt.close()


def scope(group_id: str | None = None) -> Any:
    return SC.ScopeRules().of_turn(K.target_from_ids("1", group_id))


async def read(tools: Any, where: Any, **args: Any) -> dict[str, Any]:
    answer = await tools.read_memory(where, {"query": "聊了什么", "scope": "user", **args})
    assert answer["ok"] is True, answer
    return answer


async def test_a_period_lists_the_chats_conversations_in_the_owners_days(tools: Any) -> None:
    answer = await read(tools, scope(), since="2026-11-10", until="2026-11-10")
    # 06:00 Beijing is 22:00 UTC the day before: the owner's day counts.
    assert answer["conversations"] == ["2026-11-10 周二 06:00–06:30 聊了下周的面试"]
    month = await read(tools, scope(), since="2026-11")
    assert [line[:10] for line in month["conversations"]] == ["2026-11-10", "2026-11-20"]
    assert "conversations" not in await read(tools, scope())  # no period: as before


async def test_a_group_turn_lists_only_that_groups_conversations(tools: Any) -> None:
    answer = await read(tools, scope("777"), since="2026-11")
    assert answer["conversations"] == ["2026-11-10 周二 20:00–20:30 群里约周末去爬山"]
    assert "conversations" not in await read(tools, scope("888"), since="2026-11")


async def test_switched_off_nothing_is_listed(tools: Any) -> None:
    tools.config = tools.config.model_copy(update={"episodes": CS.EpisodesConfig(enabled=False)})
    assert "conversations" not in await read(tools, scope(), since="2026-11")
