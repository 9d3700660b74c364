"""A user's export and forget (issue #24 §1–2) on the real stack.

``/memory user export|forget`` through real OneBot events (the file through
``upload_private_file``, the text pages when the implementation lacks it),
every kind of data a forget removes (live memories of every origin, archive,
memo, persona, group window in memory and stored, labels, the L3 loop's
waiting messages and knowledge suggestions), another user's data untouched,
backups rewritten, an older backup restored without the forgotten user, and
a forget interrupted by Chroma going down, completed by running it again.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import stat
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.active_helpers import active
from tests.botproject import make_runtime, snapshot
from tests.chat import BotRecorder, make_bot, run_turn
from tests.events import group_event, private_event
from tests.helpers import new_memory, partition, runtime, view_of
from tests.lazy import lazy_import
from tests.reliability_stats import STATS
from tests.servers import ChromaServer, EmbeddingServer

U = lazy_import(
    "amrita_plugin_memory.upkeep.users.user_data",
    "amrita_plugin_memory.storage.groups.stores",
    "amrita_plugin_memory.storage.users.tombstones",
    "amrita_plugin_memory.storage.users.loop_state_row",
    "amrita_plugin_memory.upkeep.archive.restore",
    "amrita_plugin_memory.storage.keys",
    "amrita_plugin_memory.tools.memory_tools",
    "amrita_plugin_memory.storage.scope",
    "amrita_plugin_memory.tools.user_commands",
    "amrita_plugin_memory.embedding",
    "amrita_plugin_memory.core.errors",
)

pytestmark = pytest.mark.usefixtures("embed_server")
__all__ = ["active"]  # the fixture, imported for pytest


def stores() -> Any:
    from amrita_plugin_memory.adapters.group_hooks import current_hooks

    hooks = current_hooks()
    assert hooks is not None
    return hooks.awareness.stores


def meta(row: tuple[Any, dict[str, Any] | None]) -> dict[str, Any]:
    """The metadata of a :func:`~tests.botproject.snapshot` row."""
    return row[1] or {}


async def command(event: Any, recorder: BotRecorder | None = None) -> BotRecorder:
    recorder = recorder or BotRecorder()
    await run_turn(make_bot(recorder), event)
    return recorder


async def seed_user(rt: Any, groups: Any, uid: int, gid: int, tag: str) -> dict[str, Any]:
    """One user's data of every kind; what was written, by kind."""
    key = partition(uid)
    first = await rt.store.add(new_memory(key, "user", f"{tag}喜欢青柠"))
    await rt.store.update(key, first.id, content=f"{tag}改喜欢柠檬了")  # an update-history row
    said_in_group = await rt.store.add(
        new_memory(key, "user", f"{tag}在群里说过住在杭州", origin=f"group:{gid}")
    )
    caller = U.ScopeRules().of_chat(U.target_from_ids(uid, gid))
    written = await rt.tools.write_memory(
        caller, {"content": f"{tag}定下群规：周五聚餐", "tags": ["群规"], "scope": "group"}
    )
    assert written["ok"], written
    await rt.memo.update(key, f"{tag}的备忘录：生日三月")
    await groups.personas.merge(
        str(uid), [("职业", f"{tag}是工程师")], now=time.time(), max_chars=200
    )
    windows = groups.windows
    windows.append(
        str(gid), str(uid), f"{tag}昵称", f"{tag}说：早上好", is_bot=False, at=time.time()
    )
    await windows.flush(str(gid))  # stored
    windows.append(
        str(gid), str(uid), f"{tag}昵称", f"{tag}说：还没写库", is_bot=False, at=time.time()
    )
    await groups.directory.labels(str(gid), [str(uid)])
    await seed_episodes(rt, uid, gid, tag)
    return {
        "memories": {first.id, said_in_group.id},
        "group_memory": written["memory"]["id"],
    }


