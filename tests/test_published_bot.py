"""A bot that ran the published ``amrita-plugin-memory`` switches to this plugin on its data.

The committed fixture ``tests/published/bot-0.8.1`` (written by the published plugin 0.8.1
itself, see its README) is copied into a bot project with this plugin, the way an operator
switches: ``ambot orm upgrade``, then ``ambot run`` (nonebot-plugin-orm's start-up check
on, ``EMBED_MISMATCH_POLICY=auto``: the embedding service's address changed, so the vectors
are re-embedded once). A OneBot V11 client on the reverse WebSocket, the scripted chat
model and the WebUI's admin API then check every item through this plugin's chat tools
and commands: the memories are listed, read, updated, deleted into the archive, exported
and forgotten; a personal memory whose origin was never recorded is not shown in a group;
the memos, the knowledge entry and the profile are there. A second start does nothing again.

Also here: a kill (``SIGKILL``) half-way through the rewrite of the memories (remote mode,
the session's ``chroma run`` behind a proxy that holds the second page's write) loses
nothing and the next start finishes it, each memory exactly once; a database of neither
plugin, or at a revision this plugin does not know, is refused by ``ambot orm upgrade``
with nothing altered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tests.botproject import BotProject, ambot_ok, make_runtime, snapshot
from tests.console_bot import PASSWORD, USER, RunningBot, api_data, run_async, stored_memories
from tests.events import BOT_ID
from tests.helpers import seen_by_model
from tests.published_data import (
    CAT,
    CLUB,
    GROUP,
    GROUP_MEMO,
    KNOWLEDGE_TITLE,
    MEMBER,
    MEMO,
    MEMORY_COLLECTION,
    OWNER,
    PEANUT,
    PROFILE_LINE,
    TRIP,
    copy_fixture,
    published_collections,
)
from tests.servers import ChatServer, ChromaProxy, ChromaServer, Reply
from tests.test_walkthrough import (
    OneBotClient,
    copy_example_chat,
    group_mention,
    private_message,
    until,
)

CAT_NOW = "用户的猫叫年糕，是只三岁的橘猫"
SENT = "周五晚上八点有读书会，别忘了带书。"  # what the published loop sent the owner
DB = ("data", "nonebot_plugin_orm", "db.sqlite3")
EXTRACTION = "[memory-extraction]"


def switched_project(root: Path, chat_url: str, **env: Any) -> BotProject:
    """The fixture copied into a bot project with this plugin, as an operator switches."""
    project = BotProject(root)
    copy_fixture(root)
    copy_example_chat(root, chat_url)
    # Stand-ins for the published plugin's prompt files (its texts are not in the repository).
    prompt = root / "config" / "amrita_plugin_memory" / "prompt"
    prompt.mkdir(parents=True)
    (prompt / "README.md").write_text("# 提示词模板\n", encoding="utf-8")
    (prompt / "subconscious_main.md.jinja2").write_text("{{ current_date }}\n", encoding="utf-8")
    project.write_env(
        ALEMBIC_STARTUP_CHECK="true",  # nonebot-plugin-orm's check, as for every operator
        EMBED_MISMATCH_POLICY="auto",
        # The member too: Amrita's per-user rate limit on commands spares superusers only,
        # and a test sends its commands quicker than a person (superusers see no more here).
        SUPERUSERS=f'["{OWNER}", "{MEMBER}"]',
        **env,
    )
    return project


def no_extraction(body: dict[str, Any]) -> Reply | None:
    """Active memory's extraction requests (after answered turns) learn nothing here."""
    first = (body.get("messages") or [{}])[0]
    return Reply.text("[]") if str(first.get("content", "")).startswith(EXTRACTION) else None


