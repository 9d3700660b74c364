"""The admin API of the memory console against a real bot process.

One ``ambot run`` per module (local ChromaDB, WebUI with a password, the L3
loop with its knowledge base) serves every test; requests go through the
WebUI's real login middleware with ``httpx``. The bot's data are seeded
before it starts, and the tests read them back through the API, through
``ambot memory`` subprocesses (which must talk to the running bot) and, once
the bot has stopped, straight from ChromaDB.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
import websockets

from tests.botproject import ALICE, BOB, GROUP, BotProject, memory_meta, seed, snapshot
from tests.conftest import EMBED
from tests.console_bot import (
    RunningBot,
    api_data,
    api_error,
    login,
    run_async,
    seed_episodes,
    webui_session,
)
from tests.lazy import lazy_import
from tests.reliability_stats import STATS

E = lazy_import("amrita_plugin_memory.embedding", "amrita_plugin_memory.upkeep.rekey")
MEM = "amrita_user_memory"
TIMELINE_USER = "QQPlatform_Private_10077"
TIMELINE_GROUP = "QQPlatform_Group_20077"
TOKEN_FILE = ".console_token.json"


def _alice(i: int) -> tuple[str, str, dict[str, Any]]:
    meta = memory_meta(ALICE, created_at=f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00")
    return f"a{i:04d}", f"爱丽丝的记忆 {i}：喜欢第 {i} 号苹果", meta


@pytest.fixture(scope="module")
def bot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBot]:
    project = BotProject(tmp_path_factory.mktemp("console") / "bot")

    async def prepare() -> None:
        rt = project.runtime()
        try:
            items = [_alice(i) for i in range(30)]
            items += [(f"b{i}", f"鲍勃的记忆 {i}", memory_meta(BOB)) for i in range(3)]
            items += [(f"g{i}", f"群记忆 {i}", memory_meta(GROUP, "group")) for i in range(2)]
            await seed(rt, MEM, items)
            await E.reset_fingerprint(rt.maintenance)
            await E.migrate_partition_keys(rt.store)
        finally:
            await rt.close()

    EMBED.reset()
    run_async(prepare())
    running = RunningBot(project, EMBEDDING_TIMEOUT_SECONDS="2")
    running.start()
    yesterday = time.time() - 86400
    seed_episodes(
        project,
        [
            {"id": "e" * 32, "chat": TIMELINE_USER, "origin": "private", "start": yesterday,
             "end": yesterday + 900, "summary": "昨天聊了面试", "topics": ["面试"],
             "participants": ["10077"]},
            {"id": "f" * 32, "chat": TIMELINE_GROUP, "origin": "group:20077",
             "start": yesterday, "end": yesterday + 600, "summary": "群里聊了聚餐",
             "source": "extract", "participants": ["10077"]},
            {"id": "0" * 32, "chat": TIMELINE_USER, "origin": "private",
             "start": yesterday - 40 * 86400, "end": yesterday - 40 * 86400 + 60,
             "summary": "四十天前的对话"},
        ],
    )  # fmt: skip
    yield running
    running.stop()
    EMBED.reset()


@pytest.fixture(scope="module")
def api(bot: RunningBot) -> Iterator[httpx.Client]:
    """One logged-in WebUI session for the module (a login costs a bcrypt check)."""
    with webui_session(bot, timeout=30) as client:
        yield client


data = api_data
error = api_error


# ---------------------------------------------------------------------------
# Access
# ---------------------------------------------------------------------------

ENDPOINTS = [
    ("GET", "/api/memory/status"),
    ("GET", "/api/memory/partitions"),
    ("GET", f"/api/memory/memories?partition={ALICE}"),
    ("PATCH", "/api/memory/memories/a0001"),
    ("DELETE", "/api/memory/memories/a0001"),
    ("GET", "/api/memory/memos"),
    ("GET", f"/api/memory/memos/{ALICE}"),
    ("PUT", f"/api/memory/memos/{ALICE}"),
    ("DELETE", f"/api/memory/memos/{ALICE}"),
    ("GET", "/api/memory/knowledge"),
    ("POST", "/api/memory/knowledge"),
    ("GET", "/api/memory/knowledge/abcdef123456"),
    ("PATCH", "/api/memory/knowledge/abcdef123456"),
    ("DELETE", "/api/memory/knowledge/abcdef123456"),
    ("GET", "/api/memory/profile"),
    ("PUT", "/api/memory/profile/body"),
    ("GET", "/api/memory/personas"),
    ("GET", "/api/memory/personas/10001"),
    ("PATCH", "/api/memory/personas/10001"),
    ("DELETE", "/api/memory/personas/10001"),
    ("GET", "/api/memory/self"),
    ("POST", "/api/memory/self"),
    ("DELETE", "/api/memory/self/1"),
    ("GET", "/api/memory/backups"),
    ("POST", "/api/memory/backups"),
    ("POST", "/api/memory/backups/x.json/restore"),
    ("POST", "/api/memory/reindex"),
    ("GET", "/api/memory/jobs/current"),
    ("GET", "/api/memory/timeline?user=10001"),
    ("GET", "/api/memory/ui/console.js"),
]


def test_every_endpoint_needs_the_webui_login_or_the_local_token(bot: RunningBot) -> None:
    with httpx.Client(base_url=bot.url, timeout=30) as anonymous:
        for method, path in ENDPOINTS:
            resp = anonymous.request(method, path, json={"content": "x"})
            assert resp.status_code == 401, (method, path, resp.text)
            assert resp.json() == {"code": 401, "message": "未授权", "success": False, "data": None}
            forged = anonymous.request(method, path, headers={"X-Amrita-Memory-Token": "guess"})
            assert forged.status_code == 401 and forged.json()["message"] == "本地令牌无效"
            STATS.inputs_tried += 2
        assert error(login(anonymous, "wrong password"), 401) == "用户名或密码错误"
    # Nothing was changed by any of these requests.
    with httpx.Client(base_url=bot.url, timeout=30) as client:
        login(client)
        page = data(client.get("/api/memory/memories", params={"partition": ALICE}))
        assert page["total"] == 30


def test_timeline_of_a_user_and_of_a_group(api: httpx.Client) -> None:
    """The route of ``console/timeline`` (its days in detail: tests/test_console_timeline.py):
    episodes kept by the bot's store, by the owner's day, a chat's own only; the seeded
    memories (written 2025-01-01) are outside every window; bad parameters are 400s."""
    day = datetime.fromtimestamp(time.time() - 86400).date().isoformat()
    mine = data(api.get("/api/memory/timeline", params={"user": "10077"}))
    assert (mine["kind"], mine["partition"], mine["days"]) == ("user", TIMELINE_USER, 30)
    [entry] = mine["timeline"]
    assert entry["day"] == day and entry["memories"] == []
    [episode] = entry["episodes"]
    assert (episode["summary"], episode["topics"], episode["source"]) == (
        "昨天聊了面试",
        ["面试"],
        "model",
    )
    assert episode["start_at"][:10] == day and not episode["archived"]
    longer = data(api.get("/api/memory/timeline", params={"user": "10077", "days": 60}))
    assert [e["summary"] for d in longer["timeline"] for e in d["episodes"]] == [
        "昨天聊了面试", "四十天前的对话",
    ]  # fmt: skip
    group = data(api.get("/api/memory/timeline", params={"group": "20077", "days": 7}))
    assert group["partition"] == TIMELINE_GROUP
    assert [e["summary"] for d in group["timeline"] for e in d["episodes"]] == ["群里聊了聚餐"]
    alice = data(api.get("/api/memory/timeline", params={"user": "10001", "days": 366}))
    assert alice["timeline"] == []  # her memories were written in 2025
    assert error(api.get("/api/memory/timeline"), 400) == "请给出 user=<QQ 号> 或 group=<群号> 之一"
    assert "days" in error(api.get("/api/memory/timeline", params={"user": "1", "days": 0}), 400)
    STATS.inputs_tried += 6


def test_status_and_partitions(api: httpx.Client) -> None:
    status = data(api.get("/api/memory/status", params={"fresh": 1}))
    assert status["fingerprint"]["match"] is True and status["fingerprint"]["state"] == "一致"
    assert status["memory_total"] == 35
    assert {"partition": ALICE, "scope": "user", "count": 30} in status["distribution"]
    assert status["key_format"]["stored"] == status["key_format"]["current"]
    l3 = status["subconscious"]
    assert l3["enabled"] and l3["target_user_id"] == "10001" and l3["knowledge_enabled"]
    assert l3["total_runs"] == 0 and l3["pending_notes"] == [] and l3["suggestions"] == 0
    groups = status["group_awareness"]
    assert groups["group_context"] is False and groups["available"] is True
    assert groups["personas"] == 0 and groups["self_entries"] == 0
    assert groups["private_memories_in_groups"] is False
    assert groups["group_memories_across_groups"] is False
    assert status["maintenance"] is False

    parts = data(api.get("/api/memory/partitions", params={"fresh": 1}))
    assert parts["total"] == 3 and parts["memories"] == 35
    first = parts["partitions"][0]
    assert first["partition"] == ALICE and first["count"] == 30 and first["kind"] == "user"
    assert first["number"] == "10001" and first["scopes"] == {"user": 30}
    assert first["last_update"].startswith("2025-01-01")
    assert {p["partition"]: p["kind"] for p in parts["partitions"]}[GROUP] == "group"


# ---------------------------------------------------------------------------
# Memories
# ---------------------------------------------------------------------------


def test_memory_table_pages_newest_first_and_searches(api: httpx.Client) -> None:
    def page(**query: Any) -> Any:
        return data(api.get("/api/memory/memories", params={"partition": ALICE, **query}))

    first = page(limit=10)
    assert first["mode"] == "list" and first["total"] == 30
    assert [m["id"] for m in first["memories"]] == [f"a{i:04d}" for i in range(29, 19, -1)]
    row = first["memories"][0]
    assert row["content"] == "爱丽丝的记忆 29：喜欢第 29 号苹果" and row["partition"] == ALICE
    assert row["tags"] == ["测试"] and row["importance"] == "medium" and row["scope"] == "user"
    assert row["origin"] == "private" and row["created_at"].startswith("2025-01-01T00:00:29")
    last = page(offset=25, limit=10)
    assert [m["id"] for m in last["memories"]] == [f"a{i:04d}" for i in range(4, -1, -1)]
    assert page(offset=30)["memories"] == []

    found = page(q="喜欢第 7 号苹果", limit=3)
    assert found["mode"] == "search" and len(found["memories"]) == 3
    assert found["memories"][0]["id"] == "a0007" and "distance" in found["memories"][0]
    assert page(q="喜欢第 7 号苹果", offset=3, limit=3)["memories"][0]["id"] != "a0007"
    assert page(q="   ")["mode"] == "list"  # a blank search is the list

    group = data(api.get("/api/memory/memories", params={"partition": GROUP}))
    assert {m["id"] for m in group["memories"]} == {"g0", "g1"}

    # A date range (the owner's days): every memory of 2025-01-01, newest first; none after.
    day = page(since="2025-01-01", until="2025-01-01", limit=5)
    assert day["total"] == 30 and [m["id"] for m in day["memories"]][:2] == ["a0029", "a0028"]
    assert page(since="2025-01-02")["total"] == 0
    dated = page(q="喜欢第 7 号苹果", since="2025-01", until="2025-01", limit=3)
    assert dated["mode"] == "search" and dated["memories"][0]["id"] == "a0007"
    assert page(q="喜欢第 7 号苹果", until="2024-12-31")["memories"] == []


@pytest.mark.parametrize(
    ("query", "status", "message"),
    [
        ({"partition": "QQPlatform_Private_424242"}, 404, "不存在"),
        ({}, 400, "缺少参数 partition"),
        ({"partition": "x" * 129}, 400, "过长"),
        ({"partition": "QQ\x00Private"}, 400, "不可见字符"),
        ({"partition": ALICE, "limit": 0}, 400, "limit"),
        ({"partition": ALICE, "limit": 101}, 400, "limit"),
        ({"partition": ALICE, "limit": "ten"}, 400, "必须是整数"),
        ({"partition": ALICE, "offset": -1}, 400, "offset"),
        ({"partition": ALICE, "q": "问" * 501}, 400, "过长"),
        ({"partition": ALICE, "since": "上周"}, 400, "since"),
        ({"partition": ALICE, "since": "2025-02-01", "until": "2025-01-01"}, 400, "晚于"),
    ],
)
def test_hostile_listing_queries(api: httpx.Client, query: Any, status: int, message: str) -> None:
    assert message in error(api.get("/api/memory/memories", params=query), status)


def test_edit_and_delete_a_memory(api: httpx.Client, bot: RunningBot) -> None:
    patched = data(
        api.patch(
            "/api/memory/memories/a0003",
            json={
                "content": "爱丽丝改了口味：喜欢青苹果",
                "tags": ["口味", "水果"],
                "importance": "high",
            },
        )
    )["memory"]
    assert patched["content"] == "爱丽丝改了口味：喜欢青苹果" and patched["importance"] == "high"
    assert patched["tags"] == ["口味", "水果"] and patched["partition"] == ALICE
    assert patched["created_at"].startswith("2025-01-01T00:00:03")
    assert patched["updated_at"] > patched["created_at"]
    # The new text is what a search now finds (re-embedded).
    hits = data(api.get("/api/memory/memories", params={"partition": ALICE, "q": "青苹果"}))
    assert hits["memories"][0]["id"] == "a0003"
    # With the partition given, another partition's id is "not found".
    assert "不存在" in error(
        api.patch(
            "/api/memory/memories/a0004", params={"partition": BOB}, json={"importance": "low"}
        ),
        404,
    )

    assert data(api.delete("/api/memory/memories/a0005")) == {
        "deleted": "a0005",
        "partition": ALICE,
    }
    assert "不存在" in error(api.delete("/api/memory/memories/a0005"), 404)
    page = data(api.get("/api/memory/memories", params={"partition": ALICE, "limit": 100}))
    assert page["total"] == 29 and "a0005" not in {m["id"] for m in page["memories"]}
    # Deleted, not lost: in the archive with its reason, restorable.
    (row,) = data(api.get("/api/memory/archive", params={"memory_id": "a0005"}))["rows"]
    assert (row["id"], row["reason"], row["reason_text"]) == ("a0005", "deleted", "已删除")
    assert row["partition"] == ALICE and row["content"]

    log = bot.log()
    assert f"[Memory] 控制台 WebUI 用户 admin：修改记忆 partition={ALICE} id=a0003" in log
    assert f"删除记忆 partition={ALICE} id=a0005" in log
    assert "青苹果" not in log  # never the text


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({}, 400, "至少提供"),
        ({"content": ""}, 400, "不能为空"),
        ({"content": "长" * 2001}, 400, "过长"),
        ({"content": 42}, 400, "必须是字符串"),
        ({"importance": "urgent"}, 400, "无效"),
        ({"tags": [f"t{i}" for i in range(11)]}, 400, "标签过多"),
        ({"tags": ["长" * 33]}, 400, "过长"),
        ({"tags": {"a": 1}}, 400, "字符串数组"),
        ({"scope": "group"}, 400, "未知字段"),
        (["content"], 400, "JSON 对象"),
    ],
)
def test_hostile_memory_edits_change_nothing(
    api: httpx.Client, body: Any, status: int, message: str
) -> None:
    before = data(api.get("/api/memory/memories", params={"partition": BOB}))
    assert message in error(api.patch("/api/memory/memories/b1", json=body), status)
    assert data(api.get("/api/memory/memories", params={"partition": BOB})) == before


def test_hostile_requests_are_refused(api: httpx.Client, bot: RunningBot) -> None:
    long_id = "/api/memory/memories/" + "x" * 65
    assert "过长" in error(api.patch(long_id, json={"importance": "low"}), 400)
    assert "过长" in error(api.delete("/api/memory/memories/" + "x" * 65), 400)
    assert "不存在" in error(api.delete("/api/memory/memories/no-such-id"), 404)
    not_json = api.patch(
        "/api/memory/memories/b1", content=b"importance=low", headers={"Content-Type": "text/plain"}
    )
    assert "JSON" in error(not_json, 415)
    broken = api.patch(
        "/api/memory/memories/b1", content=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert "不是合法的 JSON" in error(broken, 400)
    cross_site = api.delete("/api/memory/memories/b1", headers={"Origin": "http://evil.example"})
    assert error(cross_site, 403) == "跨站请求被拒绝"
    # There is no GET that changes anything.
    assert api.get("/api/memory/memories/b1").status_code == 404
    assert data(api.get("/api/memory/memories", params={"partition": BOB}))["total"] == 3


# ---------------------------------------------------------------------------
# Memos, knowledge base, profile
# ---------------------------------------------------------------------------


def test_memos(api: httpx.Client, bot: RunningBot) -> None:
    empty = data(api.get(f"/api/memory/memos/{BOB}"))
    assert empty["exists"] is False and empty["content"] == "" and empty["max_chars"] == 1000
    saved = data(api.put(f"/api/memory/memos/{BOB}", json={"content": "  鲍勃：周三开会  "}))
    assert saved["content"] == "鲍勃：周三开会" and saved["chars"] == 7 and saved["kind"] == "user"
    data(api.put(f"/api/memory/memos/{GROUP}", json={"content": "群规：不刷屏"}))
    listing = data(api.get("/api/memory/memos"))
    assert {m["uni_id"]: m["chars"] for m in listing["memos"]} == {BOB: 7, GROUP: 6}
    assert listing["memos"][0]["uni_id"] == GROUP  # most recent first

    too_long = error(api.put(f"/api/memory/memos/{BOB}", json={"content": "长" * 1001}), 400)
    assert "超出上限" in too_long and "1001" in too_long
    assert data(api.get(f"/api/memory/memos/{BOB}"))["content"] == "鲍勃：周三开会"
    for hostile in ("user_10002", "QQPlatform_Private_abc", "x" * 129, "%00"):
        assert "uni_id" in error(api.get(f"/api/memory/memos/{hostile}"), 400)
    # An encoded path separator never reaches a handler.
    assert error(api.get("/api/memory/memos/..%2F..%2Fetc"), 404) == "接口不存在"
    assert "必须是字符串" in error(api.put(f"/api/memory/memos/{BOB}", json={"content": 1}), 400)

    assert data(api.delete(f"/api/memory/memos/{BOB}")) == {"uni_id": BOB, "deleted": True}
    assert "没有备忘录" in error(api.delete(f"/api/memory/memos/{BOB}"), 404)
    assert [m["uni_id"] for m in data(api.get("/api/memory/memos"))["memos"]] == [GROUP]
    log = bot.log()
    assert f"修改备忘录 uni_id={BOB} chars=7" in log and f"清空备忘录 uni_id={BOB}" in log
    assert "周三开会" not in log and "不刷屏" not in log


def test_knowledge_base(api: httpx.Client, bot: RunningBot) -> None:
    made = data(
        api.post(
            "/api/memory/knowledge",
            json={"title": "整理记忆", "summary": "如何合并重复记忆", "body": "第一步\n第二步"},
        ),
        201,
    )
    kid = made["kid"]
    assert made["body"] == "第一步\n第二步"
    listing = data(api.get("/api/memory/knowledge"))
    assert [e["kid"] for e in listing["entries"]] == [kid] and listing["total"] == 1
    assert data(api.get(f"/api/memory/knowledge/{kid}"))["title"] == "整理记忆"
    changed = data(api.patch(f"/api/memory/knowledge/{kid}", json={"title": "整理与合并记忆"}))
    assert changed["title"] == "整理与合并记忆" and changed["summary"] == "如何合并重复记忆"
    # The file on disk is the manager's own format (three-way sync, not a console copy).
    text = (bot.project.data_dir / "knowledge" / f"KNOWLEDGE_{kid}.md").read_text(encoding="utf-8")
    assert '"整理与合并记忆"' in text

    assert "格式无效" in error(api.get("/api/memory/knowledge/..secret"), 400)
    assert api.delete("/api/memory/knowledge/..%2Fsecret").status_code == 405  # no route
    assert "不存在" in error(api.get("/api/memory/knowledge/abcdef123456"), 404)
    assert "过长" in error(
        api.post("/api/memory/knowledge", json={"title": "题" * 101, "summary": "s", "body": "b"}),
        400,
    )
    assert "不能为空" in error(
        api.post("/api/memory/knowledge", json={"title": "t", "summary": "s", "body": " "}), 400
    )
    assert data(api.delete(f"/api/memory/knowledge/{kid}")) == {"deleted": kid}
    assert "不存在" in error(api.delete(f"/api/memory/knowledge/{kid}"), 404)
    log = bot.log()
    assert f"新建知识 kid={kid}" in log and f"删除知识 kid={kid}" in log


def test_user_profile(api: httpx.Client) -> None:
    data(api.put("/api/memory/profile/summary", json={"content": "程序员，喜欢苹果"}))
    got = data(api.put("/api/memory/profile/body", json={"content": "第一行\n---\n第三行"}))
    assert got["summary"] == "程序员，喜欢苹果" and got["body"] == "第一行\n---\n第三行"
    assert got["target_user_id"] == "10001" and got["body_lines"] == 3 and got["exists"]
    got = data(api.put("/api/memory/profile/body", json={"content": "只剩一行"}))
    assert got["body"] == "只剩一行" and got["summary"] == "程序员，喜欢苹果"
    assert data(api.get("/api/memory/profile"))["body"] == "只剩一行"
    assert "无效" in error(api.put("/api/memory/profile/head", json={"content": "x"}), 400)
    assert "500" in error(api.put("/api/memory/profile/body", json={"content": "长" * 501}), 400)
    assert data(api.get("/api/memory/profile"))["body"] == "只剩一行"


def test_personas_and_self_memory(api: httpx.Client, bot: RunningBot) -> None:
    assert data(api.get("/api/memory/personas"))["total"] == 0
    assert data(api.get("/api/memory/personas/10002")) == {
        "user_id": "10002",
        "fields": [],
        "learning_off": False,
    }
    got = data(
        api.patch("/api/memory/personas/10002", json={"field": "职业", "value": "前端工程师"})
    )
    assert [(f["field"], f["value"]) for f in got["fields"]] == [("职业", "前端工程师")]
    listing = data(api.get("/api/memory/personas"))
    assert listing["total"] == 1 and listing["personas"][0]["user_id"] == "10002"
    for uid in ("abc", "1" * 21, "１２３"):
        assert "user_id" in error(api.get(f"/api/memory/personas/{uid}"), 400)
    assert "过长" in error(
        api.patch("/api/memory/personas/10002", json={"field": "字" * 17, "value": "x"}), 400
    )
    assert "未知字段" in error(api.patch("/api/memory/personas/10002", json={"fields": []}), 400)
    assert data(api.delete("/api/memory/personas/10002"))["deleted"] is True
    assert "没有画像" in error(api.delete("/api/memory/personas/10002"), 404)

    added = data(api.post("/api/memory/self", json={"content": "我是群里的记账助手"}), 201)
    assert [e["content"] for e in added["entries"]] == ["我是群里的记账助手"]
    assert added["max_chars"] == 2000 and added["chars"] == 9
    assert "超出上限" in error(api.post("/api/memory/self", json={"content": "长" * 1995}), 400)
    (first,) = added["entries"]
    assert "id" in error(api.delete("/api/memory/self/abc"), 400)
    assert "id" in error(api.delete("/api/memory/self/0"), 400)
    assert f"没有 ID 为 {first['id'] + 1} 的" in error(
        api.delete(f"/api/memory/self/{first['id'] + 1}"), 404
    )
    assert data(api.delete(f"/api/memory/self/{first['id']}"))["entries"] == []
    log = bot.log()
    assert "修改成员画像 user_id=10002 field=职业" in log and "新增自我记忆 chars=9" in log
    assert "前端工程师" not in log and "记账助手" not in log


def test_self_memory_is_deleted_by_id_not_by_a_stale_position(api: httpx.Client) -> None:
    """Two admins on the same page: one deletes the first entry, the other (whose page still
    shows it first) deletes it too. By id that is a 404 that deletes nothing; by position it
    deleted the entry now listed first, which nobody chose."""
    for text in ("第一条：我是记账助手", "第二条：我说话简短", "第三条：我喜欢猫"):
        data(api.post("/api/memory/self", json={"content": text}), 201)
    page = data(api.get("/api/memory/self"))["entries"]  # what both admins see
    assert [e["number"] for e in page] == [1, 2, 3]
    second = page[1]
    left = data(api.delete(f"/api/memory/self/{second['id']}"))["entries"]
    assert [e["content"] for e in left] == ["第一条：我是记账助手", "第三条：我喜欢猫"]
    # The other admin's page still lists the deleted entry second.
    error(api.delete(f"/api/memory/self/{second['id']}"), 404)
    left = data(api.get("/api/memory/self"))["entries"]
    assert [e["content"] for e in left] == ["第一条：我是记账助手", "第三条：我喜欢猫"]
    for entry in left:
        data(api.delete(f"/api/memory/self/{entry['id']}"))
    assert data(api.get("/api/memory/self"))["entries"] == []


# ---------------------------------------------------------------------------
# Maintenance inside the bot, its progress channel, and `ambot memory`
# ---------------------------------------------------------------------------


def _all_memories(api: httpx.Client) -> dict[str, tuple[str, str]]:
    """``{id: (partition, content)}`` of every memory, read page by page through the API."""
    out: dict[str, tuple[str, str]] = {}
    for part in data(api.get("/api/memory/partitions", params={"fresh": 1}))["partitions"]:
        key = part["partition"]
        page = data(api.get("/api/memory/memories", params={"partition": key, "limit": 100}))
        out |= {m["id"]: (key, m["content"]) for m in page["memories"]}
    return out


def _run_job(
    api: httpx.Client, bot: RunningBot, start: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Start a job (``start`` runs in a thread) while subscribed to the WebUI channel
    ``amrita_memory``; the job as started and every event until it finished."""
    cookies = "; ".join(f"{k}={v}" for k, v in api.cookies.items())
    url = bot.url.replace("http://", "ws://") + "/amrita/ui/ws"
    headers = {"Cookie": cookies, "Origin": bot.url}

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        async with asyncio.timeout(60), websockets.connect(url, additional_headers=headers) as ws:
            await ws.send(json.dumps({"action": "subscribe", "channels": ["amrita_memory"]}))
            first = json.loads(await ws.recv())
            assert first["channel"] == "amrita_memory" and first["data"]["event"] == "snapshot"
            job = await asyncio.to_thread(start)
            events: list[dict[str, Any]] = []
            while not events or events[-1]["event"] != "finished":
                message = json.loads(await ws.recv())
                if message["channel"] == "amrita_memory":
                    events.append(message["data"])
            return job, events

    return run_async(scenario())