async def seed_episodes(rt: Any, uid: int, gid: int, tag: str) -> None:
    """A private episode, a group episode the user took part in, waiting lines of both."""
    from amrita_plugin_memory.core.episodes import EpisodeLine, NewEpisode

    start = time.time() - 86400 + uid % 1000  # one start per user: (chat, start) is unique
    for chat, origin, summary in (
        (partition(uid), "private", f"{tag}私聊时聊了面试"),
        (f"QQPlatform_Group_{gid}", f"group:{gid}", f"{tag}在群里聊了聚餐"),
    ):
        episode = NewEpisode(
            chat=chat, origin=origin, start=start, end=start + 600, participants=(str(uid),),
            summary=summary, topics=("面试",), source="extract", messages=3, chars=40,
        )  # fmt: skip
        assert await rt.episodes.keep(episode, []) is not None
    await rt.episodes.add_lines(
        [
            EpisodeLine(partition(uid), "private", str(uid), f"{tag}私聊未完的话", time.time()),
            EpisodeLine(f"QQPlatform_Group_{gid}", f"group:{gid}", str(uid),
                        f"{tag}群里未完的话", time.time()),
        ]
    )  # fmt: skip


async def episodes_of(rt: Any, uid: int) -> tuple[list[str], list[str]]:
    """The summaries of ``uid``'s episodes (archived too) and their waiting lines."""
    episodes = await rt.episodes.of_user_anywhere(str(uid), partition(uid))
    lines = await rt.episodes.lines_of_user(str(uid), partition(uid))
    return sorted(e.summary for e in episodes), sorted(ln.text for ln in lines)


async def holdings(rt: Any, groups: Any, uid: int, gid: int) -> dict[str, Any]:
    """Everything kept about ``uid``, read straight from the stores."""
    key = partition(uid)
    return {
        "memories": await rt.store.count(view_of(key)),
        "archive": await rt.store.archive.count(view_of(key)),
        "memo": await rt.memo.get(view_of(key)),
        "persona": [f.value for f in (await groups.personas.of_user_anywhere(str(uid))).fields],
        "window": [
            e.text for e in await groups.windows.recent_any(str(gid), 200) if e.user_id == str(uid)
        ],
        "stored_messages": len(await groups.windows.messages_of(str(uid))),
        "labels": await groups.directory.labels_of(str(uid)),
        "episodes": await episodes_of(rt, uid),
    }


# ---------------------------------------------------------------------------
# Export through the chat command
# ---------------------------------------------------------------------------


async def test_export_sends_one_json_file_of_everything_and_only_the_callers() -> None:
    rt, groups = runtime(), stores()
    me, other, gid = 18101, 18102, 28101
    mine = await seed_user(rt, groups, me, gid, "甲")
    await seed_user(rt, groups, other, gid, "乙")

    rec = await command(group_event(me, gid, "/memory user export"))
    assert rec.texts("group") == ["导出只在私聊中进行：请私聊我发送 /memory user export"]
    assert rec.uploads == [] and rec.texts("private") == []

    rec = await command(private_event(me, "/memory user export"))
    ((name, text),) = rec.uploads
    assert rec.texts("private") == [f"已把你的数据以文件 {name} 发送给你（JSON 格式）"]
    (call,) = [c for c in rec.calls if c.api == "upload_private_file"]
    assert call.data["user_id"] == me and call.data["name"] == name
    leftovers = await asyncio.to_thread(lambda: list(rt.config.export_dir.glob("*.json")))
    assert leftovers == [] and call.data["file"].startswith(str(rt.config.export_dir))
    doc = json.loads(text)
    assert doc["format"] == "amrita_plugin_memory/user_export" and doc["user_id"] == str(me)
    assert {m["id"] for m in doc["memories"]} == mine["memories"]
    origins = {m["content"]: m["origin"] for m in doc["memories"]}
    assert origins == {"甲改喜欢柠檬了": "private", "甲在群里说过住在杭州": f"group:{gid}"}
    assert all(
        {"tags", "importance", "created_at", "updated_at"} <= set(m) for m in doc["memories"]
    )
    (version,) = doc["archive"]
    assert version["content"] == "甲喜欢青柠" and version["reason"] == "updated"
    assert doc["memo"] == "甲的备忘录：生日三月"
    assert [f["value"] for f in doc["persona"]["fields"]] == ["甲是工程师"]
    (group_memory,) = doc["group_memories"]
    assert group_memory["id"] == mine["group_memory"] and group_memory["author"] == str(me)
    assert group_memory["partition"] == f"QQPlatform_Group_{gid}"
    assert [m["text"] for m in doc["group_messages"]] == ["甲说：早上好", "甲说：还没写库"]
    assert list(doc["labels"]) == [str(gid)]
    episodes = {e["summary"]: e for e in doc["episodes"]}
    assert set(episodes) == {"甲私聊时聊了面试", "甲在群里聊了聚餐"}
    assert episodes["甲在群里聊了聚餐"]["origin"] == f"group:{gid}"
    assert (
        episodes["甲私聊时聊了面试"]["start_local"] and not episodes["甲私聊时聊了面试"]["archived"]
    )
    assert sorted(ln["text"] for ln in doc["episode_lines"]) == ["甲私聊未完的话", "甲群里未完的话"]
    assert "乙" not in text  # nothing of the other member


