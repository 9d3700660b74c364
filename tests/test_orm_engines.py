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
from tests.helpers import new_memory, user_view, view_of
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
    assert await MemoService(1000).get(view_of(key)) == "用户叫小明，喜欢🍎"
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
    assert await MemoService(1000).get(view_of(key)) == ""


async def test_consent_opt_out_and_notice() -> None:
    from amrita_plugin_memory.storage.consent_store import ConsentStore

    consent = ConsentStore()
    assert await consent.allows(user_view(LONGEST_QQ))
    assert await consent.set_allowed(user_view(LONGEST_QQ), False)
    fresh = ConsentStore()
    assert not await fresh.allows(user_view(LONGEST_QQ))
    since = await fresh.opted_out_since(user_view(LONGEST_QQ))
    assert since is not None
    near_now(since)
    assert await fresh.set_allowed(user_view(LONGEST_QQ), True)
    assert await ConsentStore().allows(user_view(LONGEST_QQ))
    assert await ConsentStore().opted_out_since(user_view(LONGEST_QQ)) is None

    assert not await consent.noticed(user_view("30003"))
    await consent.mark_noticed("30003")
    await consent.mark_noticed("30003")  # twice: still one row
    assert await ConsentStore().noticed(user_view("30003"))
    (notice,) = await rows(M.ActiveMemoryNotice, user_id="30003")
    near_now(notice.created_at)
    await consent.forget_notice("30003")
    assert not await ConsentStore().noticed(user_view("30003"))


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
    recent = await reloaded.recent_any(LONGEST_GROUP, 20)
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
    kept = await stores().windows.recent_any(LONGEST_GROUP, 20)
    assert [len(e.text) <= (3 if e.is_bot else 2) for e in kept] == [True] * 4
    assert [e.is_bot for e in kept] == [False, False, False, True]

    assert await stores().windows.forget_user(LONGEST_QQ) == 3
    assert [e.is_bot for e in await stores().windows.recent_any(LONGEST_GROUP, 20)] == [True]
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
    got = await stores().personas.of_user_anywhere(LONGEST_QQ)
    assert {(f.field, f.value) for f in got.fields} == {("爱好", "下围棋"), ("城市", "杭州")}
    assert got.learning_off is False
    (row,) = await rows(M.MemberPersona, user_id=LONGEST_QQ)
    near_now(row.updated_at)

    await personas.set_learning(LONGEST_QQ, False)
    off = await stores().personas.of_user_anywhere(LONGEST_QQ)
    assert off.learning_off is True and off.fields == []
    assert not await stores().personas.merge(LONGEST_QQ, [("爱好", "x")], now=now, max_chars=500)
    await personas.set_learning(LONGEST_QQ, True)
    assert await personas.merge(LONGEST_QQ, [("语言", "中文")], now=now, max_chars=500)
    assert await personas.merge("30021", [("职业", "教师")], now=now, max_chars=500)
    assert await stores().personas.forget("30021") == 1
    assert (await stores().personas.of_user_anywhere("30021")).fields == []
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