class Chat:
    """The OneBot side of a running bot: chat turns with scripted tool calls, commands."""

    def __init__(self, client: OneBotClient, server: ChatServer) -> None:
        self.client = client
        self.server = server

    async def turn(self, event: dict[str, Any], *replies: Reply) -> list[dict[str, Any]]:
        """One chat turn whose model makes ``replies``; the tool results, in order."""
        self.server.clear()
        self.server.set_rule(no_extraction)
        self.server.script(*replies, Reply.text("好的"))
        before = len(self.client.recorder.sent())
        await self.client.ws.send(json.dumps(event))
        await until(
            lambda: self.server.pending == 0 and len(self.client.recorder.sent()) > before,
            f"the turn {event['raw_message']!r}",
        )
        # This turn's tool results: what the model's requests add after the first one's
        # messages (the chat history, the published era's turns included, comes before;
        # tool call ids alone cannot tell them apart, the fixture's chat server made them too).
        requests = [r for r in self.server.requests if r.get("tools")]
        if not requests:
            return []
        added = requests[-1]["messages"][len(requests[0]["messages"]) :]
        return [json.loads(m["content"]) for m in added if m["role"] == "tool"]

    async def tool(self, event: dict[str, Any], name: str, **args: Any) -> dict[str, Any]:
        results = await self.turn(event, Reply.tool_call(name, args))
        (result,) = results
        return result

    async def command(self, event: dict[str, Any], replies: int = 1) -> list[str]:
        """A ``/memory …`` command; the texts the bot sent for it."""
        before = len(self.client.recorder.sent())
        await self.client.ws.send(json.dumps(event))
        await until(
            lambda: len(self.client.recorder.sent()) >= before + replies,
            f"the answer to {event['raw_message']!r}",
        )
        return self.client.recorder.texts()[before:]

    def system_prompts(self) -> list[str]:
        return [str(r["messages"][0]["content"]) for r in self._chat_requests()]

    def seen(self) -> list[str]:
        """What the model saw of the plugin: the system prompt, then the turn's message
        (the per-turn blocks stand after the history, ``adapters/turn_context``)."""
        return [seen_by_model(r) for r in self._chat_requests()]

    def _chat_requests(self) -> list[dict[str, Any]]:
        return [
            r
            for r in self.server.requests
            if r.get("tools") and not str(r["messages"][0]["content"]).startswith(EXTRACTION)
        ]


@contextlib.asynccontextmanager
async def onebot(bot: RunningBot, server: ChatServer) -> AsyncIterator[Chat]:
    url = f"ws://127.0.0.1:{bot.port}/onebot/v11/ws"
    headers = {"X-Self-ID": str(BOT_ID), "X-Client-Role": "Universal"}
    async with websockets.connect(url, additional_headers=headers) as ws:
        client = OneBotClient(ws)
        client.recorder.friends = {OWNER, MEMBER}
        client.recorder.roles[(GROUP, OWNER)] = "owner"
        serving = asyncio.create_task(client.serve())
        try:
            yield Chat(client, server)
        finally:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving


def private(text: str, user: int = OWNER) -> dict[str, Any]:
    return private_message(text, user)


def in_group(text: str, user: int = OWNER) -> dict[str, Any]:
    return group_mention(
        text, user_id=user, group_id=GROUP, role="owner" if user == OWNER else "member"
    )


def texts(rows: dict[str, Any]) -> list[str]:
    return sorted(doc for doc, _ in rows.values())


async def wait_for_log(bot: RunningBot, line: str) -> None:
    await until(lambda: line in bot.log() or bot.proc is None or bot.proc.poll() is not None, line)
    assert line in bot.log(), bot.log()[-3000:]