@pytest.mark.usefixtures("whole_replies")
async def test_export_holds_the_opt_out_archived_group_memories_and_queued_turns(
    active: Any,
) -> None:
    service = active(batch_messages=10)  # turns wait in the queue
    rt = runtime()
    me, gid = 18201, 28201
    caller = U.ScopeRules().of_chat(U.target_from_ids(me, gid))
    written = await rt.tools.write_memory(
        caller, {"content": "寅定下群规：周六爬山", "tags": ["群规"], "scope": "group"}
    )
    assert written["ok"], written
    assert await rt.store.delete(f"QQPlatform_Group_{gid}", written["memory"]["id"])
    await command(private_event(me, "我下个月搬去成都"))  # a real turn, answered

    rec = await command(private_event(me, "/memory user export"))
    ((_, text),) = rec.uploads
    doc = json.loads(text)
    (queued,) = doc["queued_turns"]
    assert queued["text"] == "我下个月搬去成都" and queued["origin"] == "private"
    assert isinstance(queued["reply"], str) and queued["reply"]
    assert doc["active_memory"] == {"learning_off": False, "since": None}
    assert doc["group_memories"] == []
    (archived,) = doc["group_memories_archived"]
    assert archived["content"] == "寅定下群规：周六爬山" and archived["author"] == str(me)
    assert archived["reason"] == "deleted" and archived["memory_id"] == written["memory"]["id"]
    (preview,) = (await command(private_event(me, "/memory user forget"))).texts("private")
    assert "主动记忆中尚未提取的消息 1 条" in preview
    assert "你在群里写下的 1 条群共享记忆（含归档）保留" in preview

    assert (await command(private_event(me, "/memory auto off"))).texts()[-1].startswith("已关闭")
    doc = json.loads((await command(private_event(me, "/memory user export"))).uploads[0][1])
    assert doc["active_memory"]["learning_off"] is True and doc["active_memory"]["since"]
    assert doc["queued_turns"] == []  # opting out drops them
    assert service.queue.pending_of(str(me)) == []


async def test_a_forget_from_the_chat_drops_the_console_caches(tmp_path: Path) -> None:
    from amrita_plugin_memory.console.service import ConsoleService

    rt, groups = runtime(), stores()
    me = 18211
    await rt.store.add(new_memory(partition(me), "user", "卯喜欢茉莉花茶"))
    data = rt.user_data(groups)
    console = ConsoleService(rt, None, groups, data)
    assert partition(me) in (await console.catalog.get()).partitions  # cached now
    users = U.UserCommands(data, tmp_path)
    caller = U.ScopeRules().of_chat(U.target_from_ids(me))
    await users.forget(caller, "")
    assert (await users.forget(caller, "confirm")).startswith("已删除机器人保存的你的数据")
    assert partition(me) not in (await console.catalog.get()).partitions  # not 30 s later