async def test_loop_state_row_and_the_loops_store(tmp_path: Path) -> None:
    """The loop's state is one row per item: a change writes only what it changed, so a
    copy held in memory never writes back what another process erased, and an item
    whose work began before its user's forget is buried by the next read."""
    from amrita_plugin_memory.storage.keys import user_key
    from amrita_plugin_memory.storage.shared.sessions import orm_session
    from amrita_plugin_memory.storage.users.loop_state_row import LoopStateRow
    from amrita_plugin_memory.storage.users.tombstones import ForgottenUsers
    from amrita_plugin_memory.subconscious.state import LoopState, StateStore

    UID = "orm_engines_loop"  # a row of its own (the session's loop keeps its own)
    target, suggester = LONGEST_QQ, "30078"

    assert dict(await LoopStateRow(UID).read()) == {}
    document: Any = {
        "total_runs": 3,
        "last_abstracts": [
            {
                "time": "2026-01-02T03:04:05+08:00",
                "cycle": 3,
                "outcome": "success",
                "summary": "第一轮：整理了饮食偏好",
            },
        ],
        "pending_messages": [{"id": "p" * 64, "time": "", "intent": "提醒按时吃药"}],
        "knowledge_suggestions": [
            {
                "id": "s1",
                "time": "",
                "action": "create",
                "title": "茶",
                "reason": "",
                "source": user_key(suggester),
                "user_id": suggester,
                "nested": {"k": [1, None]},
            },
        ],
    }
    await StateStore(UID, target=target).save(document)
    stored = await StateStore(UID).load()
    assert stored["total_runs"] == 3
    assert stored["pending_messages"] == document["pending_messages"]
    assert stored["knowledge_suggestions"] == document["knowledge_suggestions"]
    (abstract,) = stored["last_abstracts"]
    assert abstract.pop("id") and abstract == document["last_abstracts"][0]
    items = {(r.kind, r.user_id) for r in await rows(M.LoopItem, loop=UID)}
    assert items == {("abstract", target), ("pending", target), ("suggestion", suggester)}
    (row,) = await rows(M.SubconsciousState, uid=UID)
    assert row.data == {"total_runs": 3}
    near_now(row.updated_at)

    # A loop holding the state in memory; another process removes the waiting message.
    loop = LoopState(StateStore(UID, target=target), max_abstracts=5)
    assert [p["intent"] for p in (await loop.load())["pending_messages"]] == ["提醒按时吃药"]
    await LoopStateRow(UID).edit(lambda d: d["pending_messages"].clear())

    def add_abstract(state: Any) -> None:
        state["total_runs"] = 4
        state["last_abstracts"].append(
            {"time": "", "cycle": 4, "outcome": "success", "summary": "第四轮"}
        )

    await loop.mutate(add_abstract)
    after = await LoopStateRow(UID).read()
    assert after["pending_messages"] == []  # not written back by the loop's change
    assert [a["summary"] for a in after["last_abstracts"]] == ["第一轮：整理了饮食偏好", "第四轮"]
    assert after["total_runs"] == 4
    await LoopStateRow(UID).edit(lambda d: d.update(total_runs=2))  # counts only go forward
    assert (await LoopStateRow(UID).read())["total_runs"] == 4

    # The target is forgotten (a shared tombstone); a cycle that began before it adds a note.
    began = time.time()
    forgotten = ForgottenUsers.in_dir(tmp_path, orm_session)
    await forgotten.add(target, user_key(target), datetime.now(UTC))
    note: Any = {"id": "late", "time": "", "intent": "问问病好了没有"}
    await loop.mutate(lambda s: s["pending_messages"].append(note), since=began)
    assert [p["id"] for p in (await LoopStateRow(UID).read())["pending_messages"]] == ["late"]
    state = await loop.load()  # the loop's read buries it (and every item from before)
    assert state["pending_messages"] == [] and state["last_abstracts"] == []
    assert [s["id"] for s in state["knowledge_suggestions"]] == ["s1"]  # someone else's
    assert {r.kind for r in await rows(M.LoopItem, loop=UID)} == {"suggestion"}
    # Work begun after the forget is kept.
    fresh: Any = {**note, "id": "new"}
    await loop.mutate(lambda s: s["pending_messages"].append(fresh))
    assert [p["id"] for p in (await loop.load())["pending_messages"]] == ["new"]


async def test_labels_are_unique_within_a_group_across_processes() -> None:
    """Two directories (two processes' caches) on one database: a label given in one is
    never given again by the other, whose cache does not know it (the unique index)."""
    from sqlalchemy.exc import IntegrityError

    gid = LONGEST_GROUP
    here, there = stores().directory, stores().directory
    assert await here.labels(gid, ["10009"]) == {"10009": "用户_0009"}
    assert await there.labels(gid, ["10009"]) == {"10009": "用户_0009"}  # both cached
    assert await here.labels(gid, ["20001234"]) == {"20001234": "用户_1234"}
    # The other's cache has never seen 用户_1234; a member with the same last digits:
    assert await there.labels(gid, ["30001234"]) == {"30001234": "用户_01234"}
    labels = [r.label for r in await rows(M.GroupMemberLabel, group_id=gid)]
    assert sorted(labels) == ["用户_0009", "用户_01234", "用户_1234"]
    # The database itself refuses a second holder of a label.
    from nonebot_plugin_orm import get_session

    with pytest.raises(IntegrityError):
        async with get_session() as session:
            session.add(M.GroupMemberLabel(group_id=gid, user_id="40001234", label="用户_1234"))
            await session.commit()


