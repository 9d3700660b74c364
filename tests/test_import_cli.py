"""``ambot memory import FILE`` as a real command: through a running bot, then without one.

One ``ambot run`` (local ChromaDB; it holds the data dir, so the command must ask it
through the admin API) with a few seeded memories. A hostile file is refused with its
bad lines named and nothing written; a good file is imported by the bot (its audit line
says so), a second run adds nothing, the export shows the original ``created_at`` and
``event_time``; with the bot stopped the command opens the store itself and, again,
adds nothing. The remote-mode bot: ``tests/test_remote_bot_cli.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.botproject import ALICE, BotProject, ambot_ok, ambot_refused, memory_meta, snapshot
from tests.console_bot import run_async, seeded_bot

SEEDED = [(f"alice{i}", f"爱丽丝原有的记忆 {i}", memory_meta(ALICE)) for i in range(2)]
LOCAL_ACTOR = "控制台 ambot memory（本地令牌）"

GOOD = [
    {
        "user_id": "10001",
        "content": "爱丽丝 2019 年去过冰岛",
        "created_at": "2023-05-08T13:56:00+08:00",
        "event_time": "2019",
    },
    {
        "user_id": "10001",
        "content": "爱丽丝的猫叫糯米",
        "created_at": "2023-05-09T09:00:00",
        "tags": ["宠物"],
    },
    {
        "user_id": "10001",
        "content": "群里约好每周五聚餐",
        "created_at": "2023-06-02T20:00:00+08:00",
        "scope": "group",
        "group_id": "20001",
        "importance": "high",
    },
]


def _file(path: Path, rows: list[object]) -> Path:
    text = "\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def test_import_through_the_running_bot_then_without_it(tmp_path: Path) -> None:
    bot = seeded_bot(BotProject(tmp_path / "bot"), SEEDED, l3=False)
    project = bot.project
    good = _file(tmp_path / "good.jsonl", list(GOOD))
    bad = _file(
        tmp_path / "bad.jsonl",
        [
            GOOD[0],
            GOOD[1],
            {**GOOD[1], "importance": "urgent"},
            "{oops",
            {**GOOD[2], "group_id": None},
        ],
    )
    try:
        refused = project.ambot("import", str(bad))
        line = ambot_refused(refused)
        assert line == "错误：导入文件有 3 行无效，未写入任何记忆：", line
        said = refused.stderr
        assert "第 3 行：importance 'urgent' 无效" in said and "第 4 行：不是合法的 JSON" in said
        assert "第 5 行：scope 为 group 时必须给出 group_id" in said
        assert "导入记忆" not in bot.log()  # nothing reached the bot

        out = ambot_ok(project.ambot("import", str(good)))
        assert "（由运行中的 Bot 执行，PID" in out, out
        assert "共 3 条：新增 3 条，已存在 0 条" in out, out
        assert f"{LOCAL_ACTOR}：导入记忆 lines=3 added=3 existing=0 left_out=0" in bot.log()
        # A second run adds nothing: checked below with the bot stopped (the direct path);
        # through the bot the same fixed ids are checked in-process (tests/test_import.py).
        document = json.loads(ambot_ok(project.ambot("export", "--user", "10001")))
        mine = {m["content"]: m for m in document["memories"]}
        assert mine["爱丽丝 2019 年去过冰岛"]["created_at"] == "2023-05-08T05:56:00+00:00"
        assert mine["爱丽丝 2019 年去过冰岛"]["event_time"] == "2019"
        assert mine["爱丽丝的猫叫糯米"]["tags"] == ["宠物"]
        (group,) = document["group_memories"]
        assert group["content"] == "群里约好每周五聚餐" and group["origin"] == "group:20001"
    finally:
        bot.stop()

    here = ambot_ok(project.ambot("import", str(good)))
    assert "由运行中的 Bot" not in here and "共 3 条：新增 0 条，已存在 3 条" in here, here
    missing = ambot_refused(project.ambot("import", str(tmp_path / "nope.jsonl")))
    assert missing.startswith("错误：无法读取"), missing

    async def live() -> dict[str, Any]:
        rt = project.runtime()
        try:
            return await snapshot(rt, rt.store.name)
        finally:
            await rt.close()

    assert len(run_async(live())) == len(SEEDED) + len(GOOD)