async def test_export_falls_back_to_text_pages_where_files_cannot_be_sent() -> None:
    from amrita_plugin_memory.tools.user_commands import PAGES_PER_REPLY

    rt = runtime()
    me = 18111
    for i in range(12):  # ~40,000 characters: more pages than one reply sends
        await rt.store.add(new_memory(partition(me), "user", f"第{i}段长记忆：" + "青" * 3000))

    rec = await command(private_event(me, "/memory user export"), BotRecorder(fail_upload=True))
    assert rec.uploads == []
    texts = rec.texts("private")
    pages = len(texts) - 2
    assert pages == PAGES_PER_REPLY
    assert texts[0].startswith("你的数据（JSON）共 ") and "无法发送文件，改为文字发送" in texts[0]
    total = int(texts[0].split("共 ")[1].split(" 页")[0])
    assert total > PAGES_PER_REPLY
    assert texts[-1] == f"还有 {total - pages} 页：发送 /memory user export {pages + 1} 继续"
    body = "".join(texts[1:-1])
    sent = pages
    while sent < total:  # "/memory user export <页码>" continues
        rest = (await command(private_event(me, f"/memory user export {sent + 1}"))).texts(
            "private"
        )
        body += "".join(rest[1:-1])
        sent += len(rest) - 2
        last = "导出完毕" if sent == total else f"还有 {total - sent} 页"
        assert rest[-1].startswith(last), rest[-1]
    assert all(len(page) <= U.PAGE_CHARS for page in texts[1:-1])
    doc = json.loads(body)
    assert len(doc["memories"]) == 12 and doc["user_id"] == str(me)
    STATS.faults_injected += 1  # the OneBot implementation refused the file

    for bad in ("abc", "0", "-1", "1 2", str(total + 1)):
        rec = await command(private_event(me, f"/memory user export {bad}"))
        (reply,) = rec.texts("private")
        assert reply.startswith(("用法：", "导出内容共")), reply
        assert rec.uploads == []
        STATS.inputs_tried += 1


# ---------------------------------------------------------------------------
# Forget through the chat command
# ---------------------------------------------------------------------------


async def test_forget_removes_every_kind_and_leaves_others_intact() -> None:
    rt, groups = runtime(), stores()
    me, other, gid = 18121, 18122, 28121
    mine = await seed_user(rt, groups, me, gid, "丙")
    await seed_user(rt, groups, other, gid, "丁")
    before_other = await holdings(rt, groups, other, gid)
    other_rows = await snapshot(rt, rt.store.name)
    other_rows = {k: v for k, v in other_rows.items() if meta(v).get("user_id") != partition(me)}

    rec = await command(group_event(me, gid, "/memory user forget"))
    assert rec.texts("group") == ["遗忘只在私聊中进行：请私聊我发送 /memory user forget"]
    rec = await command(private_event(me, "/memory user forget confirm"))
    assert rec.texts("private")[0].startswith("没有待确认的删除")
    assert (await holdings(rt, groups, me, gid))["memories"] == 2  # nothing removed yet

    (preview,) = (await command(private_event(me, "/memory user forget"))).texts("private")
    for line in (
        "个人记忆 2 条",
        "归档与更新历史 1 条",
        "个人备忘录 1 份",
        "成员画像字段 1 个",
        "群聊上下文中你的消息 2 条",
        "匿名代号 1 个",
        "你在群里写下的 1 条群共享记忆（含归档）保留",
        "对话片段 2 段",
        "尚未结束的对话中的消息 2 条",
        "以下不会删除：",
        "/session forget",
        "/memory user forget confirm",
    ):
        assert line in preview, (line, preview)
    assert (await holdings(rt, groups, me, gid))["memories"] == 2  # a preview removes nothing

    (done,) = (await command(private_event(me, "/memory user forget confirm"))).texts("private")
    assert done.startswith("已删除机器人保存的你的数据：") and "个人记忆 2 条" in done
    assert await holdings(rt, groups, me, gid) == {
        "memories": 0,
        "archive": 0,
        "memo": "",
        "persona": [],
        "window": [],
        "stored_messages": 0,
        "labels": {},
        "episodes": ([], []),
    }
    group_key = f"QQPlatform_Group_{gid}"
    kept = await rt.store.get(view_of(group_key), mine["group_memory"])
    assert kept is not None and kept.content == "丙定下群规：周五聚餐" and kept.author == ""
    assert await holdings(rt, groups, other, gid) == before_other
    now = await snapshot(rt, rt.store.name)
    lost = sum(1 for k, v in other_rows.items() if now.get(k) != v and k != mine["group_memory"])
    STATS.items_lost += lost
    assert lost == 0
    assert (
        (await command(private_event(me, "/memory user forget confirm")))
        .texts("private")[0]
        .startswith("没有待确认的删除")
    )  # one confirmation, one forget

    # Talking again afterwards is remembered as usual.
    again = await rt.store.add(new_memory(partition(me), "user", "丙回来了，喜欢柚子"))
    assert await rt.store.get(view_of(partition(me)), again.id) is not None
    forgotten = await rt.forgotten.entries()
    assert forgotten[str(me)]["partition"] == partition(me)