async def test_void_points_are_shared_and_only_move_forward() -> None:
    from amrita_plugin_memory.infra.fences import UserEpochs
    from amrita_plugin_memory.storage.shared.sessions import orm_session
    from amrita_plugin_memory.storage.users.fences import UserFences, VoidPoints

    user = LONGEST_QQ
    voids = VoidPoints(orm_session)
    await voids.record(user, "active", 1000.5)
    await voids.record(user, "active", 900.0)  # older: ignored
    await voids.record(user, "persona", 2000.0)
    assert await VoidPoints(orm_session).of([user, "1"], "active") == {user: 1000.5}
    fences = UserFences(UserEpochs(), None, VoidPoints(orm_session))
    assert await fences.void_points([user], "persona") == {user: 2000.0}
    assert await fences.void_points([user]) == {}  # no forget: only an opt-out's kind counts
    ticket = fences.ticket(user, at=1000.0)
    await fences.check(ticket)  # no kind asked: allowed
    from amrita_plugin_memory.core.errors import WriteFenced

    with pytest.raises(WriteFenced):
        await fences.check(ticket, kind="active")
    await fences.check(fences.ticket(user, at=1001.0), kind="active")  # said afterwards


async def test_a_forgotten_members_earlier_messages_are_never_stored_or_read_back(
    tmp_path: Path,
) -> None:
    """Group windows honour the shared tombstones: a write leaves out what a member said
    before their forget, and a read of the stored rows skips such a row (another process
    may have written it in the instant the forget deleted the member's rows)."""
    from amrita_plugin_memory.storage.groups.window_store import GroupWindowStore
    from amrita_plugin_memory.storage.keys import user_key
    from amrita_plugin_memory.storage.shared.sessions import orm_session
    from amrita_plugin_memory.storage.users.tombstones import ForgottenUsers

    gid, member, other = "40041", "30041", "30042"
    forgotten = ForgottenUsers.in_dir(tmp_path, orm_session)
    config = C.ConfigFile().group_context.model_copy(update={"context_persist_every": 100})
    windows = GroupWindowStore(config, forgotten)
    before = time.time() - 5
    windows.append(gid, member, "甲", "我住在西湖边", is_bot=False, at=before)
    windows.append(gid, other, "乙", "今天下雨", is_bot=False, at=before)
    await forgotten.add(member, user_key(member), datetime.now(UTC))  # in another process
    windows.append(gid, member, "甲", "我回来了", is_bot=False, at=time.time() + 1)
    assert await windows.flush(gid)
    stored = sorted(r.text for r in await rows(M.GroupMessage, group_id=gid))
    assert stored == ["今天下雨", "我回来了"]

    # A row written late by another process, from before the forget: never read back.
    from nonebot_plugin_orm import get_session

    async with get_session() as session:
        old = datetime.fromtimestamp(before, UTC).replace(tzinfo=None)
        session.add(M.GroupMessage(group_id=gid, user_id=member, nickname="甲", is_bot=False,
                                   text="晚到的旧消息", created_at=old))  # fmt: skip
        await session.commit()
    fresh = GroupWindowStore(config, forgotten)
    assert [e.text for e in await fresh.recent_any(gid, 10)] == ["今天下雨", "我回来了"]


async def test_a_persona_merge_never_overwrites_an_opt_out() -> None:
    """The merge writes only while learning is on, in one statement: an opt-out stored by
    another process after the merge read the row stays (nothing is written)."""
    from amrita_plugin_memory.storage.groups.persona_store import Persona

    here, there = stores().personas, stores().personas
    uid = "30043"
    assert await here.merge(uid, [("爱好", "喝茶")], now=time.time(), max_chars=500)
    await there.set_learning(uid, False)  # another process: off (and the persona deleted)
    written = await here._write_learning(Persona(uid, [], False))  # a merge that read before
    assert written is False
    (row,) = await rows(M.MemberPersona, user_id=uid)
    assert row.learning_off is True and row.fields == []


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
        await consent.set_allowed(user_view(uid), False)

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
        assert await rt.memo.get(view_of(personal)) == ""
        assert await stores().windows.messages_of(uid) == []
        assert (await stores().personas.of_user_anywhere(uid)).fields == []
        assert await stores().directory.labels_of(uid) == {}
        assert await rows(M.UserMemo, user_id=personal) == []
    finally:
        await rt.close()
