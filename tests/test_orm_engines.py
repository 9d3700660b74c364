"""Every ORM query of the plugin on SQLite and on PostgreSQL 15.

Each test runs twice (``orm_db``): on a fresh SQLite file and on a fresh database of the
session's throw-away PostgreSQL cluster, both made by the plugin's own migration scripts,
with the plugin's models bound there the way ``SQLALCHEMY_BINDS`` binds them. The stores
are fresh objects (no cache carried from another test), and every value is read back
through a second fresh object, so what is checked is what the database kept: naive UTC
datetimes (asyncpg refuses aware ones for these columns), booleans and ``NULL``, JSON,
the longest ids the columns allow, autoincrement ids, ordering, counts and deletes.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime
from tests.helpers import new_memory
from tests.lazy import lazy_import

pytestmark = pytest.mark.usefixtures("orm_db", "embed_server")

C = lazy_import("amrita_plugin_memory.core.config")
M = lazy_import("amrita_plugin_memory.storage.models")
GS = lazy_import("amrita_plugin_memory.storage.groups.stores")

LONGEST_QQ = "9" * 20  # the longest user id the commands accept (20 digits)
LONGEST_GROUP = "8" * 20


def near_now(stamp: datetime) -> None:
    """A stored time is naive UTC and close to now."""
    assert stamp.tzinfo is None
    assert abs(stamp.replace(tzinfo=UTC) - datetime.now(UTC)) < timedelta(minutes=5)


def stores() -> Any:
    return GS.GroupStores.build(C.ConfigFile())


async def rows(model: Any, **where: Any) -> list[Any]:
    """The table's rows (``where``: column values they must have)."""
    from nonebot_plugin_orm import get_session
    from sqlalchemy import select

    async with get_session() as session:
        return list((await session.scalars(select(model).filter_by(**where))).all())


async def test_bound_engine_is_the_one_asked_for(orm_db: str) -> None:
    from nonebot_plugin_orm import get_session

    async with get_session() as session:
        plugin = session.get_bind(M.UserMemo).dialect.name
    assert plugin == orm_db
    import nonebot_plugin_orm as orm

    others = [m for m in orm._binds if m.__table__.info.get("bind_key") != "amrita_plugin_memory"]
    assert others  # Amrita's models stay on the session's SQLite file
    async with get_session() as session:
        assert all(session.get_bind(m) is orm._engines[""].sync_engine for m in others)


async def test_memo_write_read_remove_migrate_and_console_list() -> None:
    from amrita_plugin_memory.console.memos import MemoAdmin
    from amrita_plugin_memory.storage.memo_store import MemoService

    key = "QQPlatform_Private_" + LONGEST_QQ
    group = "QQPlatform_Group_" + LONGEST_GROUP
    memo = MemoService(1000)
    assert (await memo.update(key, "用户叫小明，喜欢🍎")).ok
    assert (await memo.update(group, "群规：不刷屏")).ok
    assert await MemoService(1000).get(key) == "用户叫小明，喜欢🍎"
    (row,) = await rows(M.UserMemo, user_id=key)
    near_now(row.updated_at)

    listing = await MemoAdmin(MemoService(1000)).list({})
    assert listing["total"] == 2
    assert {item["uni_id"] for item in listing["memos"]} == {key, group}
    assert all(item["updated_at"].endswith("+00:00") for item in listing["memos"])

    # Legacy keys move to the current format; on a conflict the newer text stays.
    from nonebot_plugin_orm import get_session

    old, new = datetime(2024, 1, 1, 8), datetime(2025, 6, 1, 8, 0, 0, 123456)
    async with get_session() as session:
        session.add_all(
            [
                M.UserMemo(user_id="user_30001", content="旧键的备忘录", updated_at=old),
                M.UserMemo(user_id="user_30002", content="旧键较新", updated_at=new),
                M.UserMemo(user_id="QQPlatform_Private_30002", content="新键较旧", updated_at=old),
            ]
        )
        await session.commit()
    report = await MemoService(1000).migrate_keys()
    assert report.moved == 2 and len(report.conflicts) == 1
    kept = {r.user_id: (r.content, r.updated_at) for r in await rows(M.UserMemo)}
    assert kept["QQPlatform_Private_30001"] == ("旧键的备忘录", old)
    assert kept["QQPlatform_Private_30002"] == ("旧键较新", new)  # microseconds kept
    assert "user_30001" not in kept and "user_30002" not in kept

    assert await memo.remove(key)
    assert await MemoService(1000).get(key) == ""


