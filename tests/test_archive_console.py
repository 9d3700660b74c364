"""The archive through a running bot: ``ambot memory archive …`` while the bot holds the
embedded ChromaDB, and the admin API behind the WebUI login (the console's 归档 view).

One ``ambot run`` (local mode) serves the module. Its store is seeded before it
starts: expired memories (archived by the first sweep), a previous version of a
live memory, a partition already at the memory limit with one expired memory,
and a version whose memory itself expires. The commands must do the work inside
the bot (no "stop the bot first"), say exactly what they say without a running
bot (checked at the end, once the bot has stopped), and refuse hostile ids with
one clear line; the API answers the same through the WebUI session.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.botproject import (
    ALICE,
    BOB,
    BotProject,
    ambot_ok,
    ambot_refused,
    memory_meta,
)
from tests.console_bot import (
    RunningBot,
    api_data,
    api_error,
    assert_nothing_lost,
    login,
    seeded_bot,
    webui_session,
)
from tests.helpers import new_memory, view_of
from tests.reliability_stats import STATS

CAROL = "QQPlatform_Private_10003"
DAVE = "QQPlatform_Private_10004"
LIMIT = 4
NOW = datetime.now(UTC).isoformat()
FULL = f"该分区的记忆已达上限（{LIMIT}/{LIMIT} 条），请先合并或删除旧记忆"
HUGE = "错误：归档 ID 过长（500 个字符，最多 80 个）"

EXPIRED = [
    (f"old{i:05d}", f"旧记忆 old{i}：爱丽丝喜欢第 {i} 号梨", memory_meta(ALICE)) for i in range(8)
]
FRESH = [
    *[(f"bob{i}", f"鲍勃最近的事 {i}", memory_meta(BOB, updated_at=NOW)) for i in range(2)],
    *[(f"dave{i}", f"戴夫最近的事 {i}", memory_meta(DAVE, updated_at=NOW)) for i in range(LIMIT)],
    ("dave-old", "戴夫很久以前养过一只猫", memory_meta(DAVE)),
    ("carol-old", "卡罗尔以前住在杭州", memory_meta(CAROL)),
]
SEEDED = EXPIRED + FRESH


@pytest.fixture(scope="module")
def bot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBot]:
    project = BotProject(tmp_path_factory.mktemp("archive-console") / "bot")
    config = project.root / "config" / "amrita_plugin_memory" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"per_session_memory_limit = {LIMIT}\n", encoding="utf-8")

    async def versions(rt: Any) -> None:
        # A previous version of a live memory (reason "updated").
        coffee = await rt.store.add(new_memory(BOB, "user", "鲍勃喜欢喝咖啡"))
        await rt.store.update(BOB, coffee.id, content="鲍勃改喝茶了")
        # A version of a memory that the first sweep will archive itself.
        carol = await rt.store.get(view_of(CAROL), "carol-old")
        assert carol is not None
        carol.content, carol.updated_at = "卡罗尔以前住在苏州", "2024-06-01T00:00:00+00:00"
        await rt.store.archive.save_version(carol, [0.1] * 384, reason="updated")

    running = seeded_bot(project, SEEDED, l3=False, then=versions)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def api(bot: RunningBot) -> Iterator[httpx.Client]:
    with webui_session(bot, timeout=60) as client:
        yield client


_data = api_data
_error = api_error


def _ok(proc: Any) -> str:
    out = ambot_ok(proc)
    assert "需要先停止 Bot" not in proc.stdout + proc.stderr
    return out


_refused = ambot_refused


def _archive(api: httpx.Client, **query: Any) -> Any:
    return _data(api.get("/api/memory/archive", params=query))


def _live(api: httpx.Client, partition: str) -> dict[str, str]:
    page = _data(api.get("/api/memory/memories", params={"partition": partition, "limit": 100}))
    return {m["id"]: m["content"] for m in page["memories"]}


# ---------------------------------------------------------------------------
# Access
# ---------------------------------------------------------------------------


def test_archive_routes_need_the_webui_login_or_the_local_token(bot: RunningBot) -> None:
    routes = [
        ("GET", "/api/memory/archive"),
        ("POST", "/api/memory/archive/sweep"),
        ("POST", "/api/memory/archive/old00001/restore"),
    ]
    with httpx.Client(base_url=bot.url, timeout=30) as anonymous:
        for method, path in routes:
            resp = anonymous.request(method, path, json={})
            assert resp.status_code == 401 and resp.json()["message"] == "未授权", resp.text
            forged = anonymous.request(method, path, headers={"X-Amrita-Memory-Token": "guess"})
            assert forged.status_code == 401 and forged.json()["message"] == "本地令牌无效"
            STATS.inputs_tried += 2
    # Nothing was swept or restored by any of them.
    with httpx.Client(base_url=bot.url, timeout=30) as client:
        login(client)
        assert _archive(client)["total"] == 2
        assert "old00001" in _live(client, ALICE)


# ---------------------------------------------------------------------------
# ambot memory archive … while the bot runs
# ---------------------------------------------------------------------------


def test_ambot_memory_archive_works_through_the_running_bot(
    api: httpx.Client, bot: RunningBot
) -> None:
    project = bot.project
    out = _ok(project.ambot("archive", "sweep"))
    assert out.startswith(f"归档清理完成：扫描 {len(SEEDED) + 1} 条记忆，归档 10 条（3 个分区"), out

    listing = _ok(project.ambot("archive", "list", "-p", ALICE, "-n", "3"))
    lines = listing.splitlines()
    assert lines[0] == f"分区 {ALICE} 归档共 8 条（最新的在前，显示 3 条）：", listing
    assert len(lines) == 5 and lines[-1] == "恢复：ambot memory archive restore <id>"
    assert all("[超过寿命，归档于" in line and "旧记忆 old" in line for line in lines[1:4])

    assert _ok(project.ambot("archive", "restore", "old00003")).strip() == "已恢复记忆 old00003"
    assert _live(api, ALICE) == {"old00003": "旧记忆 old3：爱丽丝喜欢第 3 号梨"}

    # Restoring into a full partition is refused, nothing changes.
    assert _refused(project.ambot("archive", "restore", "dave-old")) == f"错误：{FULL}"
    assert "dave-old" not in _live(api, DAVE)
    assert _refused(project.ambot("archive", "restore", "no-such-id")) == (
        "错误：归档中没有 id 为 no-such-id 的记忆"
    )
    assert _refused(project.ambot("archive", "restore", "x" * 500)) == HUGE
    assert _refused(project.ambot("archive", "restore", "bob0")) == (  # a live memory
        "错误：归档中没有 id 为 bob0 的记忆"
    )
    assert "请提供归档 ID" in _refused(project.ambot("archive", "restore", ""))
    assert "bob0" in _live(api, BOB)

    assert _archive(api)["total"] == 11  # 10 swept + 2 versions - 1 restored
    log = bot.log()
    assert "控制台 ambot memory（本地令牌）：归档清理 archived=10" in log
    assert f"控制台 ambot memory（本地令牌）：恢复归档 partition={ALICE} id=old00003" in log
    assert "爱丽丝喜欢第 3 号梨" not in log  # never the text


# ---------------------------------------------------------------------------
# The admin API (the console's 归档 view), WebUI login
# ---------------------------------------------------------------------------


def test_archive_listing_filters_and_pages(api: httpx.Client) -> None:
    every = _archive(api, limit=100)
    assert every["total"] == 11 and len(every["rows"]) == 11
    reasons = {row["id"]: row["reason"] for row in every["rows"]}
    assert sorted(reasons.values()).count("expired") == 9 and "old00003" not in reasons
    archived_at = [row["archived_at"] for row in every["rows"]]
    assert archived_at == sorted(archived_at, reverse=True)  # newest first

    carol = _archive(api, partition=CAROL)
    assert carol["total"] == 2 and {r["memory_id"] for r in carol["rows"]} == {"carol-old"}
    version = next(r for r in carol["rows"] if r["is_version"])
    assert version["reason"] == "updated" and version["reason_text"] == "更新前的旧版本"
    assert version["content"] == "卡罗尔以前住在苏州" and version["partition"] == CAROL
    assert version["id"].startswith("carol-old~") and version["versions"] == 2
    swept = next(r for r in carol["rows"] if not r["is_version"])
    assert swept["id"] == "carol-old" and swept["reason_text"] == "超过寿命"
    assert swept["created_at"] == "2025-01-01T00:00:00+00:00" and swept["importance"] == "medium"

    versions = _archive(api, memory_id="carol-old")
    assert {r["id"] for r in versions["rows"]} == {r["id"] for r in carol["rows"]}

    first, second = (
        _archive(api, partition=ALICE, limit=4),
        _archive(api, partition=ALICE, offset=4),
    )
    assert first["total"] == second["total"] == 7
    ids = [r["id"] for r in first["rows"] + second["rows"]]
    assert len(ids) == len(set(ids)) == 7
    # The CLI's lines come with the rows (ambot memory archive list prints them).
    assert first["lines"][0] == f"分区 {ALICE} 归档共 7 条（最新的在前，显示 4 条）："


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 10_001}, "limit"),
        ({"limit": "ten"}, "必须是整数"),
        ({"offset": -1}, "offset"),
        ({"partition": "x" * 129}, "过长"),
        ({"partition": "QQ\x00Private"}, "不可见字符"),
        ({"memory_id": "m" * 65}, "过长"),
    ],
)
def test_hostile_archive_queries(api: httpx.Client, query: Any, message: str) -> None:
    assert message in _error(api.get("/api/memory/archive", params=query), 400)


def test_restore_through_the_api_and_hostile_ids(api: httpx.Client, bot: RunningBot) -> None:
    def restore(row_id: str, **headers: str) -> httpx.Response:
        return api.post(f"/api/memory/archive/{row_id}/restore", headers=headers)

    before = (_archive(api, limit=100), {p: _live(api, p) for p in (ALICE, BOB, DAVE)})
    (coffee,) = [r for r in _archive(api, partition=BOB)["rows"] if r["is_version"]]
    (carol,) = [r for r in _archive(api, partition=CAROL)["rows"] if r["is_version"]]

    hostile = [
        ("bob0", 404, "归档中没有 id 为 bob0 的记忆"),  # a live memory
        (coffee["memory_id"], 404, "归档中没有"),  # the live memory of a version
        ("no-such-id", 404, "归档中没有 id 为 no-such-id 的记忆"),
        ("a%2Fb", 404, "归档中没有 id 为 a/b 的记忆"),
        ("%20", 400, "请提供归档 ID"),
        ("x" * 81, 400, "归档 ID 过长"),
        ("a%00b", 400, "不可见字符"),
        ("dave-old", 400, FULL),  # the partition is full
        (carol["id"], 409, "该记忆本身已归档：请先恢复 carol-old"),
    ]
    for row_id, status, message in hostile:
        assert message in _error(restore(row_id), status), row_id
    assert "跨站请求被拒绝" in _error(restore("old00001", Origin="http://evil.example"), 403)
    assert api.get("/api/memory/archive/old00001/restore").status_code in (404, 405)
    assert (_archive(api, limit=100), {p: _live(api, p) for p in (ALICE, BOB, DAVE)}) == before

    # A previous version replaces the live text; the replaced text is archived.
    done = _data(restore(coffee["id"]))
    assert done["replaced_text"] is True and done["memory"]["content"] == "鲍勃喜欢喝咖啡"
    assert done["message"].startswith(f"已把记忆 {coffee['memory_id']} 恢复为归档中的旧版本")
    assert _live(api, BOB)[coffee["memory_id"]] == "鲍勃喜欢喝咖啡"
    (kept,) = [r for r in _archive(api, memory_id=coffee["memory_id"])["rows"]]
    assert kept["content"] == "鲍勃改喝茶了" and kept["reason"] == "updated"

    # The memory first, then its version.
    assert _data(restore("carol-old"))["message"] == "已恢复记忆 carol-old"
    assert _data(restore(carol["id"]))["memory"]["content"] == "卡罗尔以前住在苏州"
    assert "卡罗尔以前住在杭州" in {r["content"] for r in _archive(api, partition=CAROL)["rows"]}

    swept = _data(api.post("/api/memory/archive/sweep"))
    assert swept["archived"] == 0 and swept["message"].startswith("归档清理完成：扫描")
    log = bot.log()
    assert f"控制台 WebUI 用户 admin：恢复归档 partition={BOB} id={coffee['id']}" in log
    assert "鲍勃喜欢喝咖啡" not in log


# ---------------------------------------------------------------------------
# The same output without the bot, and nothing lost
# ---------------------------------------------------------------------------


def test_the_same_output_once_the_bot_has_stopped(bot: RunningBot) -> None:
    project = bot.project
    through_bot = _ok(project.ambot("archive", "list", "-n", "50"))
    assert through_bot.startswith("归档共 ")
    bot.stop()
    assert _ok(project.ambot("archive", "list", "-n", "50")) == through_bot
    assert _refused(project.ambot("archive", "restore", "dave-old")) == f"错误：{FULL}"
    assert _refused(project.ambot("archive", "restore", "x" * 500)) == HUGE

    # Every text seeded is still there, live or archived (a restored version's
    # replaced text included).
    assert_nothing_lost(project, SEEDED)