async def test_forget_confirmation_expires_and_arguments_are_checked(tmp_path: Path) -> None:
    rt, groups = runtime(), stores()
    me = 18131
    await rt.store.add(new_memory(partition(me), "user", "戊喜欢山楂"))
    clock = [1000.0]
    users = U.UserCommands(rt.user_data(groups), tmp_path, clock=lambda: clock[0])
    caller = U.ScopeRules().of_chat(U.target_from_ids(me))

    assert "个人记忆 1 条" in await users.forget(caller, "")
    clock[0] += U.CONFIRM_SECONDS + 1
    assert (await users.forget(caller, "confirm")).startswith("没有待确认的删除")
    assert await rt.store.count(view_of(partition(me))) == 1
    for bad in ("yes", "confirm now", "确认 一下", "x" * 300):
        assert (await users.forget(caller, bad)).startswith("用法：")
        STATS.inputs_tried += 1
    assert await rt.store.count(view_of(partition(me))) == 1
    await users.forget(caller, "")
    clock[0] += U.CONFIRM_SECONDS - 1
    assert (await users.forget(caller, "确认")).startswith("已删除机器人保存的你的数据")
    assert await rt.store.count(view_of(partition(me))) == 0


# ---------------------------------------------------------------------------
# The L3 loop's state: through a running loop
# ---------------------------------------------------------------------------


async def test_forget_removes_waiting_messages_and_suggestions_through_the_loop(
    tmp_path: Path,
) -> None:
    from amrita_plugin_memory.subconscious import create_runner

    rt = runtime()
    target, other = 18141, 18142
    sub = rt.config.file.subconscious.model_copy(
        update={
            "enabled": True,
            "target_user_id": str(target),
            "knowledge_collection_name": f"kbt-{uuid.uuid4().hex[:12]}",
        }
    )
    runner = create_runner(
        rt, sub, state_uid=f"test-{uuid.uuid4().hex[:12]}", config_dir=tmp_path / "config",
        data_dir=tmp_path / "data",
    )  # fmt: skip
    try:
        await runner.load_state()
        await runner.pending.add("告诉他明天降温")
        suggestion = {
            "action": "create",
            "title": "经验",
            "summary": "s",
            "body": "b",
            "reason": "r",
        }
        queue = runner.suggestions
        assert queue is not None
        mine = await queue.suggest(
            suggestion, source=partition(target), user_id=str(target), superuser=False
        )
        theirs = await queue.suggest(
            {**suggestion, "title": "别人的经验"}, source="QQPlatform_Group_1",
            user_id=str(other), superuser=True,
        )  # fmt: skip
        assert mine["ok"] and theirs["ok"]
        data = rt.user_data(stores(), runner.loop_state, runner.target_user_id)

        doc = await data.export(str(target))
        assert [p["intent"] for p in doc["pending_messages"]] == ["告诉他明天降温"]
        assert [s["title"] for s in doc["knowledge_suggestions"]] == ["经验"]
        assert (await data.export(str(other)))["pending_messages"] == []

        counts = await data.forget(str(target))
        assert (counts.pending_messages, counts.suggestions) == (1, 1)
        assert runner.state["pending_messages"] == []
        assert [s["title"] for s in runner.state["knowledge_suggestions"]] == ["别人的经验"]
        stored = await runner.state_store.load()
        assert [s["title"] for s in stored["knowledge_suggestions"]] == ["别人的经验"]
    finally:
        await runner.shutdown()
        if sub.knowledge_collection_name in await rt.connection.list_collections():
            await rt.connection.delete_collection(sub.knowledge_collection_name)