def _refused_while_busy(api: httpx.Client) -> None:
    """A second maintenance operation and every memory write are refused while a job runs."""
    assert "已有维护操作正在进行" in error(api.post("/api/memory/reindex"), 409)
    assert "已有维护操作正在进行" in error(api.post("/api/memory/backups"), 409)
    refused = error(api.patch("/api/memory/memories/b0", json={"importance": "high"}), 409)
    assert "正在重映射" in refused and "未执行" in refused
    assert data(api.get("/api/memory/status"))["maintenance"] is True
    assert data(api.get("/api/memory/memories", params={"partition": BOB}))["total"] == 3


def test_reindex_runs_in_the_bot_refuses_a_second_one_and_reports_progress(
    api: httpx.Client, bot: RunningBot
) -> None:
    before = _all_memories(api)

    def start() -> dict[str, Any]:
        job = data(api.post("/api/memory/reindex"), 202)
        _refused_while_busy(api)
        return job

    # The embedding service hangs: the re-embedding is stuck, then fails cleanly.
    EMBED.set_mode("hang")
    STATS.faults_injected += 1
    try:
        job, events = _run_job(api, bot, start)
    finally:
        EMBED.set_mode("ok")
    assert job["state"] == "running" and job["kind"] == "reindex" and job["label"] == "重映射"
    final = events[-1]["job"]
    assert final["id"] == job["id"] and final["state"] == "failed"
    assert "重映射失败" in final["message"] and "所有记忆仍在原集合中" in final["message"]
    assert {"started", "finished"} <= {e["event"] for e in events}
    # Nothing was lost, and writes are allowed again.
    assert _all_memories(api) == before
    assert data(api.patch("/api/memory/memories/b0", json={"importance": "high"}))["memory"]
    assert data(api.get("/api/memory/jobs/current"))["busy"] is False


