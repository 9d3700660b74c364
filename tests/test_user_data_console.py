"""A user's export and forget for an operator: the admin API and ``ambot memory export|forget``.

One ``ambot run`` (local ChromaDB, the L3 loop with user 10001 as its target)
serves the module. Its store is seeded before it starts (memories of three
users, a previous version of one, a group memory written by 10001); memos and
personas are written through the API. The commands must do their work inside
the running bot, the routes refuse hostile user ids with a clear 400, the
audit log says who was forgotten and never a text. Once the bot has stopped,
the commands work without it, and restoring the backup taken before the
forget (``ambot memory backup restore``) does not bring the forgotten user back.
"""

from __future__ import annotations

import json
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.botproject import (
    ALICE,
    BOB,
    GROUP,
    BotProject,
    ambot_ok,
    ambot_refused,
    memory_meta,
    seed,
    snapshot,
)
from tests.console_bot import (
    RunningBot,
    api_data,
    api_error,
    run_async,
    start_seeded,
    webui_session,
)
from tests.lazy import lazy_import
from tests.reliability_stats import STATS

E = lazy_import("amrita_plugin_memory.embedding", "amrita_plugin_memory.storage.keys")
MEM = "amrita_user_memory"
PROFILE = "爱丽丝，护士\n---\n上夜班\n喜欢滑雪\n"
CAROL = "QQPlatform_Private_10003"
SEEDED = [
    *[(f"alice{i}", f"爱丽丝的秘密 {i}", memory_meta(ALICE)) for i in range(3)],
    *[(f"bob{i}", f"鲍勃的日常 {i}", memory_meta(BOB)) for i in range(2)],
    ("carol0", "卡罗尔喜欢滑雪", memory_meta(CAROL)),
    ("rule", "群规：周五聚餐", memory_meta(GROUP, "group", author="10001")),
]


@pytest.fixture(scope="module")
def bot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBot]:
    async def fill(rt: Any) -> None:
        await seed(rt, MEM, SEEDED)
        await rt.store.update(ALICE, "alice0", content="爱丽丝的新秘密 0")  # a version
        # The L3 loop's profile of its target user 10001 (Alice).
        (rt.config.data_dir / "user_profile.md").write_text(PROFILE, encoding="utf-8")

    running = start_seeded(BotProject(tmp_path_factory.mktemp("user-data") / "bot"), fill)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def api(bot: RunningBot) -> Iterator[httpx.Client]:
    with webui_session(bot, timeout=60) as client:
        yield client


_ok = ambot_ok
_refused = ambot_refused


def _live(api: httpx.Client, partition: str) -> dict[str, str]:
    resp = api.get("/api/memory/memories", params={"partition": partition, "limit": 100})
    if resp.status_code == 404:
        return {}
    return {m["id"]: m["content"] for m in api_data(resp)["memories"]}


ROUTES = [
    ("GET", "/api/memory/users/10001/export"),
    ("GET", "/api/memory/users/10001/forget"),
    ("DELETE", "/api/memory/users/10001"),
]


def test_user_routes_need_the_webui_login_or_the_local_token(
    bot: RunningBot, api: httpx.Client
) -> None:
    with httpx.Client(base_url=bot.url, timeout=30) as anonymous:
        for method, path in ROUTES:
            resp = anonymous.request(method, path)
            assert resp.status_code == 401 and resp.json()["message"] == "未授权", resp.text
            forged = anonymous.request(method, path, headers={"X-Amrita-Memory-Token": "guess"})
            assert forged.status_code == 401 and forged.json()["message"] == "本地令牌无效"
            STATS.inputs_tried += 2
    assert len(_live(api, ALICE)) == 3  # nothing was forgotten by any of them


@pytest.mark.parametrize(
    ("user_id", "message"),
    [
        ("abc", "QQ 号（user_id）'abc' 无效：应为不以 0 开头的数字"),
        ("01234", "QQ 号（user_id）'01234' 无效"),
        ("-5", "QQ 号（user_id）'-5' 无效"),
        ("１２３４５", "无效"),  # full-width digits
        ("1" * 21, "QQ 号（user_id）过长（21 位，最多 20 位）"),
        ("%20", "请提供用户的 QQ 号（user_id）"),
    ],
)
def test_hostile_user_ids_are_refused(api: httpx.Client, user_id: str, message: str) -> None:
    for method, path in (
        ("GET", f"/api/memory/users/{user_id}/export"),
        ("GET", f"/api/memory/users/{user_id}/forget"),
        ("DELETE", f"/api/memory/users/{user_id}"),
    ):
        assert message in api_error(api.request(method, path), 400)
    assert len(_live(api, ALICE)) == 3


