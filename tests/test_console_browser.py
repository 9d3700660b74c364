"""The 记忆管理 page in a real browser (Debian's Chromium, driven by Playwright).

A real bot process serves the WebUI; the test logs in through the WebUI's
login form, opens the page from the sidebar, checks the overview's 30-day usage
charts (drawn by the page as inline SVG from rows of the bot's usage ledger), pages and searches the memory
table, edits a memory, deletes one (through the confirmation dialog) and runs
a re-embedding with its live progress bar, taking screenshots on the way
(``AMRITA_MEMORY_SCREENSHOTS=<dir>`` keeps them; the ones in ``docs/`` were
taken this way). Every change is checked through the admin API too.

Chromium is never downloaded: the test uses ``/usr/bin/chromium`` (installed
by ``.ci/run`` with apt) and is skipped, saying so, only when it is missing.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.botproject import ALICE, BOB, BotProject, memory_meta, seed
from tests.conftest import EMBED
from tests.console_bot import PASSWORD, USER, RunningBot, login, run_async, seed_episodes
from tests.lazy import lazy_import

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MEM = "amrita_user_memory"
CAROL = "QQPlatform_Private_10003"

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium is not installed (apt-get install chromium fonts-noto-cjk; CI installs it)",
)

E = lazy_import(
    "amrita_plugin_memory.embedding",
    "amrita_plugin_memory.upkeep.rekey",
    "amrita_plugin_memory.core.records",
)


def _alice(i: int) -> tuple[str, str, dict[str, Any]]:
    meta = memory_meta(ALICE, created_at=f"2025-03-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00")
    meta["tags"] = '["水果", "偏好"]' if i % 3 == 0 else '["日常"]'
    meta["importance"] = ("low", "medium", "high")[i % 3]
    return f"a{i:04d}", f"爱丽丝说过：喜欢第 {i} 号苹果，最好是脆的", meta


@pytest.fixture(scope="module")
def bot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBot]:
    project = BotProject(tmp_path_factory.mktemp("console-browser") / "bot")

    async def prepare() -> None:
        rt = project.runtime()
        try:
            items = [_alice(i) for i in range(45)]
            items += [
                (f"b{i}", f"鲍勃的记忆 {i}：周三下午开会", memory_meta(BOB)) for i in range(4)
            ]
            await seed(rt, MEM, items)
            # The archive view's refusal: a previous version of a memory that is
            # itself archived (it must be restored first).
            old = "2025-01-01T00:00:00+00:00"
            carol = E.MemoryRecord(
                id="carol-old",
                content="卡罗尔以前住在杭州",
                partition=CAROL,
                scope="user",
                created_at=old,
                updated_at=old,
            )
            (vector,) = await rt.embedder.embed([carol.content])
            await rt.store.archive.save([("carol-old", carol, vector)], reason="expired")
            carol.content = "卡罗尔更早以前住在苏州"
            await rt.store.archive.save_version(carol, vector, reason="updated")
            await E.reset_fingerprint(rt.maintenance)
            await E.migrate_partition_keys(rt.store)
        finally:
            await rt.close()

    EMBED.reset()
    run_async(prepare())
    running = RunningBot(project)
    running.start()
    seed_usage(project.root / "data" / "nonebot_plugin_orm" / "db.sqlite3")
    yesterday = time.time() - 86400
    seed_episodes(
        project,
        [
            {"id": "e" * 32, "chat": "QQPlatform_Private_10077", "origin": "private",
             "start": yesterday, "end": yesterday + 900, "summary": "昨天聊了二面的准备",
             "topics": ["面试", "二面"], "participants": ["10077"]},
        ],
    )  # fmt: skip
    with httpx.Client(base_url=running.url, timeout=30) as client:
        login(client)
        client.put(
            f"/api/memory/memos/{ALICE}", json={"content": "爱丽丝：下周三体检，提醒她空腹。"}
        )
        client.put("/api/memory/profile/summary", json={"content": "程序员，喜欢脆苹果"})
    yield running
    running.stop()


USAGE_TODAY = date.today()


def _day(back: int) -> str:
    return (USAGE_TODAY - timedelta(days=back)).isoformat()


def seed_usage(db: Path) -> None:
    """Rows of the usage ledger as the bot's background work writes them (its table, made
    at its start-up): a few days of each feature, one user past the default share
    (300,000 tokens a day), and what the blocks added to ten turns today."""
    rows = [
        (_day(0), "extraction", "10001", 12, 1500, 300, 200, 0, 0),
        (_day(0), "extraction", "10009", 40, 280_000, 20_001, 0, 0, 0),
        (_day(1), "extraction", "10002", 5, 600, 150, 0, 0, 0),
        (_day(3), "persona", "10001", 2, 800, 100, 0, 0, 0),
        (_day(5), "subconscious", "10001", 6, 5000, 800, 0, 1, 0),
        (_day(0), "chat", "", 10, 0, 0, 0, 0, 0),
        (_day(0), "block:tools", "", 10, 0, 0, 0, 0, 32_920),
        (_day(0), "block:memories", "", 4, 0, 0, 0, 0, 1_700),
    ]
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.executemany("INSERT INTO amrita_plugin_memory_usage VALUES (?,?,?,?,?,?,?,?,?)", rows)
        conn.commit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("AMRITA_MEMORY_SCREENSHOTS")
    path = Path(wanted) if wanted else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_console_page_in_chromium(bot: RunningBot, shots: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900}, locale="zh-CN")
            page.set_default_timeout(30_000)
            page.goto(bot.url + "/")
            page.get_by_label("用户名").fill(USER)
            page.get_by_label("密码").fill(PASSWORD)
            page.get_by_role("button", name="登录").click()

            # Open the page from the sidebar.
            page.get_by_role("button", name="记忆管理").click()
            overview = page.locator("[data-amc=overview]")
            expect(overview).to_be_visible()
            expect(page.locator("[data-amc=memory-total]")).to_have_text("49")
            expect(overview).to_contain_text("一致")

            # Background usage: one 30-day chart per feature, drawn by the page (inline SVG).
            usage = page.locator("[data-amc=usage]")
            for feature, day, tokens in (
                ("extraction", _day(0), 301_801),
                ("extraction", _day(1), 750),
                ("persona", _day(3), 900),
                ("subconscious", _day(5), 5800),
            ):
                chart = usage.locator(f"[data-amc=usage-chart][data-feature={feature}]")
                expect(chart.locator("rect")).to_have_count(30)
                bar = chart.locator(f"rect[data-day='{day}']")
                expect(bar).to_have_attribute("data-tokens", str(tokens))
                box = bar.bounding_box()
                assert box is not None and box["height"] > 0 and box["width"] > 0, (feature, box)
            extraction = usage.locator("[data-amc=usage-chart][data-feature=extraction]")
            tallest = extraction.locator(f"rect[data-day='{_day(0)}']").bounding_box()
            small = extraction.locator(f"rect[data-day='{_day(1)}']").bounding_box()
            assert tallest is not None and small is not None and tallest["height"] > small["height"]
            expect(extraction.locator(f"rect[data-day='{_day(2)}']")).to_have_attribute(
                "height", "0"
            )
            expect(usage.locator("tr[data-usage=subconscious]")).to_contain_text("1 次为估算")
            if date.today() == USAGE_TODAY:  # the bot's "today" is the day the rows were seeded
                expect(usage.locator("tr[data-usage=extraction]")).to_contain_text(
                    "52 次，输入 281500（缓存命中 200），输出 20301"
                )
                expect(page.locator("[data-amc=budget-state]")).to_contain_text(
                    "今天已达每人上限：10009（300001）"
                )
                expect(usage).to_contain_text(
                    "工具定义 3292 字，<MEMORIES> 170 字（近 30 天 10 轮的平均）"
                )
            page.screenshot(path=str(shots / "console-overview.png"), full_page=True)

            # The memory table: newest first, paged.
            page.get_by_role("tab", name="记忆").click()
            page.locator(f"[data-partition={ALICE}]").click()
            table = page.locator("[data-amc=memories]")
            expect(table).to_contain_text("第 1 / 3 页，共 45 条")
            rows = table.locator("tr[data-memory]")
            expect(rows.first).to_have_attribute("data-memory", "a0044")
            expect(rows).to_have_count(20)
            page.screenshot(path=str(shots / "console-memories.png"), full_page=True)
            table.locator("[data-amc=next]").click()
            expect(rows.first).to_have_attribute("data-memory", "a0024")

            # Semantic search.
            table.locator("[data-amc=search]").fill("喜欢第 7 号苹果")
            table.locator("[data-amc=search-go]").click()
            expect(table).to_contain_text("按相似度排序")
            expect(rows.first).to_have_attribute("data-memory", "a0007")
            page.screenshot(path=str(shots / "console-search.png"), full_page=True)

            # Edit the memory found.
            row = table.locator("tr[data-memory=a0007]")
            row.locator("[data-amc=edit]").click()
            row.locator("[data-amc=edit-content]").fill("爱丽丝改口了：现在只喜欢青苹果")
            row.locator("[data-amc=save]").click()
            expect(page.get_by_role("status")).to_contain_text("已保存记忆 a0007")
            # Re-embedded: the old words no longer find it, the new ones do.
            expect(table.locator("tr[data-memory=a0007]")).to_have_count(0)
            table.locator("[data-amc=search]").fill("青苹果")
            table.locator("[data-amc=search-go]").click()
            expect(rows.first).to_have_attribute("data-memory", "a0007")
            expect(rows.first).to_contain_text("现在只喜欢青苹果")

            # Delete one, through the confirmation dialog.
            table.locator("tr[data-memory=a0007] [data-amc=delete]").click()
            dialog = page.get_by_role("dialog")
            expect(dialog).to_contain_text("确定删除这条记忆吗")
            page.screenshot(path=str(shots / "console-delete.png"), full_page=True)
            dialog.locator("[data-amc=confirm]").click()
            expect(page.get_by_role("status")).to_contain_text("已删除记忆 a0007")
            expect(table.locator("tr[data-memory=a0007]")).to_have_count(0)

            # The other views show what the bot holds.
            page.get_by_role("tab", name="备忘录").click()
            page.get_by_role("button", name=ALICE).click()
            expect(page.locator("textarea")).to_have_value("爱丽丝：下周三体检，提醒她空腹。")
            page.get_by_role("tab", name="知识库").click()
            expect(page.get_by_text("知识库为空")).to_be_visible()
            page.get_by_role("tab", name="用户画像").click()
            expect(page.locator("textarea").first).to_have_value("程序员，喜欢脆苹果")
            page.get_by_role("tab", name="群聊感知").click()
            expect(page.get_by_text("群成员画像")).to_be_visible()
            expect(page.get_by_text("机器人自我记忆")).to_be_visible()

            # The archive: the deleted memory, the text the edit replaced, and Carol's two rows.
            page.get_by_role("tab", name="归档").click()
            archive = page.locator("[data-amc=archive]")
            archived = archive.locator("tr[data-archive]")
            expect(archived).to_have_count(4)
            deleted = archive.locator("tr[data-archive='a0007']")
            expect(deleted.locator("[data-amc=reason]")).to_contain_text("已删除")
            replaced = archive.locator("tr[data-archive^='a0007~']")
            expect(replaced).to_contain_text("爱丽丝说过：喜欢第 7 号苹果")
            expect(replaced.locator("[data-amc=reason]")).to_contain_text("更新前的旧版本")
            expect(replaced).to_contain_text(ALICE)
            page.screenshot(path=str(shots / "console-archive.png"), full_page=True)
            archive.locator("[data-amc=archive-partition]").fill(CAROL)
            archive.locator("[data-amc=archive-filter]").click()
            expect(archived).to_have_count(2)
            expect(archive).to_contain_text("超过寿命")
            version = archive.locator("tr[data-archive^='carol-old~']")
            expect(version.locator("[data-amc=versions]")).to_have_text("2 个")
            # Refused, with the reason shown: the memory itself is archived.
            version.locator("[data-amc=restore]").click()
            page.get_by_role("dialog").locator("[data-amc=confirm]").click()
            expect(page.get_by_role("alert")).to_contain_text("请先恢复 carol-old")
            expect(archived).to_have_count(2)
            # Back to every partition; the deleted memory comes back (a delete lost nothing).
            archive.locator("[data-amc=archive-clear]").click()
            expect(archived).to_have_count(4)
            deleted.locator("[data-amc=restore]").click()
            dialog = page.get_by_role("dialog")
            expect(dialog).to_contain_text("确定把这条记忆恢复为有效记忆吗")
            dialog.locator("[data-amc=confirm]").click()
            expect(page.get_by_role("status")).to_contain_text("a0007")
            expect(archived).to_have_count(3)

            # The timeline of one private chat: yesterday's episode, by the owner's day.
            page.get_by_role("tab", name="时间线").click()
            timeline = page.locator("[data-amc=timeline]")
            timeline.locator("[data-amc=timeline-id]").fill("10077")
            timeline.locator("[data-amc=timeline-go]").click()
            day = date.fromtimestamp(time.time() - 86400).isoformat()
            shown = timeline.locator(f"[data-day='{day}']")
            expect(shown).to_contain_text("对话片段 1 段")
            expect(shown.locator("[data-episode]")).to_contain_text("昨天聊了二面的准备")
            expect(shown.locator("[data-episode]")).to_contain_text("模型摘要")
            page.screenshot(path=str(shots / "console-timeline.png"), full_page=True)

            # A re-embedding with its live progress bar.
            page.get_by_role("tab", name="备份与维护").click()
            page.locator("[data-amc=reindex]").click()
            page.get_by_role("dialog").locator("[data-amc=confirm]").click()
            job = page.locator("[data-amc=job]")
            expect(job).to_have_attribute("data-state", "done", timeout=60_000)
            # 49 memories (a0007 restored from the archive) and Carol's 2 archive rows.
            expect(job).to_contain_text("重映射完成：共 52 条")
            page.screenshot(path=str(shots / "console-maintenance.png"), full_page=True)
        finally:
            browser.close()

    with httpx.Client(base_url=bot.url, timeout=30) as api:
        login(api)
        alice = api.get("/api/memory/memories", params={"partition": ALICE, "limit": 100}).json()
        ids = {m["id"] for m in alice["data"]["memories"]}
        assert alice["data"]["total"] == 45 and "a0007" in ids  # restored from the archive
        assert "控制台 WebUI 用户 admin：修改记忆" in bot.log()
        assert "删除记忆 partition=" + ALICE + " id=a0007" in bot.log()
        assert "控制台 WebUI 用户 admin：恢复归档 partition=" + ALICE + " id=a0007" in bot.log()