def test_ambot_memory_talks_to_the_running_bot(api: httpx.Client, bot: RunningBot) -> None:
    token_file = bot.project.data_dir / TOKEN_FILE
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    token = json.loads(token_file.read_text(encoding="utf-8"))["token"]
    assert token not in bot.log()
    current = _all_memories(api)

    status = bot.project.ambot("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "Bot 正在运行" in status.stdout and f"记忆：共 {len(current)} 条" in status.stdout
    assert "状态：  一致" in status.stdout and ALICE in status.stdout

    made = bot.project.ambot("backup", "create")
    assert made.returncode == 0, made.stdout + made.stderr
    assert "由运行中的 Bot 创建" in made.stdout and f"{MEM} {len(current)} 条" in made.stdout
    backups = sorted(bot.project.backup_dir.glob("embed_backup_*.json"))
    saved = json.loads(backups[-1].read_text(encoding="utf-8"))["collections"][MEM]["items"]
    assert {i["id"]: (i["metadata"]["user_id"], i["document"]) for i in saved} == current
    assert current["a0003"][1] == "爱丽丝改了口味：喜欢青苹果" and "a0005" not in current

    reindex = bot.project.ambot("reindex", "--yes")
    assert reindex.returncode == 0, reindex.stdout + reindex.stderr
    assert "在运行中的 Bot 内执行" in reindex.stdout and "重映射完成" in reindex.stdout
    assert f"{MEM} {len(current)} 条" in reindex.stdout
    assert "Traceback" not in reindex.stdout + reindex.stderr
    assert _all_memories(api) == current
    assert "控制台 ambot memory（本地令牌）：开始重映射" in bot.log()


def test_restore_a_backup_inside_the_bot(api: httpx.Client, bot: RunningBot) -> None:
    backups = data(api.get("/api/memory/backups"))["backups"]
    assert backups and backups[0]["counts"][MEM] > 0
    wanted = _all_memories(api)
    data(api.delete("/api/memory/memories/b2"))
    data(api.patch("/api/memory/memories/b1", json={"content": "鲍勃后来改的内容"}))

    for name in ("nope.json", "embed_backup_20250101T000000_000000Z.json", "%2E%2E"):
        assert "不存在" in error(api.post(f"/api/memory/backups/{name}/restore"), 404)
    name = backups[0]["name"]
    job, events = _run_job(
        api, bot, lambda: data(api.post(f"/api/memory/backups/{name}/restore"), 202)
    )
    final = events[-1]["job"]
    assert final["id"] == job["id"] and final["state"] == "done", final
    assert final["result"]["counts"][MEM] == len(wanted)
    # The live progress bar's feed: the last progress message reports every item done.
    progress = [e["job"] for e in events if e["event"] == "progress"]
    assert progress and progress[-1]["done"] == progress[-1]["total"] >= len(wanted)
    assert _all_memories(api) == wanted  # b2 is back, b1 has its old text


def test_token_file_is_removed_when_the_bot_stops(bot: RunningBot) -> None:
    token_file = bot.project.data_dir / TOKEN_FILE
    assert token_file.exists()
    bot.stop()
    assert not token_file.exists()
    # Now (and only now) another process may open the embedded ChromaDB.

    async def check() -> None:
        rt = bot.project.runtime()
        try:
            snap = await snapshot(rt, MEM)
        finally:
            await rt.close()
        assert snap["b2"][0] == "鲍勃的记忆 2" and snap["a0003"][0] == "爱丽丝改了口味：喜欢青苹果"

    run_async(check())