async def test_forget_without_the_loop_edits_the_stored_state() -> None:
    """The command line (no loop in the process) edits the row itself."""
    from amrita_plugin_memory.subconscious.state import StateStore

    rt = runtime()
    me = 18151
    state = StateStore(f"test-{uuid.uuid4().hex[:12]}")
    old = {"time": "t", "action": "create", "reason": "r"}
    document: Any = {  # stored JSON, as an older version left it
        "total_runs": 3,
        "last_abstracts": [],
        "pending_messages": [{"id": "p1", "time": "t", "intent": "转达"}],
        "knowledge_suggestions": [
            # Queued in a private chat before suggestions recorded their user.
            {**old, "id": "s1", "title": "私聊里提的", "source": partition(me)},
            {
                **old,
                "id": "s2",
                "title": "别人的",
                "source": "QQPlatform_Group_9",
                "user_id": "18152",
            },
        ],
    }
    await state.save(document)
    data = rt.user_data(stores())
    data.loop, data.loop_target = U.LoopStateRow(state.uid), str(me)
    counts = await data.forget(str(me))
    assert (counts.pending_messages, counts.suggestions) == (1, 1)
    stored = await state.load()
    assert stored["pending_messages"] == [] and stored["total_runs"] == 3
    assert [s["id"] for s in stored["knowledge_suggestions"]] == ["s2"]


# ---------------------------------------------------------------------------
# Backups: rewritten, and an older backup restored without the forgotten user
# ---------------------------------------------------------------------------


async def test_backups_are_rewritten_and_an_older_backup_never_brings_the_user_back(
    tmp_path: Path, embed_server: EmbeddingServer
) -> None:
    me, other, gid = 18161, 18162, 28161
    rt = make_runtime(tmp_path / "data")
    groups = U.GroupStores.build(rt.config.file)
    mem, arch = rt.store.name, rt.store.archive.name
    try:
        mine = await seed_user(rt, groups, me, gid, "庚")
        await seed_user(rt, groups, other, gid, "辛")
        await U.reset_fingerprint(rt.maintenance)
        info = await U.create_backup(rt.maintenance)
        older = tmp_path / "kept-elsewhere.json"
        shutil.copy(info.path, older)  # a copy the forget cannot rewrite
        theirs_before = {
            k: v for k, v in (await snapshot(rt, mem)).items()
            if meta(v).get("user_id") != partition(me)
        }  # fmt: skip

        counts = await rt.user_data(groups).forget(str(me))
        assert (counts.memories, counts.archived, counts.backups) == (2, 1, 1)
        assert counts.backup_rows == 3

        header, contents = U.load_backup(info.path)
        assert stat.S_IMODE(info.path.stat().st_mode) == 0o600
        rows = [i for c in contents.values() for i in c.items]
        assert not any((i.metadata or {}).get("user_id") == partition(me) for i in rows)
        assert not any((i.metadata or {}).get("author") == str(me) for i in rows)
        assert header["counts"] == {name: len(c.items) for name, c in contents.items()}
        assert [b.path for b in U.list_backups(rt.config.backup_dir)] == [info.path]

        for path in (older, info.path):
            await U.restore_backup(rt.maintenance, path)
            now = await snapshot(rt, mem)
            assert [v[0] for v in now.values() if meta(v)["user_id"] == partition(me)] == []
            assert await rt.store.archive.count(view_of(partition(me))) == 0
            group_memory = now[mine["group_memory"]]
            assert group_memory[0] == "庚定下群规：周五聚餐" and meta(group_memory)["author"] == ""
            lost = sum(
                1 for k, v in theirs_before.items()
                if k != mine["group_memory"] and (now.get(k) or (None,))[0] != v[0]
            )  # fmt: skip
            STATS.items_lost += lost
            assert lost == 0
            assert await rt.store.archive.count(view_of(partition(other))) == 1
        # The user talks again after the forget: that is kept, backed up and restored.
        await rt.store.add(new_memory(partition(me), "user", "庚又回来了，喜欢石榴"))
        newer = await U.create_backup(rt.maintenance)
        await U.restore_backup(rt.maintenance, newer.path)
        texts = [
            v[0] for v in (await snapshot(rt, mem)).values() if meta(v)["user_id"] == partition(me)
        ]
        assert texts == ["庚又回来了，喜欢石榴"]  # new data is not blocked by the tombstone
        assert arch in {cov.name for cov in rt.maintenance.covered}
    finally:
        await rt.close()


