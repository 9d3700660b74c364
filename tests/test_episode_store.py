"""The episode tables on SQLite and PostgreSQL (``storage/episodes/store.py``, issue #48).

Lines of open conversations are kept and turned into one episode in one transaction
(a second process keeping the same conversation changes nothing); reads go through the
chat's view (a private episode never through a group's view, nor a user view narrowed to
a group); forget removes a user's private and group episodes and their waiting lines;
the sweep archives, never deletes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.helpers import view_of
from tests.lazy import lazy_import

pytestmark = pytest.mark.usefixtures("orm_db")

E = lazy_import("amrita_plugin_memory.core.episodes")
R = lazy_import("amrita_plugin_memory.core.records")
K = lazy_import("amrita_plugin_memory.storage.keys")
S = lazy_import("amrita_plugin_memory.storage.episodes.store")

T0 = 1_780_000_000.0


def line(chat: str, origin: str, user: str, text: str, at: float, **kw: Any) -> Any:
    return E.EpisodeLine(chat=chat, origin=origin, user_id=user, text=text, at=at, **kw)


def episode(chat: str, origin: str, start: float, people: tuple[str, ...], summary: str) -> Any:
    return E.NewEpisode(
        chat=chat, origin=origin, start=start, end=start + 600, participants=people,
        summary=summary, topics=("面试",), source="extract", messages=4, chars=80,
        day="2026-05-29",
    )  # fmt: skip


async def test_lines_become_one_episode_once_even_from_two_stores() -> None:
    chat = K.user_key("10001")
    store, other = S.EpisodeStore(), S.EpisodeStore()
    await store.add_lines(
        [line(chat, "private", "10001", f"第{i}句", T0 + i) for i in range(5)]
        + [line(chat, "private", "42", "好的", T0 + 6, is_bot=True)]
    )
    [open_chat] = await store.open_chats(10)
    assert (open_chat.chat, open_chat.lines, open_chat.first) == (chat, 6, T0)
    lines = await store.lines_of(chat, 100)
    assert [ln.text for ln in lines][:2] == ["第0句", "第1句"] and lines[-1].is_bot
    ids = [ln.id for ln in lines]
    first, second = await asyncio.gather(
        store.keep(episode(chat, "private", T0, ("10001",), "聊了面试"), ids),
        other.keep(episode(chat, "private", T0, ("10001",), "聊了面试"), ids),
    )
    assert (first is None) != (second is None)
    assert await store.open_chats(10) == []
    assert await store.count(view_of(chat)) == 1


async def test_a_private_episode_never_reaches_a_group_view() -> None:
    user, group = K.user_key("10001"), K.group_key("20001")
    store = S.EpisodeStore()
    mine = await store.keep(episode(user, "private", T0, ("10001",), "私聊：面试"), [])
    ours = await store.keep(
        episode(group, R.origin_of_group("20001"), T0, ("10001", "10002"), "群聊：游戏"), []
    )
    assert mine is not None and ours is not None
    in_group = view_of(user, R.OriginFilter.only(R.origin_of_group("20001")))
    assert await store.recent(in_group, 10) == []
    assert await store.get(in_group, mine.id) is None
    assert [e.summary for e in await store.recent(view_of(user), 10)] == ["私聊：面试"]
    assert [e.summary for e in await store.recent(view_of(group), 10)] == ["群聊：游戏"]
    # An id of another chat behaves like a missing id, for reads and for the archive.
    assert await store.get(view_of(group), mine.id) is None
    assert not await store.archive(view_of(group), mine.id, at=T0, reason="deleted")
    with pytest.raises(TypeError):
        await store.recent(user, 10)  # type: ignore[arg-type]


async def test_periods_first_and_archive() -> None:
    chat = K.user_key("10003")
    store = S.EpisodeStore()
    days = [T0 + d * 86_400 for d in range(4)]
    kept = [
        await store.keep(episode(chat, "private", t, ("10003",), f"第{i}天"), [])
        for i, t in enumerate(days)
    ]
    assert all(kept)
    view = view_of(chat)
    assert [e.summary for e in await store.between(view, days[1], days[2] + 1)] == [
        "第1天",
        "第2天",
    ]
    first = await store.first(view)
    assert first is not None and first.summary == "第0天"
    assert await store.archive(view, first.id, at=T0, reason="deleted")
    assert (await store.first(view)).summary == "第1天"  # type: ignore[union-attr]
    moved = await store.sweep_episodes(days[2], at=T0)
    assert moved == 1  # 第1天 ended before day 2; 第0天 was archived already
    assert [e.summary for e in await store.recent(view, 10)] == ["第2天", "第3天"]
    everything = await store.of_user_anywhere("10003", chat)
    assert len(everything) == 4 and sum(e.archived for e in everything) == 2
    assert await store.restore_episode(chat, first.id)
    assert len(await store.recent(view, 10)) == 3


async def test_forget_removes_private_and_group_episodes_and_lines() -> None:
    me, friend = K.user_key("10004"), K.user_key("10005")
    group = K.group_key("20002")
    origin = R.origin_of_group("20002")
    store = S.EpisodeStore()
    await store.keep(episode(me, "private", T0, ("10004",), "我的私聊"), [])
    await store.keep(episode(group, origin, T0, ("10004", "10005"), "一起聊"), [])
    await store.keep(episode(group, origin, T0 + 3600, ("10005",), "朋友自己聊"), [])
    await store.keep(episode(friend, "private", T0, ("10005",), "朋友私聊"), [])
    await store.add_lines(
        [
            line(group, origin, "10004", "我在群里", T0 + 7200),
            line(group, origin, "10005", "朋友在群里", T0 + 7201),
            line(me, "private", "10004", "私聊一句", T0 + 7202),
            line(me, "private", "42", "机器人回复", T0 + 7203, is_bot=True),
        ]
    )
    assert len(await store.of_user_anywhere("10004", me)) == 2
    assert len(await store.lines_of_user("10004", me)) == 3
    gone = await store.forget_user("10004", me)
    assert (gone.episodes, gone.lines) == (2, 3)
    assert await store.of_user_anywhere("10004", me) == []
    assert [e.summary for e in await store.recent(view_of(group), 10)] == ["朋友自己聊"]
    assert [e.summary for e in await store.recent(view_of(friend), 10)] == ["朋友私聊"]
    assert [ln.text for ln in await store.lines_of(group, 10)] == ["朋友在群里"]
