"""Two real bot processes on one store: one shared usage ledger, one per-user cap.

Two ``ambot run`` (``tests/scale_out_bots.py``: each its own project, ``.env``,
port and Amrita tables) share the session's ``chroma run`` and one SQLite file for
the plugin's tables (``SQLALCHEMY_BINDS``). Active memory extracts after every
answered private turn; the scripted chat server answers the extraction requests
and reports 11/7 tokens each. Users chat with both bots over OneBot; a user's
share (``[budget] background_tokens_per_user_per_day = 36``: two requests) spent
through both bots holds that user's next extraction back in either. Then
``ambot memory status --json`` (and the text form), run in each project while its
bot runs, shows the ledger of both processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from tests.active_helpers import answer_rule, extractions
from tests.botproject import ambot_ok
from tests.conftest import CHAT
from tests.scale_out_bots import DEADLINE, ScaleBot, SharedMemory, poll_until
from tests.servers import ChromaServer

PLUGIN_CONFIG = """\
[active_memory]
enabled = true
batch_messages = 1
idle_seconds = 3600
recall = false
notice = false

[archive]
enabled = false

[budget]
background_tokens_per_day = 0
background_tokens_per_user_per_day = 36
"""
FLOODER, OTHER = 10_021, 10_022


@pytest.fixture(scope="module")
def bots(
    tmp_path_factory: Any, chroma_server: ChromaServer
) -> Iterator[tuple[ScaleBot, ScaleBot, Path]]:
    root = tmp_path_factory.mktemp("usage-bots")
    db = root / "memory.sqlite3"
    shared = SharedMemory.fresh(chroma_server, f"sqlite+aiosqlite:///{db}")
    pair = [ScaleBot(root / name, shared, CHAT, memory_limit=50) for name in ("a", "b")]
    for bot in pair:
        config = bot.project.root / "config" / "amrita_plugin_memory" / "config.toml"
        config.write_text(PLUGIN_CONFIG, encoding="utf-8")
    upgrade = pair[0].project.command("orm", "upgrade")  # once, as the docs say
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    started: list[ScaleBot] = []
    try:
        for bot in pair:
            bot.start()
            started.append(bot)
        yield pair[0], pair[1], db
    finally:
        for bot in started:
            bot.stop()
        CHAT.clear()


def ledger_requests(db: Path, user: int | None = None) -> int:
    """Extraction requests in the shared ledger (all days), straight from the SQLite file."""
    query = "SELECT COALESCE(SUM(requests), 0) FROM amrita_plugin_memory_usage WHERE feature = ?"
    args: list[Any] = ["extraction"]
    if user is not None:
        query += " AND user_id = ?"
        args.append(str(user))
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return int(conn.execute(query, args).fetchone()[0])


async def chat(link: Any, user: int, text: str) -> None:
    before = len(link.replies())
    await link.say(user, text)
    assert len(link.replies()) == before + 1, "the turn was not answered"


def test_two_bots_share_the_ledger_and_a_users_share(
    bots: tuple[ScaleBot, ScaleBot, Path],
) -> None:
    a, b, db = bots
    day = date.today()
    CHAT.clear()
    CHAT.set_rule(answer_rule(lambda _: {"memories": []}))

    async def scenario() -> None:
        friends = {FLOODER, OTHER}
        async with a.onebot(friends) as to_a, b.onebot(friends) as to_b:
            await chat(to_a, FLOODER, "我在杭州上班")
            await poll_until(lambda: ledger_requests(db, FLOODER) == 1, DEADLINE, "A's extraction")
            await chat(to_b, OTHER, "我养了一条狗")
            await poll_until(lambda: ledger_requests(db, OTHER) == 1, DEADLINE, "B's extraction")
            await chat(to_b, FLOODER, "我喜欢爬山")
            await poll_until(lambda: ledger_requests(db, FLOODER) == 2, DEADLINE, "B's second")
            # The flooder's share (36 tokens) is spent, through both bots: each holds them back.
            await chat(to_a, FLOODER, "我周末去了西湖")
            await poll_until(lambda: "达到每人上限" in a.log(), DEADLINE, "A's budget log line")
            await chat(to_b, FLOODER, "我还喜欢游泳")
            await poll_until(lambda: "达到每人上限" in b.log(), DEADLINE, "B's budget log line")

    asyncio.run(scenario())
    assert len(extractions(CHAT)) == 3
    assert ledger_requests(db) == 3
    for bot in (a, b):
        line = next(x for x in bot.log().splitlines() if "达到每人上限" in x)
        assert f"[Memory] 用户 {FLOODER} 今天" in line and "已用 36 token" in line
        assert "聊天不受影响" in line
    if date.today() != day:
        pytest.skip("the local day changed during the test: its figures span two days")

    for bot in (a, b):  # each bot answers for the ledger of both processes
        report = json.loads(ambot_ok(bot.project.ambot("status", "--json")))
        usage = report["usage"]
        assert usage["today"]["extraction"] == {
            "requests": 3, "prompt_tokens": 33, "completion_tokens": 21, "cached_tokens": 0,
        }  # fmt: skip
        assert usage["today"]["persona"]["requests"] == 0
        assert usage["last_30_days"]["extraction"]["requests"] == 3
        assert usage["daily"]["extraction"][-1] == 54
        assert usage["budget"]["users_reached"] == [{"user_id": str(FLOODER), "tokens": 36}]
        assert usage["budget"]["background_tokens_per_user_per_day"] == 36
        assert usage["blocks"]["today"]["turns"] in range(0, 6)  # flushed once a minute
    text = ambot_ok(a.project.ambot("status"))
    assert "主动记忆提取" in text and "请求 3，输入 33（缓存命中 0），输出 21" in text
    assert f"用户 {FLOODER} 今天已用 36，达到每人上限" in text