async def test_an_archive_restore_never_brings_back_a_forgotten_users_row(
    tmp_path: Path,
) -> None:
    """A row that slipped past the forget (put back as it was) stays unrestorable."""
    me = 18171
    rt = make_runtime(tmp_path / "data")
    try:
        record = await rt.store.add(new_memory(partition(me), "user", "壬喜欢桂花"))
        await rt.store.update(partition(me), record.id, content="壬喜欢荷花")
        (row,) = await rt.store.archive.list(view_of(partition(me)))
        got = await rt.store.archive.get(row.id, with_vector=True)
        await rt.user_data(U.GroupStores.build(rt.config.file)).forget(str(me))
        await rt.store.archive.save(  # as it was: archived before the forget
            [(row.id, got[0].record, got[1])], reason="updated", archived_at=row.archived_at
        )
        with pytest.raises(U.ArchiveRestoreError, match="归档中没有"):
            await U.restore(rt.store, row.id, partition=partition(me))
        assert await rt.store.count(view_of(partition(me))) == 0
        STATS.inputs_tried += 1
    finally:
        await rt.close()


async def test_a_corrupt_tombstone_file_stops_every_restore(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path / "data")
    try:
        await rt.store.add(new_memory(partition(18181), "user", "癸喜欢菊花"))
        await U.reset_fingerprint(rt.maintenance)
        info = await U.create_backup(rt.maintenance)
        rt.forgotten.path.write_text("{not json", encoding="utf-8")
        with pytest.raises(U.ForgottenFileError, match="已损坏"):
            await U.restore_backup(rt.maintenance, info.path)
        assert await rt.store.count(view_of(partition(18181))) == 1
        STATS.faults_injected += 1
    finally:
        await rt.close()


# ---------------------------------------------------------------------------
# A forget interrupted by Chroma going down completes when run again
# ---------------------------------------------------------------------------


async def test_forget_with_chroma_down_fails_cleanly_and_completes_later(
    tmp_path: Path, chroma_server: ChromaServer, embed_server: EmbeddingServer
) -> None:
    me, other, gid = 18191, 18192, 28191
    rt = make_runtime(
        tmp_path / "data", mode="remote", chroma=chroma_server,
        vector_db_database=f"forget_down_{uuid.uuid4().hex[:8]}",
    )  # fmt: skip
    groups = U.GroupStores.build(rt.config.file)
    users = U.UserCommands(rt.user_data(groups), tmp_path / "exports")
    caller = U.ScopeRules().of_chat(U.target_from_ids(me))
    try:
        await seed_user(rt, groups, me, gid, "子")
        await seed_user(rt, groups, other, gid, "丑")
        theirs = await snapshot(rt, rt.store.name)
        theirs = {k: v for k, v in theirs.items() if meta(v)["user_id"] == partition(other)}
        await users.forget(caller, "")
        chroma_server.stop()
        STATS.faults_injected += 1
        try:
            reply = await users.forget(caller, "confirm")
        finally:
            chroma_server.start()
        assert reply.startswith("删除未完成：") and "Traceback" not in reply
        assert str(me) in await rt.forgotten.entries()  # the tombstone came first
        await users.forget(caller, "")
        done = await users.forget(caller, "confirm")
        assert done.startswith("已删除机器人保存的你的数据"), done
        assert await holdings(rt, groups, me, gid) == {
            "memories": 0, "archive": 0, "memo": "", "persona": [], "window": [],
            "stored_messages": 0, "labels": {}, "episodes": ([], []),
        }  # fmt: skip
        now = await snapshot(rt, rt.store.name)
        lost = sum(1 for k, v in theirs.items() if now.get(k) != v)
        STATS.items_lost += lost
        assert lost == 0
    finally:
        await rt.close()
