"""``/memory episodes`` and ``/memory group episodes`` through real OneBot events (#48).

Episodes are kept straight into the store (the recorder is not under test here). A
user sees their private chat's episodes (privately, even when asked in a group), a
group's managers see the group's, nobody sees another chat's; a delete archives
through the same view and an id of another chat is "not found"; ``/memory auto off``
drops the caller's lines of conversations not ended yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.active_helpers import active
from tests.chat import BotRecorder
from tests.events import group_event, private_event
from tests.group_helpers import say
from tests.helpers import runtime, view_of
from tests.lazy import lazy_import

E = lazy_import("amrita_plugin_memory.core.episodes")
K = lazy_import("amrita_plugin_memory.storage.keys")
P = lazy_import("amrita_plugin_memory.tools.command_parsing")

__all__ = ["active"]  # the fixture, imported for pytest

pytestmark = pytest.mark.usefixtures("whole_replies")


@pytest.mark.parametrize(
    ("text", "scope", "action", "argument"),
    [
        ("episodes", "episodes", "show", ""),
        ("对话 3", "episodes", "show", "3"),
        ("聊过", "episodes", "show", ""),
        ("episodes delete abc", "episodes", "delete", "abc"),
        ("对话 删除 abc", "episodes", "delete", "abc"),
        ("group episodes 2", "group", "episodes", "2"),
        ("群 聊过", "group", "episodes", ""),
        ("group episodes delete abc", "group", "episodes_delete", "abc"),
    ],
)
def test_parse(text: str, scope: str, action: str, argument: str) -> None:
    request = P.parse_command(text)
    assert request == P.CommandRequest(scope, action, argument)
    assert P.replies_privately(request) == (scope == "episodes")


async def keep(chat: str, origin: str, start: float, summary: str, **kw: Any) -> Any:
    values: dict[str, Any] = {
        "participants": ("1",), "topics": ("面试",), "source": "model",
        "messages": 6, "chars": 120, "day": "",
    } | kw  # fmt: skip
    episode = E.NewEpisode(chat=chat, origin=origin, start=start, end=start + 1800,
                           summary=summary, **values)  # fmt: skip
    kept = await runtime().episodes.keep(episode, [])
    assert kept is not None
    return kept


async def test_own_episodes_privately_never_in_the_group() -> None:
    uid, gid, other = 4481001, 44811, 4481002
    start = time.time() - 3 * 86400
    mine = await keep(K.user_key(uid), "private", start, "聊了二面的准备，有点紧张")
    await keep(K.user_key(uid), "private", start + 86400, "说起周末去爬山", source="extract",
               topics=("爬山", "周末"))  # fmt: skip
    theirs = await keep(K.user_key(other), "private", start, "别人的私聊：搬家")
    group = await keep(K.group_key(gid), f"group:{gid}", start, "群里讨论了聚餐")

    rec = await say(private_event(uid, "/memory episodes"))
    [reply] = rec.texts("private")
    assert reply.startswith("我们最近的私聊对话（共 2 段，最新的在后）：")
    assert "聊了二面的准备" in reply and "说起周末去爬山" in reply
    assert reply.index("二面") < reply.index("爬山")  # oldest first
    assert "话题 爬山、周末" in reply and "抽取" in reply and "模型摘要" in reply
    assert "周" in reply.splitlines()[1] and "–" in reply.splitlines()[1]
    assert "搬家" not in reply and "聚餐" not in reply

    rec = await say(private_event(uid, "/memory 对话 1"))
    [reply] = rec.texts("private")
    assert "爬山" in reply and "二面" not in reply

    # Asked in a group: the answer goes to the private chat, the group sees only a notice.
    rec = await say(group_event(uid, gid, "/memory episodes"))
    assert rec.texts("group") == ["私聊的对话片段已通过私聊发送给你"]
    assert any("二面" in t for t in rec.texts("private"))
    assert not any("二面" in t or "聚餐" in t for t in rec.texts("group"))

    for bad in ("/memory episodes 0", "/memory episodes 99", "/memory episodes abc"):
        rec = await say(private_event(uid, bad))
        assert rec.texts("private") == ["条数必须是 1 到 20 的整数，例如 /memory episodes 10"]

    # Delete: another chat's id is "not found", nothing changes; one's own is archived.
    for foreign in (theirs.id, group.id, "nope"):
        rec = await say(private_event(uid, f"/memory episodes delete {foreign}"))
        assert rec.texts("private") == [f"删除失败：对话片段 {foreign} 不存在（或不属于当前聊天）"]
    assert await runtime().episodes.count(view_of(K.user_key(other))) == 1
    rec = await say(private_event(uid, f"/memory episodes delete {mine.id}"))
    assert rec.texts("private") == [f"已删除对话片段 {mine.id}（已存入归档）"]
    assert await runtime().episodes.count(view_of(K.user_key(uid))) == 1
    archived = await runtime().episodes.of_chat_any(K.user_key(uid), archived=True)
    assert [e.archived for e in archived] == [True, False]

    rec = await say(private_event(other + 1, "/memory episodes"))
    assert rec.texts("private")[0].startswith("还没有保存我们私聊的对话片段")


async def test_group_episodes_for_managers_only() -> None:
    member, admin, gid, elsewhere = 4482001, 4482002, 44821, 44822
    start = time.time() - 86400
    ours = await keep(K.group_key(gid), f"group:{gid}", start, "群里讨论了周五聚餐")
    theirs = await keep(K.group_key(elsewhere), f"group:{elsewhere}", start, "隔壁群聊了考试")
    await keep(K.user_key(admin), "private", start, "管理员私聊说了体检结果")
    roles = BotRecorder(roles={(gid, admin): "admin"})

    rec = await say(group_event(member, gid, "/memory group episodes"))
    assert rec.texts("group") == ["查看或删除本群的对话片段需要群管理员、群主或超级用户权限"]
    rec = await say(group_event(member, gid, f"/memory group episodes delete {ours.id}"))
    assert rec.texts("group") == ["查看或删除本群的对话片段需要群管理员、群主或超级用户权限"]

    rec = await say(group_event(admin, gid, "/memory group episodes", role="admin"), recorder=roles)
    [reply] = rec.texts("group")
    assert reply.startswith("本群最近的对话（共 1 段，最新的在后）：") and "周五聚餐" in reply
    assert "考试" not in reply and "体检" not in reply  # another group, a private chat

    rec = await say(private_event(admin, "/memory group episodes"))
    assert rec.texts("private") == ["群的对话片段只能在群聊中查看：/memory group episodes"]

    roles = BotRecorder(roles={(gid, admin): "admin"})
    rec = await say(
        group_event(admin, gid, f"/memory group episodes delete {theirs.id}", role="admin"),
        recorder=roles,
    )
    assert rec.texts("group") == [f"删除失败：对话片段 {theirs.id} 不存在（或不属于当前聊天）"]
    roles = BotRecorder(roles={(gid, admin): "admin"})
    rec = await say(
        group_event(admin, gid, f"/memory group episodes delete {ours.id}", role="admin"),
        recorder=roles,
    )
    assert rec.texts("group") == [f"已删除对话片段 {ours.id}（已存入归档）"]
    assert await runtime().episodes.count(view_of(K.group_key(gid))) == 0
    assert await runtime().episodes.count(view_of(K.group_key(elsewhere))) == 1


async def test_auto_off_drops_the_callers_waiting_lines(active: Callable[..., Any]) -> None:
    active()
    uid, gid, other = 4483001, 44831, 4483002
    now = time.time()
    store = runtime().episodes
    lines = [
        E.EpisodeLine(K.user_key(uid), "private", str(uid), "私聊的一句", now),
        E.EpisodeLine(K.user_key(uid), "private", "42", "机器人的回答", now + 1, is_bot=True),
        E.EpisodeLine(K.group_key(gid), f"group:{gid}", str(uid), "群里的一句", now + 2),
        E.EpisodeLine(K.group_key(gid), f"group:{gid}", str(other), "别人的一句", now + 3),
    ]
    await store.add_lines(lines)
    rec = await say(private_event(uid, "/memory auto off"))
    assert rec.texts("private")[0].startswith("已关闭主动记忆")
    try:
        assert [ln.text for ln in await store.lines_of(K.user_key(uid), 10)] == []
        assert [ln.text for ln in await store.lines_of(K.group_key(gid), 10)] == ["别人的一句"]
    finally:
        await say(private_event(uid, "/memory auto on"))
        await store.drop_user_lines(str(other))