async def test_consent_opt_out_and_notice() -> None:
    from amrita_plugin_memory.storage.consent_store import ConsentStore

    consent = ConsentStore()
    assert await consent.allows(LONGEST_QQ)
    assert await consent.set_allowed(LONGEST_QQ, False)
    fresh = ConsentStore()
    assert not await fresh.allows(LONGEST_QQ)
    since = await fresh.opted_out_since(LONGEST_QQ)
    assert since is not None
    near_now(since)
    assert await fresh.set_allowed(LONGEST_QQ, True)
    assert await ConsentStore().allows(LONGEST_QQ)
    assert await ConsentStore().opted_out_since(LONGEST_QQ) is None

    assert not await consent.noticed("30003")
    await consent.mark_noticed("30003")
    await consent.mark_noticed("30003")  # twice: still one row
    assert await ConsentStore().noticed("30003")
    (notice,) = await rows(M.ActiveMemoryNotice, user_id="30003")
    near_now(notice.created_at)
    await consent.forget_notice("30003")
    assert not await ConsentStore().noticed("30003")


async def test_group_window_flush_reload_compact_and_forget() -> None:
    groups = stores()
    windows = groups.windows
    start = time.time() - 3600
    nick = "昵称" * 40  # longer than the column: cut to 64 characters
    for i in range(5):
        windows.append(
            LONGEST_GROUP, LONGEST_QQ, nick, f"消息{i}", is_bot=False, at=start + i + 0.123456
        )
    windows.append(LONGEST_GROUP, "10", "bot", "机器人回答", is_bot=True, at=start + 10)
    assert await windows.flush(LONGEST_GROUP)
    await windows.drain()

    reloaded = stores().windows
    recent = await reloaded.recent(LONGEST_GROUP, 20)
    assert [e.text for e in recent] == [*(f"消息{i}" for i in range(5)), "机器人回答"]
    assert [e.is_bot for e in recent] == [False] * 5 + [True]
    assert recent[0].nickname == nick[:64]
    assert abs(recent[0].at - (start + 0.123456)) < 1e-5  # naive UTC round trip, microseconds
    mine = await reloaded.messages_of(LONGEST_QQ)
    assert len(mine) == 5 and all(g == LONGEST_GROUP for g, _ in mine)

    assert (await reloaded.compact()).dropped == 0  # within the limits: nothing to do

    # Lower limits (a changed configuration): the start-up compaction trims and cuts.
    small = C.GroupContextConfig(
        context_message_count=4, context_max_text_chars=2, bot_context_max_chars=3
    )
    report = await GS.GroupStores.build(C.ConfigFile(group_context=small)).windows.compact()
    assert (report.dropped, report.cut) == (2, 4)
    kept = await stores().windows.recent(LONGEST_GROUP, 20)
    assert [len(e.text) <= (3 if e.is_bot else 2) for e in kept] == [True] * 4
    assert [e.is_bot for e in kept] == [False, False, False, True]

    assert await stores().windows.forget_user(LONGEST_QQ) == 3
    assert [e.is_bot for e in await stores().windows.recent(LONGEST_GROUP, 20)] == [True]
    await stores().windows.clear(LONGEST_GROUP)
    assert await rows(M.GroupMessage, group_id=LONGEST_GROUP) == []


async def test_group_settings_and_labels() -> None:
    directory = stores().directory
    assert await directory.anonymize(LONGEST_GROUP) == C.ConfigFile().group_context.anonymize
    await directory.set_anonymize(LONGEST_GROUP, False)
    assert await stores().directory.anonymize(LONGEST_GROUP) is False
    await directory.set_anonymize(LONGEST_GROUP, True)
    assert await stores().directory.anonymize(LONGEST_GROUP) is True
    (setting,) = await rows(M.GroupSetting, group_id=LONGEST_GROUP)
    near_now(setting.updated_at)

    members = [LONGEST_QQ, "30011", "30012"]
    labels = await directory.labels(LONGEST_GROUP, members)
    assert set(labels) == set(members) and len(set(labels.values())) == 3
    again = await stores().directory.labels(LONGEST_GROUP, members)
    assert again == labels  # fixed once given, read back from the table
    assert await stores().directory.labels_of(LONGEST_QQ) == {LONGEST_GROUP: labels[LONGEST_QQ]}
    assert await directory.forget_user(LONGEST_QQ) == 1
    assert await stores().directory.labels_of(LONGEST_QQ) == {}


async def test_personas_merge_opt_out_and_forget() -> None:
    personas = stores().personas
    now = time.time()
    assert await personas.merge(
        LONGEST_QQ, [("爱好", "下围棋"), ("城市", "杭州")], now=now, max_chars=500
    )
    got = await stores().personas.get(LONGEST_QQ)
    assert {(f.field, f.value) for f in got.fields} == {("爱好", "下围棋"), ("城市", "杭州")}
    assert got.learning_off is False
    (row,) = await rows(M.MemberPersona, user_id=LONGEST_QQ)
    near_now(row.updated_at)

    await personas.set_learning(LONGEST_QQ, False)
    off = await stores().personas.get(LONGEST_QQ)
    assert off.learning_off is True and off.fields == []
    assert not await stores().personas.merge(LONGEST_QQ, [("爱好", "x")], now=now, max_chars=500)
    await personas.set_learning(LONGEST_QQ, True)
    assert await personas.merge(LONGEST_QQ, [("语言", "中文")], now=now, max_chars=500)
    assert await personas.merge("30021", [("职业", "教师")], now=now, max_chars=500)
    assert await stores().personas.forget("30021") == 1
    assert (await stores().personas.get("30021")).fields == []
    assert await rows(M.MemberPersona, user_id="30021") == []

    # The console's list and the overview's count.
    from amrita_plugin_memory.console.groups import GroupAdmin

    admin = GroupAdmin(stores(), C.ConfigFile().persona)
    listing = await admin.personas({})
    assert listing["total"] == 1
    (item,) = listing["personas"]
    assert item["user_id"] == LONGEST_QQ and item["learning_off"] is False
    assert item["updated_at"].endswith("+00:00")
    assert [(f["field"], f["value"]) for f in item["fields"]] == [("语言", "中文")]
    assert await admin.counts() == {"available": True, "personas": 1, "self_entries": 0}


