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
from typing import Any

import pytest

from tests.botproject import (
    ALICE,
    BOB,
    BotProject,
    ambot_ok,
    ambot_refused,
    memory_meta,
    snapshot,
)
from tests.console_bot import RunningBot, assert_nothing_lost, run_async, seeded_bot
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


def test_import_runs_inside_the_remote_bot(bot: RunningBot, tmp_path: Any) -> None:
    project = bot.project
    rows = [
        {"user_id": "10002", "content": f"鲍勃导入的旧事 {i}", "created_at": f"2021-0{i + 1}-01"}
        for i in range(3)
    ]
    source = tmp_path / "bob.jsonl"
    source.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), "utf-8")
    out = ambot_ok(project.ambot("import", str(source)))
    assert f"（由运行中的 Bot 执行，PID {_bot_pid(project)}）" in out, out
    assert "共 3 条：新增 3 条，已存在 0 条" in out, out
    assert f"{LOCAL_ACTOR}：导入记忆 lines=3 added=3 existing=0 left_out=0" in bot.log()
    assert "共 3 条：新增 0 条，已存在 3 条" in ambot_ok(project.ambot("import", str(source)))
    imported = [m for _, m in _live_rows(project).values() if m and m["created_at"] < "2022"]
    assert len(imported) == 3  # the owner's midnight of each day, stored in UTC


def _live_rows(project: BotProject) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        rt = project.runtime()
        try:
            return await snapshot(rt, rt.store.name)
        finally:
            await rt.close()

    return run_async(read())


def _write_token(project: BotProject, started: str | None) -> None:
    """A token file naming this test process (alive) and a port nobody listens at."""
    (project.data_dir / E.TOKEN_FILE_NAME).write_text(
        json.dumps(
            {
                "format": "amrita_plugin_memory/console_token",
                "token": "left-over",
                "host": "127.0.0.1",
                "port": free_port(),
                "pid": os.getpid(),
                "started": started,
            }
        ),
        encoding="utf-8",
    )


def test_a_token_file_left_by_a_killed_bot_is_ignored(bot: RunningBot) -> None:
    project = bot.project
    through_bot = ambot_ok(project.ambot("archive", "list", "-n", "50"))
    bot.stop()
    # What a bot killed with -9 leaves: its PID now belongs to another process (this
    # test process, alive), started later than the one that wrote the file.
    _write_token(project, "another-boot:12345")
    try:
        assert ambot_ok(project.ambot("archive", "list", "-n", "50")) == through_bot
        assert "归档清理完成" in ambot_ok(project.ambot("archive", "sweep"))
    finally:
        (project.data_dir / E.TOKEN_FILE_NAME).unlink()

    live = assert_nothing_lost(project, SEEDED)
    # The memories of the import test (said in 2021) outlive the sweep: their lifetime
    # counts from the day they were imported (``imported_at``), not from 2021.
    imported = {i for i, (_, m) in _live_rows(project).items() if m and m["created_at"] < "2022"}
    assert len(imported) in (0, 3)  # 0: the import test did not run first
    assert set(live) - imported == {"old001", *(i for i, _, _ in FRESH)}


def test_a_running_bot_that_cannot_be_reached_is_never_raced(bot: RunningBot) -> None:
    """The process that wrote the token file runs (it is this test process), but its
    admin API refuses the connection: the commands that write refuse; reads work here."""
    project = bot.project
    bot.stop()
    before = _live_rows(project)
    writing = [
        ("forget", "--user", "10002", "--yes"),
        ("archive", "sweep"),
        ("backup", "create"),
        ("migrate-keys",),
    ]
    refusal = f"错误：Bot 正在运行（PID {os.getpid()}），但它的管理接口"
    # A file without the process's start time (an older bot wrote it) counts as running.
    for started, commands in ((E.process_start(os.getpid()), writing), (None, writing[:1])):
        _write_token(project, started)
        try:
            for args in commands:
                line = ambot_refused(project.ambot(*args))
                assert line.startswith(refusal), (args, line)
                assert "本命令不会自行读写数据" in line and E.TOKEN_FILE_NAME in line
            if started is not None:
                listing = project.ambot("archive", "list", "-n", "50")
                assert ambot_ok(listing).startswith("归档共 ")
                assert "本命令只读取数据，改为在本进程中读取" in listing.stderr
        finally:
            (project.data_dir / E.TOKEN_FILE_NAME).unlink()
    assert _live_rows(project) == before  # nothing was written

    # No bot at all: the commands that write work in their own process.
    out = ambot_ok(project.ambot("forget", "--user", "10002", "--yes"))
    assert "已遗忘用户 10002：" in out and "（由运行中的 Bot 执行" not in out
