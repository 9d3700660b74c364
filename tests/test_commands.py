"""``/memory`` commands through real OneBot events."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chat import BotRecorder, make_bot, run_turn
from tests.conftest import SUPERUSER
from tests.events import group_event, private_event
from tests.helpers import new_memory, runtime, view_of
from tests.lazy import lazy_import

M = lazy_import("amrita_plugin_memory.tools.commands")


async def command(event: Any, recorder: BotRecorder | None = None) -> BotRecorder:
    recorder = recorder or BotRecorder()
    await run_turn(make_bot(recorder), event)
    return recorder


@pytest.mark.parametrize(
    ("text", "scope", "action", "argument"),
    [
        ("user list", "user", "list", ""),
        ("user list 2", "user", "list", "2"),
        ("group search 周五 聚餐", "group", "search", "周五 聚餐"),
        ("group delete abc", "group", "delete", "abc"),
        ("list", "user", "list", ""),
        ("search 生日", "user", "search", "生日"),
        ("delete abc", "user", "delete", "abc"),
        ("个人 搜索 生日", "user", "search", "生日"),
        ("群 删除 x", "group", "delete", "x"),
        ("", "user", "help", ""),
        ("user", "user", "help", ""),
        ("frobnicate", "user", "help", ""),
    ],
)
def test_parse(text: str, scope: str, action: str, argument: str) -> None:
    assert M.parse_command(text) == M.CommandRequest(scope, action, argument)


async def test_private_list_search_delete() -> None:
    uid = 12001
    key = f"QQPlatform_Private_{uid}"
    store = runtime().store
    records = [
        await store.add(new_memory(key, "user", f"第{i}条记忆：喜欢第{i}种水果", tags=["水果"]))
        for i in range(12)
    ]

    rec = await command(private_event(uid, "/memory user list"))
    (reply,) = rec.texts("private")
    assert "个人记忆（共 12 条，第 1/2 页）" in reply
    assert records[0].id in reply and records[10].id not in reply
    assert "下一页：/memory user list 2" in reply

    rec = await command(private_event(uid, "/memory list 2"))  # legacy form, personal scope
    (reply,) = rec.texts("private")
    assert "第 2/2 页" in reply and records[11].id in reply

    rec = await command(private_event(uid, "/记忆 user search 第3种水果"))
    (reply,) = rec.texts("private")
    assert "距离" in reply and reply.index("第3条") < reply.index("2.")

    gone = records[0].id
    rec = await command(private_event(uid, f"/memory user delete {gone}"))
    assert rec.texts("private") == [
        f"已删除个人记忆 {gone}（已存入归档，可用 /memory user archive restore {gone} 恢复）"
    ]
    assert await store.get(view_of(key), gone) is None
    (row,) = await store.archive.list(view_of(key), memory_id=gone)  # deletes lose nothing
    assert (row.id, row.reason, row.record.content) == (gone, "deleted", records[0].content)
    rec = await command(private_event(uid, "/memory user archive"))
    assert f"{gone}  [已删除，归档于" in rec.texts("private")[0]
    rec = await command(private_event(uid, f"/memory user archive restore {gone}"))
    assert rec.texts("private") == [f"已恢复记忆 {gone}"]
    assert (await store.get(view_of(key), gone)).content == records[0].content
    await store.delete(key, gone)

    rec = await command(private_event(uid, "/memory user list 9"))
    assert rec.texts("private") == ["个人记忆共 11 条，只有 2 页"]


async def test_personal_listing_never_reaches_a_group() -> None:
    uid, gid = 12010, 22010
    store = runtime().store
    await store.add(new_memory(f"QQPlatform_Private_{uid}", "user", "私密：身份证尾号 1234"))

    rec = await command(group_event(uid, gid, "/memory user list"))
    assert rec.texts("group") == ["个人记忆已通过私聊发送给你"]
    private = [c for c in rec.sent() if c.api == "send_private_msg"]
    assert len(private) == 1 and private[0].data["user_id"] == uid
    assert "身份证尾号" in rec.texts("private")[0]

    rec = await command(
        group_event(uid, gid, "/memory search 身份证"), BotRecorder(fail_private=True)
    )
    assert rec.texts("group") == ["个人记忆不会在群里展示，请先加好友后私聊我使用 /memory user …"]
    assert all("身份证" not in text for text in rec.texts("group"))


async def test_group_commands() -> None:
    gid = 22020
    store = runtime().store
    note = await store.add(new_memory(f"QQPlatform_Group_{gid}", "group", "群规：周末不发工作消息"))

    rec = await command(group_event(12020, gid, "/memory group list"))
    (reply,) = rec.texts("group")
    assert "群共享记忆（共 1 条" in reply and note.id in reply

    rec = await command(group_event(12020, gid, "/memory group search 周末"))
    assert "群规" in rec.texts("group")[0]

    rec = await command(private_event(12020, "/memory group list"))
    assert rec.texts("private") == ["群共享记忆只能在群聊中使用"]


@pytest.mark.parametrize(
    ("role", "user_id", "allowed"),
    [
        ("member", 12030, False),
        ("admin", 12031, True),
        ("owner", 12032, True),
        ("member", int(SUPERUSER), True),
    ],
)
async def test_group_delete_permission(role: str, user_id: int, allowed: bool) -> None:
    gid = 22030
    key = f"QQPlatform_Group_{gid}"
    store = runtime().store
    note = await store.add(new_memory(key, "group", "群公告"))
    rec = await command(
        group_event(user_id, gid, f"/memory group delete {note.id}", role=role),
        BotRecorder(roles={(gid, user_id): role}),
    )
    (reply,) = rec.texts("group")
    if allowed:
        assert reply == f"已删除群共享记忆 {note.id}（已存入归档）"
        assert await store.get(view_of(key), note.id) is None
        assert await store.archive.ids([note.id]) == {note.id}
    else:
        assert reply.startswith("删除失败") and "管理员" in reply
        assert await store.get(view_of(key), note.id) is not None
        await store.delete(key, note.id)


async def test_hostile_command_arguments() -> None:
    uid = 12040
    key = f"QQPlatform_Private_{uid}"
    store = runtime().store
    mine = await store.add(new_memory(key, "user", "我的记忆"))
    other = await store.add(new_memory("QQPlatform_Private_12041", "user", "别人的记忆"))
    cases = {
        "/memory user list -1": "页码必须是正整数",
        "/memory user list abc": "看不懂时间段「abc」",
        "/memory user list " + "长" * 600: "看不懂时间段",
        "/memory user search": "请提供关键词",
        "/memory user delete": "请提供记忆 ID",
        f"/memory user delete {other.id}": "不存在",
        "/memory user delete " + "x" * 500: "过长",
        "/memory user search " + "长" * 600: "过长",
        "/memory user delete <script>": "不存在",
    }
    for text, expected in cases.items():
        rec = await command(private_event(uid, text))
        (reply,) = rec.texts("private")
        assert expected in reply, (text, reply)
        assert "Traceback" not in reply
    assert (await store.get(view_of("QQPlatform_Private_12041"), other.id)).content == "别人的记忆"
    assert (
        await store.count(view_of(key)) == 1
        and (await store.get(view_of(key), mine.id)) is not None
    )


async def test_help() -> None:
    rec = await command(private_event(12050, "/memory"))
    (reply,) = rec.texts("private")
    assert "/memory user list" in reply and "/memory group delete <ID>" in reply


async def test_list_takes_a_period() -> None:
    """``/memory list 上周``: only last week's memories (the owner's days; Monday first)."""
    from datetime import UTC, datetime, timedelta

    uid = 12031
    key = f"QQPlatform_Private_{uid}"
    store = runtime().store
    today = store.calendar.today()
    monday = today - timedelta(days=today.weekday() + 7)

    def at(day: Any) -> str:
        noon = datetime(day.year, day.month, day.day, 12, tzinfo=store.calendar.zone)
        return noon.astimezone(UTC).isoformat(timespec="seconds")

    clock = store.clock
    written: dict[str, Any] = {}
    try:
        for name, day in [
            ("上周三", monday + timedelta(days=2)),
            ("今天", today),
            ("很久以前", today - timedelta(days=60)),
        ]:
            store.clock = lambda d=day: at(d)
            written[name] = await store.add(new_memory(key, "user", f"{name}说的事", tags=["时间"]))
    finally:
        store.clock = clock
    (reply,) = (await command(private_event(uid, "/memory user list 上周"))).texts("private")
    assert written["上周三"].id in reply and "共 1 条" in reply
    assert written["今天"].id not in reply and written["很久以前"].id not in reply
    old = today - timedelta(days=60)
    month = f"{old.year:04d}-{old.month:02d}"
    (reply,) = (await command(private_event(uid, f"/memory list {month}"))).texts("private")
    assert written["很久以前"].id in reply and written["今天"].id not in reply
    (reply,) = (await command(private_event(uid, "/memory list 火星上"))).texts("private")
    assert reply.startswith("看不懂时间段「火星上」")
    (reply,) = (await command(private_event(uid, "/memory list 上周 -1"))).texts("private")
    assert reply.startswith("页码必须是正整数")