async def test_self_memory_ids_and_deletes() -> None:
    self_memory = stores().self_memory
    first = await self_memory.add("我是一个喜欢围棋的机器人")
    second = await self_memory.add("我住在服务器里")
    assert first.ok and second.ok
    entries = await stores().self_memory.list()
    assert [e.content for e in entries] == ["我是一个喜欢围棋的机器人", "我住在服务器里"]
    assert entries[0].id < entries[1].id  # autoincrement ids, in insertion order
    for row in await rows(M.BotSelfMemory):
        near_now(row.created_at)
    gone = await stores().self_memory.delete_id(entries[0].id)
    assert gone is not None and gone.content == "我是一个喜欢围棋的机器人"
    assert await stores().self_memory.delete_id(entries[0].id) is None
    assert [e.content for e in await stores().self_memory.list()] == ["我住在服务器里"]


async def test_loop_state_row_and_the_loops_store() -> None:
    from amrita_plugin_memory.storage.users.loop_state_row import LoopStateRow
    from amrita_plugin_memory.subconscious.state import StateStore

    UID = "orm_engines_loop"  # a row of its own (the session's loop keeps its own)

    assert dict(await LoopStateRow(UID).read()) == {}
    document: Any = {  # the loop's document is free-form JSON in the table
        "total_runs": 3,
        "abstracts": ["第一轮：整理了饮食偏好"],
        "nested": {"k": [1, None]},
    }
    await StateStore(UID).save(document)
    assert await StateStore(UID).load() == document
    (row,) = await rows(M.SubconsciousState, uid=UID)
    near_now(row.updated_at)

    def bump(data: dict[str, Any]) -> int:
        data["total_runs"] += 1
        return data["total_runs"]

    assert await LoopStateRow(UID).edit(bump) == 4
    assert (await LoopStateRow(UID).read())["total_runs"] == 4
    assert await StateStore(UID).load() == {**document, "total_runs": 4}


async def test_user_export_and_forget(tmp_path: Path) -> None:
    from amrita_plugin_memory.storage.consent_store import ConsentStore
    from amrita_plugin_memory.storage.keys import user_key
    from amrita_plugin_memory.storage.users.loop_state_row import LoopStateRow

    uid, gid = "30031", "40031"
    rt = make_runtime(tmp_path / "data")
    try:
        groups = stores()
        personal = user_key(uid)
        await rt.store.add(new_memory(personal, "user", "用户喜欢喝乌龙茶", tags=["饮品"]))
        assert (await rt.memo.update(personal, "用户叫阿青")).ok
        groups.windows.append(gid, uid, "阿青", "大家好", is_bot=False, at=time.time())
        await groups.windows.flush(gid)
        await groups.directory.labels(gid, [uid])
        await groups.personas.merge(uid, [("爱好", "喝茶")], now=time.time(), max_chars=500)
        consent = ConsentStore()
        await consent.set_allowed(uid, False)

        data = rt.user_data(groups, LoopStateRow())
        data.consent = ConsentStore()
        doc = await data.export(uid)
        assert doc["memo"] == "用户叫阿青"
        assert [m["content"] for m in doc["memories"]] == ["用户喜欢喝乌龙茶"]
        assert [m["text"] for m in doc["group_messages"]] == ["大家好"]
        assert doc["persona"]["fields"][0]["value"] == "喝茶"
        assert list(doc["labels"]) == [gid]
        active = doc["active_memory"]
        assert active["learning_off"] is True and active["since"].endswith("+00:00")

        counts = await rt.user_data(stores(), LoopStateRow()).forget(uid)
        assert counts.memories == 1 and counts.memo == 1
        assert counts.persona_fields == 1 and counts.group_messages == 1 and counts.labels == 1
        assert await rt.memo.get(personal) == ""
        assert await stores().windows.messages_of(uid) == []
        assert (await stores().personas.get(uid)).fields == []
        assert await stores().directory.labels_of(uid) == {}
        assert await rows(M.UserMemo, user_id=personal) == []
    finally:
        await rt.close()
