"""``ambot memory`` while a remote-mode bot runs: the commands that write go through the bot.

In remote mode nothing stops a second process from opening the store, but a
command doing the work itself has none of the bot's partition locks and write
gate: its sweep could delete a memory the bot updates at that moment. So, as
in local mode, every command that writes asks the running bot (its admin API,
local token) or, for ``migrate-keys`` / ``reset-fingerprint``, refuses. One
``ambot run`` in remote mode (the session's ``chroma run``, a database of its
own) serves the module; the bot's log shows which process did the work (the
console's audit lines, ``ambot memory（本地令牌）``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tests.botproject import ALICE, BOB, BotProject, ambot_ok, ambot_refused, memory_meta
from tests.console_bot import (
    RunningBot,
    assert_nothing_lost,
    seeded_bot,
)
from tests.lazy import lazy_import
from tests.servers import ChromaServer, free_port

E = lazy_import("amrita_plugin_memory.infra.bot_link")
NOW = datetime.now(UTC).isoformat()
LOCAL_ACTOR = "控制台 ambot memory（本地令牌）"

EXPIRED = [
    (f"old{i:03d}", f"远程旧记忆 {i}：爱丽丝去过第 {i} 个城市", memory_meta(ALICE))
    for i in range(6)
]
FRESH = [(f"bob{i}", f"鲍勃最近的事 {i}", memory_meta(BOB, updated_at=NOW)) for i in range(3)]
SEEDED = EXPIRED + FRESH


@pytest.fixture(scope="module")
def bot(
    tmp_path_factory: pytest.TempPathFactory, chroma_server: ChromaServer
) -> Iterator[RunningBot]:
    project = BotProject(tmp_path_factory.mktemp("remote-cli") / "bot")
    project.write_remote_env(chroma_server, "remote_cli")
    running = seeded_bot(project, SEEDED, l3=False)
    yield running
    running.stop()


def test_archive_sweep_and_restore_run_inside_the_bot(bot: RunningBot) -> None:
    project = bot.project
    out = ambot_ok(project.ambot("archive", "sweep"))
    assert out.startswith(f"归档清理完成：扫描 {len(SEEDED)} 条记忆，归档 {len(EXPIRED)} 条"), out
    assert f"{LOCAL_ACTOR}：归档清理 archived={len(EXPIRED)}" in bot.log(), "not done by the bot"

    assert ambot_ok(project.ambot("archive", "restore", "old001")).strip() == "已恢复记忆 old001"
    assert f"{LOCAL_ACTOR}：恢复归档 partition={ALICE} id=old001" in bot.log()
    listing = ambot_ok(project.ambot("archive", "list", "-p", ALICE))
    assert listing.startswith(f"分区 {ALICE} 归档共 {len(EXPIRED) - 1} 条")
    assert f"{LOCAL_ACTOR}：" in bot.log()


def _bot_pid(project: BotProject) -> int:
    """The PID the running bot published with its token."""
    return int(json.loads((project.data_dir / E.TOKEN_FILE_NAME).read_text("utf-8"))["pid"])


def test_every_other_writing_command_asks_the_bot_or_refuses(bot: RunningBot) -> None:
    project = bot.project
    pid = _bot_pid(project)
    made = ambot_ok(project.ambot("backup", "create"))
    assert f"（由运行中的 Bot 创建，PID {pid}）" in made, made

    status = ambot_ok(project.ambot("status"))
    assert "Bot 正在运行" in status

    reindex = ambot_ok(project.ambot("reindex", "--yes"))
    assert "在运行中的 Bot 内执行" in reindex and "重映射完成" in reindex
    assert f"{LOCAL_ACTOR}：开始重映射" in bot.log()

    for args, what in (
        (("migrate-keys",), "迁移分区键"),
        (("reset-fingerprint",), "重置指纹"),
    ):
        line = ambot_refused(project.ambot(*args))  # counted as a hostile input tried
        assert line.startswith(f"错误：Bot 正在运行（PID {pid}），{what}"), line
        assert "需要先停止 Bot（它正在读写同一个远程向量库" in line, line


def test_a_token_file_left_by_a_killed_bot_is_ignored(bot: RunningBot) -> None:
    project = bot.project
    through_bot = ambot_ok(project.ambot("archive", "list", "-n", "50"))
    bot.stop()
    # A token file whose PID is alive (this test process) but nobody listens
    # at its address: what a bot killed with -9 leaves, its PID reused.
    token = project.data_dir / E.TOKEN_FILE_NAME
    token.write_text(
        json.dumps(
            {
                "format": "amrita_plugin_memory/console_token",
                "token": "left-over",
                "host": "127.0.0.1",
                "port": free_port(),
                "pid": os.getpid(),
            }
        ),
        encoding="utf-8",
    )
    try:
        assert ambot_ok(project.ambot("archive", "list", "-n", "50")) == through_bot
        assert "归档清理完成" in ambot_ok(project.ambot("archive", "sweep"))
    finally:
        token.unlink()

    live = assert_nothing_lost(project, SEEDED)
    assert set(live) == {"old001", *(i for i, _, _ in FRESH)}