async def test_a_published_bot_switches_over_and_keeps_everything(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    project = switched_project(tmp_path / "bot", chat_server.base_url)
    upgrade = ambot_ok(project.command("orm", "upgrade"))
    assert (
        "已接管已发布插件的备忘录表 amrita_plugin_memory_user_memo：2 条备忘录原样保留" in upgrade
    )
    assert "保留运行次数 1、摘要 1 条、待转达消息 1 条、知识建议 1 条" in upgrade
    assert "丢弃调度状态 penalty, last_run_ts, idle_planner" in upgrade
    assert "没有检测到新的升级操作" in ambot_ok(project.command("orm", "check"))

    bot = RunningBot(project, l3=False)  # the published config (L3 on, knowledge on) as it is
    bot.start()
    try:
        log = bot.log()
        assert "发现 4 条由已发布的 amrita-plugin-memory 写入的记忆" in log
        assert "已接管已发布插件写入的 4 条记忆" in log
        assert "已发布的 amrita-plugin-memory 记录" in log and "重映射完成" in log
        assert "提示词模板用的是它自己的变量和工具" in log
        await wait_for_log(bot, "已导入已发布插件的 1 条知识")
        async with onebot(bot, chat_server) as chat:
            await check_private_chat(chat)
            await check_group_chat(chat)
            await check_member(chat)
        async with httpx.AsyncClient(base_url=bot.url, timeout=60) as client:
            auth = await client.post(
                "/api/auth/login", json={"username": USER, "password": PASSWORD}
            )
            assert auth.json()["success"]
            profile = api_data(await client.get("/api/memory/profile"))
            assert PROFILE_LINE in json.dumps(profile, ensure_ascii=False)
            (entry,) = api_data(await client.get("/api/memory/knowledge"))["entries"]
            assert entry["title"] == KNOWLEDGE_TITLE
            for uni_id, text in (
                (f"QQPlatform_Private_{OWNER}", MEMO),
                (f"QQPlatform_Group_{GROUP}", GROUP_MEMO),
            ):
                memo = api_data(await client.get(f"/api/memory/memos/{uni_id}"))
                assert text in json.dumps(memo, ensure_ascii=False)
        assert "Traceback" not in bot.log()
    finally:
        bot.stop()

    live, archived = stored_memories(project)
    assert texts(live) == [CAT_NOW]
    assert texts(archived) == sorted([CAT, CLUB, TRIP])  # a version, two deletes
    backups = sorted((project.data_dir / "backups").glob("embed_backup_*.json"))
    assert len(backups) == 2  # before the adoption, before the re-embedding
    for backup in backups:  # the forget rewrote them: the member is in none
        assert PEANUT not in backup.read_text(encoding="utf-8")
    assert CAT in backups[0].read_text(encoding="utf-8")

    # A second start takes nothing over again.
    bot = RunningBot(project, l3=False)
    bot.start()
    try:
        await wait_for_log(bot, "Knowledge base checked: 1 entries")
        log = bot.log()
        assert "已发布" not in log.replace("已发布的 amrita-plugin-memory 切换", "")
        assert "Traceback" not in log
    finally:
        bot.stop()
    assert sorted((project.data_dir / "backups").glob("embed_backup_*.json")) == backups


async def check_private_chat(chat: Chat) -> None:
    listed = await chat.tool(private("我都记了什么"), "list_memory", limit=10, scope="user")
    assert listed["ok"] and listed["total"] == 2
    mine = {m["content"]: m for m in listed["memories"]}
    assert mine.keys() == {CAT, TRIP}
    assert mine[CAT]["tags"] == ["宠物", "猫"] and mine[CAT]["importance"] == "high"
    assert mine[CAT]["created_at"].startswith("2026-12-03T09:42")  # the published plugin's date
    # The personal memo is in the prompt of every private turn; the message the published
    # loop sent was waiting for this first turn, as it would have under the published plugin.
    assert any(MEMO in p for p in chat.system_prompts())
    assert any("SUBCONSCIOUS_NOTES" in p and SENT in p for p in chat.seen())

    found = await chat.tool(
        private("我的猫叫什么"), "read_memory", query="我的猫叫什么名字", scope="user"
    )
    assert found["memories"][0]["content"] == CAT and "distance" in found["memories"][0]

    cat, trip = mine[CAT]["id"], mine[TRIP]["id"]
    changed = await chat.tool(
        private("年糕三岁了"), "update_memory", id=cat, scope="user", content=CAT_NOW
    )
    assert changed["ok"] and changed["memory"]["content"] == CAT_NOW
    gone = await chat.tool(private("出差取消了"), "delete_memory", id=trip, scope="user")
    assert gone["ok"]
    listed = await chat.tool(private("现在呢"), "list_memory", limit=10, scope="user")
    assert [m["content"] for m in listed["memories"]] == [CAT_NOW]

    archive = "\n".join(await chat.command(private("/memory user archive")))
    assert TRIP in archive and CAT in archive
    assert MEMO in "\n".join(await chat.command(private("/memory memo")))
    listing = "\n".join(await chat.command(private("/memory user list")))
    assert CAT_NOW in listing

    entries = await chat.tool(private("知识库里有什么"), "knowledge_list")
    (entry,) = entries["entries"]
    assert entry["title"] == KNOWLEDGE_TITLE
    read = await chat.tool(private("年糕吃什么"), "knowledge_read", kid=entry["kid"])
    assert read["lines"][-1] == "4: 不能喂牛奶。" and "3: ---" in read["lines"]

    before = len(chat.client.recorder.uploads)
    await chat.command(private("/memory user export"))
    await until(lambda: len(chat.client.recorder.uploads) > before, "the export file")
    exported = chat.client.recorder.uploads[-1][1]
    for text in (CAT_NOW, MEMO, PROFILE_LINE):
        assert text in exported
    assert '"宠物"' in exported  # tags as a list, not the published plain string


async def check_group_chat(chat: Chat) -> None:
    # The owner's personal memories were never said here (or not known to be): not shown.
    mine = await chat.tool(
        in_group("我的猫叫什么"), "read_memory", query="我的猫叫什么名字", scope="user"
    )
    assert mine["ok"] and mine["memories"] == []
    listed = await chat.tool(in_group("我都记了什么"), "list_memory", limit=10, scope="user")
    assert listed["total"] == 0
    shared = await chat.tool(in_group("群里记了什么"), "list_memory", limit=10, scope="group")
    (club,) = shared["memories"]
    assert club["content"] == CLUB and club["tags"] == ["活动"]
    assert any(GROUP_MEMO in p for p in chat.system_prompts())  # the group memo, in a group turn
    assert not any(MEMO in p for p in chat.system_prompts())  # never the personal one

    assert GROUP_MEMO in "\n".join(await chat.command(in_group("/memory group memo")))
    assert CLUB in "\n".join(await chat.command(in_group("/memory group list")))
    deleted = "\n".join(await chat.command(in_group(f"/memory group delete {club['id']}")))
    assert "归档" in deleted or "删除" in deleted
    shared = await chat.tool(in_group("群里还记着吗"), "list_memory", limit=10, scope="group")
    assert shared["total"] == 0


async def check_member(chat: Chat) -> None:
    # Said in the group, origin never recorded: the member's private chat only.
    hidden = await chat.tool(
        in_group("我对什么过敏", MEMBER), "read_memory", query="花生过敏", scope="user"
    )
    assert hidden["memories"] == []
    seen = await chat.tool(
        private("我对什么过敏", MEMBER), "read_memory", query="花生过敏", scope="user"
    )
    assert seen["memories"][0]["content"] == PEANUT

    preview = "\n".join(await chat.command(private("/memory user forget", MEMBER)))
    assert "confirm" in preview
    done = "\n".join(await chat.command(private("/memory user forget confirm", MEMBER)))
    assert "删除" in done or "遗忘" in done
    after = await chat.tool(
        private("还记得吗", MEMBER), "read_memory", query="花生过敏", scope="user"
    )
    assert after["memories"] == []


# ---------------------------------------------------------------------------
# ambot orm upgrade on databases it must not touch
# ---------------------------------------------------------------------------


def dump(project: BotProject) -> list[str]:
    with contextlib.closing(sqlite3.connect(project.root.joinpath(*DB))) as conn:
        return list(conn.iterdump())


@pytest.mark.parametrize("damage", ["unknown_column", "newer_revision"])
def test_an_unknown_database_is_refused_untouched(tmp_path: Path, damage: str) -> None:
    project = BotProject(tmp_path / "bot")
    copy_fixture(project.root)
    with contextlib.closing(sqlite3.connect(project.root.joinpath(*DB))) as conn:
        if damage == "unknown_column":
            conn.execute("ALTER TABLE amrita_plugin_memory_user_memo ADD COLUMN mood TEXT")
        else:  # a later release of the published plugin, say, with a revision of its own
            conn.execute(
                "UPDATE alembic_version SET version_num = 'deadbeef0001' "
                "WHERE version_num = '6004d221a7de'"
            )
        conn.commit()
    before = dump(project)
    result = project.command("orm", "upgrade")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    if damage == "unknown_column":
        assert "amrita_plugin_memory_user_memo" in output and "mood" in output
        assert "没有做任何修改" in output
    else:
        assert "deadbeef0001" in output
    assert dump(project) == before


# ---------------------------------------------------------------------------
# A kill half-way through the adoption of the memories (remote mode)
# ---------------------------------------------------------------------------

EXTRA = 400  # two pages of the rewrite (200 rows each) beyond the fixture's four


def published_rows() -> tuple[dict[str, Any], list[tuple[str, str, dict[str, Any], list[float]]]]:
    """The fixture's memories and ``EXTRA`` more in the published plugin's form (the form its
    ``write_memory`` stores: plain tags, ISO time with microseconds, nothing else), with the
    vectors the test embedding server gives the fixture's model."""
    from tests.servers import embed_text

    published = published_collections()[MEMORY_COLLECTION]
    rows = list(
        zip(
            published.ids,
            [d or "" for d in published.documents],
            published.metadatas,
            published.embeddings,
            strict=True,
        )
    )
    for n in range(EXTRA):
        text = f"用户第 {n} 次提到喜欢的书"
        meta = {
            "scope": "user",
            "user_id": f"QQPlatform_Private_{30000 + n % 7}",
            "tags": "阅读,书",
            "importance": ("low", "medium", "high")[n % 3],
            "created_at": f"2026-11-{1 + n % 28:02d}T08:{n % 60:02d}:00.{n:06d}+00:00",
        }
        rows.append((f"{n:032x}", text, meta, embed_text(text, len(published.embeddings[0]))))
    return published.metadata, rows


async def test_a_kill_half_way_through_the_adoption_loses_nothing(
    tmp_path: Path, chroma_server: ChromaServer, chroma_proxy: ChromaProxy
) -> None:
    import functools
    import os
    import signal

    from amrita_plugin_memory.storage.published.memories import (
        META_FORMAT,
        META_FORMAT_CURRENT,
        adopted_metadata,
    )

    project = BotProject(tmp_path / "bot")
    database = f"adopt_{uuid.uuid4().hex[:8]}"
    on_proxy = {
        "VECTOR_DB_TYPE": "remote",
        "VECTOR_DB_SERVER": chroma_proxy.host,
        "VECTOR_DB_PORT": chroma_proxy.port,
        "VECTOR_DB_DATABASE": database,
        "EMBED_MISMATCH_POLICY": "never",  # the recorded service is gone; vectors kept
    }
    project.write_env(**on_proxy)
    ambot_ok(project.command("orm", "upgrade"))
    collection_meta, rows = published_rows()

    def direct() -> Any:  # a runtime on the server itself, not through the proxy
        return make_runtime(
            tmp_path / "direct", mode="remote", chroma=chroma_server, vector_db_database=database
        )

    async def seed() -> None:
        rt = direct()
        try:
            col = await rt.connection.get_collection(rt.store.name)
            await rt.connection.run(col.modify, metadata=collection_meta)
            await rt.connection.run(
                functools.partial(
                    col.add,
                    ids=[r[0] for r in rows],
                    documents=[r[1] for r in rows],
                    metadatas=[r[2] for r in rows],
                    embeddings=[r[3] for r in rows],
                )
            )
        finally:
            await rt.close()

    async def state() -> tuple[dict[str, Any], dict[str, Any]]:
        rt = direct()
        try:
            return await snapshot(rt, rt.store.name), await rt.store.get_metadata()
        finally:
            await rt.close()

    run_async(seed())
    chroma_proxy.hold_write("update", skip=1)  # the first page lands, the second is held
    killed = project.spawn_ambot("run")
    try:
        await until(chroma_proxy.write_held.is_set, "the second page of the rewrite")
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        await asyncio.to_thread(killed.wait)
        chroma_proxy.drop_held_write()

    snap, meta = run_async(state())
    assert len(snap) == len(rows)
    halfway = [i for i, (_, m) in snap.items() if m and "updated_at" in m]
    assert len(halfway) == 200  # one page rewritten, then the kill
    assert meta.get(META_FORMAT) != META_FORMAT_CURRENT
    backups = sorted(project.backup_dir.glob("embed_backup_*.json"))
    assert len(backups) == 1 and meta["published_adoption_backup"] == backups[0].name

    bot = RunningBot(project, l3=False, **on_proxy)
    bot.start()
    try:
        assert f"继续上次中断的接管：还有 {len(rows) - 200} 条" in bot.log()
        assert f"已接管已发布插件写入的 {len(rows) - 200} 条记忆" in bot.log()
    finally:
        bot.stop()

    snap, meta = run_async(state())
    assert sorted(snap) == sorted(r[0] for r in rows)  # every memory, exactly once
    for memory_id, text, original, _ in rows:
        assert snap[memory_id] == (text, adopted_metadata(original))
    assert meta[META_FORMAT] == META_FORMAT_CURRENT
    assert sorted(project.backup_dir.glob("embed_backup_*.json")) == backups  # no second backup