def test_export_and_forget_through_the_api_and_the_running_bot(
    bot: RunningBot, api: httpx.Client, tmp_path: Path
) -> None:
    project = bot.project
    api_data(api.put(f"/api/memory/memos/{ALICE}", json={"content": "爱丽丝的备忘录"}))
    api_data(api.put(f"/api/memory/memos/{BOB}", json={"content": "鲍勃的备忘录"}))
    api_data(api.patch("/api/memory/personas/10001", json={"field": "职业", "value": "护士"}))
    api_data(api.patch("/api/memory/personas/10002", json={"field": "职业", "value": "厨师"}))

    doc = api_data(api.get("/api/memory/users/10001/export"))
    assert doc["user_id"] == "10001" and doc["partition"] == ALICE
    assert sorted(m["id"] for m in doc["memories"]) == ["alice0", "alice1", "alice2"]
    assert [a["content"] for a in doc["archive"]] == ["爱丽丝的秘密 0"]
    assert doc["memo"] == "爱丽丝的备忘录"
    assert [f["value"] for f in doc["persona"]["fields"]] == ["护士"]
    assert [m["id"] for m in doc["group_memories"]] == ["rule"]
    assert doc["l3_profile"] == PROFILE and doc["l3_abstracts"] == []
    assert "鲍勃" not in json.dumps(doc, ensure_ascii=False)

    out = tmp_path / "alice.json"
    printed = _ok(project.ambot("export", "--user", "10001", "--out", str(out)))
    assert printed.strip() == f"已导出用户 10001 的数据到 {out}（记忆 3 条，归档 1 条）"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    exported = json.loads(out.read_text(encoding="utf-8"))
    assert exported["memories"] == doc["memories"] and exported["memo"] == doc["memo"]
    stdout = json.loads(_ok(project.ambot("export", "--user", "10002")))
    assert sorted(m["id"] for m in stdout["memories"]) == ["bob0", "bob1"]
    assert _refused(project.ambot("export", "--user", "abc")).startswith(
        "错误：QQ 号（user_id）'abc' 无效"
    )

    made = api_data(api.post("/api/memory/backups", json={}), 201)
    before_forget = tmp_path / "before-forget.json"  # kept outside the backup directory
    shutil.copy(project.backup_dir / made["name"], before_forget)

    preview = api_data(api.get("/api/memory/users/10001/forget"))
    assert preview["counts"]["memories"] == 3 and preview["counts"]["archived"] == 1
    assert preview["counts"]["memo"] == 1 and preview["counts"]["authored"] == 1
    assert "个人记忆 3 条（私聊与群聊中写下的都算）" in preview["lines"]
    assert "L3 循环整理出的用户画像 3 行" in preview["lines"]
    assert any("/session forget" in line for line in preview["kept"])
    assert len(_live(api, ALICE)) == 3  # a preview removes nothing

    refused = _refused(project.ambot("forget", "--user", "10001"))  # stdin is not a TTY
    assert "--yes" in refused
    out = _ok(project.ambot("forget", "--user", "10001", "--yes"))
    assert "将永久删除用户 10001（QQPlatform_Private_10001）的以下数据：" in out
    assert "（由运行中的 Bot 执行" in out and "已遗忘用户 10001：" in out
    assert "已改写 1 份备份（删除 4 条）" in out
    assert "L3 循环整理出的用户画像 3 行" in out and "以下不会删除：" in out
    assert "/session clear 删除全部归档会话" in out and "L3 循环今后不再读取" in out
    assert not (project.data_dir / "user_profile.md").exists()
    assert api_data(api.get("/api/memory/profile"))["exists"] is False
    assert _live(api, ALICE) == {}
    assert api_data(api.get(f"/api/memory/memos/{ALICE}"))["content"] == ""
    assert api_data(api.get("/api/memory/personas/10001"))["fields"] == []
    again = api_data(api.get("/api/memory/users/10001/export"))
    assert again["memories"] == again["archive"] == again["group_memories"] == []
    assert again["memo"] is None

    # Bob is untouched; Carol is forgotten through the console's route.
    assert set(_live(api, BOB)) == {"bob0", "bob1"}
    assert api_data(api.get(f"/api/memory/memos/{BOB}"))["content"] == "鲍勃的备忘录"
    assert [f["value"] for f in api_data(api.get("/api/memory/personas/10002"))["fields"]] == [
        "厨师"
    ]
    gone = api_data(api.delete("/api/memory/users/10003"))
    assert gone["counts"]["memories"] == 1 and _live(api, CAROL) == {}

    _, contents = E.load_backup(project.backup_dir / made["name"])
    rows = [i for c in contents.values() for i in c.items]
    assert {i.id for i in rows if i.metadata["user_id"] == BOB} == {"bob0", "bob1"}
    assert not [i for i in rows if i.metadata["user_id"] in (ALICE, CAROL)]
    log = bot.log()
    audit = [line for line in log.splitlines() if "遗忘用户 user=10001" in line]
    assert len(audit) == 1 and "ambot memory（本地令牌）" in audit[0]
    assert [line for line in log.splitlines() if "遗忘用户 user=10003" in line]
    assert "爱丽丝的秘密" not in log and "卡罗尔喜欢滑雪" not in log
    bot.before_forget = before_forget  # type: ignore[attr-defined]  # for the next test


def test_without_the_bot_and_an_older_backup_restored(bot: RunningBot) -> None:
    project = bot.project
    before_forget: Path = bot.before_forget  # type: ignore[attr-defined]
    bot.stop()
    stdout = json.loads(_ok(project.ambot("export", "--user", "10002")))
    assert sorted(m["id"] for m in stdout["memories"]) == ["bob0", "bob1"]
    assert stdout["memo"] == "鲍勃的备忘录"

    _ok(project.ambot("backup", "restore", str(before_forget), "--yes"))

    async def rows() -> dict[str, Any]:
        rt = project.runtime()
        try:
            return await snapshot(rt, MEM)
        finally:
            await rt.close()

    now = run_async(rows())
    assert {k for k, v in now.items() if v[1]["user_id"] in (ALICE, CAROL)} == set()
    assert {k for k, v in now.items() if v[1]["user_id"] == BOB} == {"bob0", "bob1"}
    assert now["rule"][0] == "群规：周五聚餐" and now["rule"][1]["author"] == ""
    lost = 0 if {"bob0", "bob1", "rule"} <= set(now) else 1
    STATS.items_lost += lost

    out = _ok(project.ambot("forget", "--user", "10002", "--yes"))
    assert "已遗忘用户 10002：" in out and "个人记忆 2 条" in out
    assert "（由运行中的 Bot 执行" not in out
