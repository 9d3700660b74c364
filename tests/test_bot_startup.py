"""A real bot process: migrations, config files, and the startup check's refusal.

These run ``ambot`` as a subprocess in a throw-away bot project, the way an
operator does on a server (stdin is not a TTY).
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.botproject import BGE, NOMIC, VENV_BIN, BotProject, sample_memories, seed
from tests.lazy import lazy_import
from tests.servers import EmbeddingServer, free_port

E = lazy_import(
    "amrita_plugin_memory.embedding",
    "amrita_plugin_memory.embedding.remap",
    "amrita_plugin_memory.core.errors",
)


MIGRATIONS = Path(__file__).resolve().parent.parent / "amrita_plugin_memory" / "migrations"


def plugin_head() -> str:
    """The plugin's newest migration: the revision no other one builds on."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in MIGRATIONS.glob("*.py"):
        text = script.read_text(encoding="utf-8")
        revisions.update(re.findall(r'^revision: str = "(\w+)"', text, re.M))
        parents.update(re.findall(r'^down_revision: .*= "(\w+)"', text, re.M))
    (head,) = revisions - parents
    return head


@pytest.fixture
def project(tmp_path: Path, embed_server: EmbeddingServer) -> BotProject:
    return BotProject(tmp_path / "bot")


def test_orm_upgrade_reaches_head_and_check_is_clean(project: BotProject) -> None:
    upgrade = project.command("orm", "upgrade")
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    db = project.root / "data" / "nonebot_plugin_orm" / "db.sqlite3"
    with sqlite3.connect(db) as conn:
        versions = {row[0] for row in conn.execute("select version_num from alembic_version")}
        tables = {
            row[0] for row in conn.execute("select name from sqlite_master where type='table'")
        }
    assert plugin_head() in versions
    assert {
        "amrita_plugin_memory_user_memo",
        "amrita_plugin_memory_subconscious_state",
        "amrita_plugin_memory_group_message",
        "amrita_plugin_memory_group_label",
        "amrita_plugin_memory_group_setting",
        "amrita_plugin_memory_persona",
        "amrita_plugin_memory_self_memory",
        "amrita_plugin_memory_active_optout",
        "amrita_plugin_memory_partition_change",
        "amrita_plugin_memory_lease",
        "amrita_plugin_memory_forgotten_user",
    } <= tables
    check = project.command("orm", "check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "没有检测到新的升级操作" in check.stdout + check.stderr
    heads = project.command("orm", "heads")
    assert f"{plugin_head()} (amrita_plugin_memory) (head)" in heads.stdout


def test_orm_command_starts_no_vector_store(
    project: BotProject, embed_server: EmbeddingServer
) -> None:
    """``ambot orm …`` needs only the ORM models: no runtime, no Chroma child, no embedding call."""
    project.write_env(**{**project.env, "LOG_LEVEL": "INFO"})
    started = time.monotonic()
    upgrade = project.command("orm", "upgrade")
    elapsed = time.monotonic() - started
    log = upgrade.stdout + upgrade.stderr
    assert upgrade.returncode == 0, log
    assert log.count("[Memory]") == 1 and "[Memory] orm 命令只需要数据表模型" in log, log
    assert "chroma run" not in log, log
    assert not (project.data_dir / "vector_db.chroma").exists()  # nothing opened it
    assert embed_server.requests == []  # not even the model list
    db = project.root / "data" / "nonebot_plugin_orm" / "db.sqlite3"
    with sqlite3.connect(db) as conn:  # the migrations still see the plugin's models
        versions = {row[0] for row in conn.execute("select version_num from alembic_version")}
    assert plugin_head() in versions
    print(f"ambot orm upgrade: {elapsed:.1f} s")


def run_bot_until_started(project: BotProject, timeout: float = 90) -> str:
    """Start ``ambot run``, wait for the web server, stop it; return its log."""
    port = free_port()
    project.write_env(**{**project.env, "HOST": "127.0.0.1", "PORT": port, "LOG_LEVEL": "INFO"})
    proc = subprocess.Popen(
        [str(VENV_BIN / "ambot"), "run"],
        cwd=project.root,
        env=project.process_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "Application startup complete" in line or time.monotonic() > deadline:
                break
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    log = "".join(lines)
    assert "Application startup complete" in log, log[-3000:]
    return log


async def test_bot_starts_with_the_plugin_and_creates_its_files(project: BotProject) -> None:
    log = run_bot_until_started(project)
    assert "[Memory] 已加载" in log
    assert 'Succeeded to load plugin "amrita_plugin_memory"' in log
    assert (project.root / "config" / "amrita_plugin_memory" / "config.toml").exists()
    assert (project.data_dir / "vector_db.chroma").is_dir()


async def test_ask_without_tty_refuses_the_plugin_but_the_bot_runs(project: BotProject) -> None:
    rt = project.runtime()
    try:
        await seed(rt, rt.store.name, sample_memories(5))
        await E.reset_fingerprint(rt.maintenance)  # fingerprint of nomic-embed-text
    finally:
        await rt.close()
    project.write_env(EMBEDDING_MODEL_NAME=BGE, EMBED_MISMATCH_POLICY="ask")
    log = run_bot_until_started(project)
    assert "EMBED_MISMATCH_POLICY=ask 需要交互确认" in log
    assert "EMBED_MISMATCH_POLICY=auto" in log and "ambot memory reindex" in log
    assert "[Memory] 已加载" not in log  # nothing registered
    assert "Traceback" not in log
    # The data are untouched and the data dir is free for the maintenance command.
    rt = project.runtime(embedding_model_name=NOMIC)
    try:
        assert await rt.store.count_all() == 5
        assert (await E.stored_fingerprint(rt.store)).model == NOMIC
    finally:
        await rt.close()


async def test_invalid_config_disables_only_the_plugin(project: BotProject) -> None:
    config = project.root / "config" / "amrita_plugin_memory" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("memo_max_chars = 500\nkey_from_a_newer_version = 1\n", encoding="utf-8")
    project.write_env(EMBED_MISMATCH_POLICY="sometimes")
    log = run_bot_until_started(project)
    assert "配置无效，插件未启用" in log
    assert "EMBED_MISMATCH_POLICY" in log and "'ask', 'auto' or 'never'" in log
    assert "[Memory] 已加载" not in log and "Traceback" not in log

    project.write_env(EMBED_MISMATCH_POLICY="never")
    log = run_bot_until_started(project)
    assert "未知配置项 key_from_a_newer_version" in log  # a warning, not an error
    assert "[Memory] 已加载" in log


@pytest.mark.process
def test_a_bot_whose_port_was_taken_meanwhile_starts_on_another(tmp_path: Path) -> None:
    """The harness's bots bind a port chosen earlier; a client socket or another server may
    hold it by then (the bind fails after "Application startup complete"): another port."""
    import socket

    import httpx

    from tests.console_bot import RunningBot

    bot = RunningBot(BotProject(tmp_path / "bot"), l3=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        bot.port = port
        bot.start()
        try:
            assert bot.port != port
            assert httpx.get(bot.url + "/", timeout=10).status_code < 500
        finally:
            bot.stop()
