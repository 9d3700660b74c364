"""``ambot memory …`` as real subprocesses in a temporary bot project.

Each ``ambot`` start loads Amrita and every plugin (about 5 s), so the many
branches of the startup check and the remap are tested in-process in
``test_embedding.py``; here a representative set of commands runs end to end:
model change with a dimension change, confirmation handling, backups and
restore, key migration, the escape hatch, the embedding service down, a data
dir held by another process, a failure in the middle of a remap and a remote
ChromaDB.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import (
    ALICE,
    BGE,
    GROUP,
    NOMIC,
    BotProject,
    dims,
    memory_meta,
    sample_knowledge,
    sample_memories,
    seed,
    snapshot,
)
from tests.helpers import new_memory
from tests.lazy import lazy_import
from tests.servers import ChromaServer, EmbeddingServer

E = lazy_import(
    "amrita_plugin_memory.embedding",
    "amrita_plugin_memory.embedding.remap",
    "amrita_plugin_memory.core.errors",
)
K = lazy_import(
    "amrita_plugin_memory.storage.keys",
    "amrita_plugin_memory.adapters.events",
    "amrita_plugin_memory.upkeep.rekey",
)
MEM = "amrita_user_memory"
KNOW = "amrita_global_knowledge"


@pytest.fixture
def project(tmp_path: Path, embed_server: EmbeddingServer) -> BotProject:
    return BotProject(tmp_path / "bot")


async def _seed(
    project: BotProject,
    *,
    memories: int = 40,
    group: int = 3,
    knowledge: int = 3,
    fingerprint: bool = True,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Seed the project's store in-process; returns (memory, knowledge) snapshots."""
    rt = project.runtime()
    try:
        items = sample_memories(memories)
        items += [(f"g{i}", f"群记忆 {i}", memory_meta(GROUP, "group")) for i in range(group)]
        await seed(rt, rt.store.name, items)
        if knowledge:
            await seed(rt, KNOW, sample_knowledge(knowledge))
        if fingerprint:
            await E.reset_fingerprint(rt.maintenance)
            await K.migrate_partition_keys(rt.store)
        return await snapshot(rt, MEM), (await snapshot(rt, KNOW) if knowledge else {})
    finally:
        await rt.close()


def _ok(proc: Any) -> str:
    assert proc.returncode == 0, (
        f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc.stdout


def _error(proc: Any) -> str:
    """A clean failure: exit code 1, one clear line on stderr, no traceback."""
    assert proc.returncode == 1, (
        f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("错误：")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


async def test_model_change_reindex_backup_and_restore(project: BotProject) -> None:
    mem_before, know_before = await _seed(project)

    out = _ok(project.ambot("status"))
    assert "状态：  一致" in out
    assert f"已存储：ollama-embed / {NOMIC}" in out
    assert re.search(rf"{ALICE}\s+user\s+40\n", out) and re.search(rf"{GROUP}\s+group\s+3\n", out)
    assert "记忆：共 43 条" in out and f"知识库 {KNOW}：3 条" in out
    assert "QQPlatform_Private_{id}|QQPlatform_Group_{id}" in out and "（无）" in out

    # The model changes (384 -> 768 dimensions).
    project.write_env(EMBEDDING_MODEL_NAME=BGE)
    out = _ok(project.ambot("status"))
    assert (
        "不一致" in out and "ambot memory reindex" in out and f"当前：  ollama-embed / {BGE}" in out
    )

    # Without a TTY and without --yes: refused, nothing touched.
    assert "--yes" in _error(project.ambot("reindex"))
    assert not project.backup_dir.exists()

    out = _ok(project.ambot("reindex", "--yes"))
    assert "重映射完成" in out and f"新指纹：ollama-embed / {BGE}" in out
    rt = project.runtime()
    try:
        assert await snapshot(rt, MEM) == mem_before and await snapshot(rt, KNOW) == know_before
        assert await dims(rt, MEM) == {768} and await dims(rt, KNOW) == {768}
        assert (await E.stored_fingerprint(rt.store)).model == BGE
        assert sorted(await rt.connection.list_collections()) == [KNOW, MEM]
    finally:
        await rt.close()
    assert len(list(project.backup_dir.glob("embed_backup_*.json"))) == 1

    out = _ok(project.ambot("backup", "create"))
    assert "已创建备份" in out and f"{MEM} 43 条" in out
    created = Path(out.split("已创建备份：", 1)[1].splitlines()[0].strip())

    # Change the store after the backup, then restore it by file name.
    rt = project.runtime()
    try:
        await rt.store.delete(ALICE, "m0001")
        await rt.store.add(new_memory(ALICE, "user", "备份之后写入的记忆"))
        assert await snapshot(rt, MEM) != mem_before
    finally:
        await rt.close()
    out = _ok(project.ambot("backup", "restore", created.name, "--yes"))
    assert "恢复完成" in out and "恢复前的内容已备份到" in out
    rt = project.runtime()
    try:
        assert await snapshot(rt, MEM) == mem_before and await snapshot(rt, KNOW) == know_before
        assert await dims(rt, MEM) == {768}
    finally:
        await rt.close()

    out = _ok(project.ambot("backup", "list"))
    listed = [p.name for p in sorted(project.backup_dir.glob("embed_backup_*.json"))]
    assert len(listed) == 3 and all(name in out for name in listed)


async def test_embedding_service_down(project: BotProject) -> None:
    await _seed(project, memories=5, group=0, knowledge=0)
    project.write_env(EMBEDDING_MODEL_NAME="auto", EMBEDDING_MODEL_URL="http://127.0.0.1:9")
    out = _ok(project.ambot("status"))
    assert f"已存储：ollama-embed / {NOMIC}" in out
    assert "无法计算" in out and "嵌入服务无法连接" in out and "记忆：共 5 条" in out

    out = _ok(project.ambot("backup", "create"))
    assert f"{MEM} 5 条" in out

    assert "嵌入服务无法连接" in _error(project.ambot("reindex", "--yes"))
    assert len(list(project.backup_dir.glob("embed_backup_*.json"))) == 1


async def test_data_dir_held_by_a_running_bot(project: BotProject) -> None:
    await _seed(project, memories=3, group=0, knowledge=0)
    holder = project.runtime()
    try:
        await holder.connection.client()  # a running bot holds the embedded ChromaDB
        line = _error(project.ambot("reindex", "--yes"))
        assert "正被另一个进程" in line and "可能是运行中的 Bot" in line
        status = project.ambot("status")
        assert "正被另一个进程" in _error(status)
        assert "（不可用）" in status.stdout and "备份（" in status.stdout
    finally:
        await holder.close()


async def test_migrate_keys_and_reset_fingerprint(project: BotProject) -> None:
    rt = project.runtime()
    try:
        await seed(
            rt,
            MEM,
            [
                ("old-user", "旧格式个人记忆", memory_meta("user_10001")),
                ("old-group", "旧格式群记忆", memory_meta("group_20001", "group")),
                ("current", "新格式记忆", memory_meta(ALICE)),
            ],
        )
    finally:
        await rt.close()

    out = _ok(project.ambot("migrate-keys", "--dry-run"))
    assert "扫描 3 条，需要改写 2 条" in out and "试运行" in out
    out = _ok(project.ambot("migrate-keys"))
    assert "已改写 2 条" in out
    out = _ok(project.ambot("reset-fingerprint"))
    assert "原指纹：未记录" in out and f"新指纹：ollama-embed / {NOMIC}" in out

    rt = project.runtime()
    try:
        snap = await snapshot(rt, MEM)
        assert (snap["old-user"][1] or {})["user_id"] == ALICE
        assert (snap["old-group"][1] or {})["user_id"] == GROUP
        assert (await E.stored_fingerprint(rt.store)).model == NOMIC
        assert E.run_startup_check(rt.maintenance, interactive=False).action == "match"
    finally:
        await rt.close()


async def test_failure_in_the_middle_of_reindex(
    project: BotProject, embed_server: EmbeddingServer
) -> None:
    mem_before, _ = await _seed(project, memories=64, group=0, knowledge=0)
    project.write_env(EMBEDDING_MODEL_NAME=BGE, REEMBED_BATCH_SIZE=16)
    embed_server.set_mode("error500", after=2)  # two of four batches succeed
    line = _error(project.ambot("reindex", "--yes"))
    assert "重映射失败" in line and "HTTP 500" in line and "所有记忆仍在原集合中" in line
    embed_server.set_mode("ok")
    backups = list(project.backup_dir.glob("embed_backup_*.json"))
    assert len(backups) == 1 and str(backups[0]) in line
    rt = project.runtime()
    try:
        assert await snapshot(rt, MEM) == mem_before and await dims(rt, MEM) == {384}
        assert (await E.stored_fingerprint(rt.store)).model == NOMIC
        assert await rt.connection.list_collections() == [MEM]
        # The retry succeeds from a clean state.
        report = await E.remap(rt.maintenance)
        assert report.total == 64 and await dims(rt, MEM) == {768}
        assert await snapshot(rt, MEM) == mem_before
    finally:
        await rt.close()


async def test_remote_chromadb(project: BotProject, chroma_server: ChromaServer) -> None:
    database = f"cli_{uuid.uuid4().hex[:8]}"
    project.write_env(
        VECTOR_DB_TYPE="remote",
        VECTOR_DB_SERVER=chroma_server.host,
        VECTOR_DB_PORT=chroma_server.port,
        VECTOR_DB_DATABASE=database,
    )
    mem_before, know_before = await _seed(project, memories=20, group=2, knowledge=2)
    project.write_env(
        VECTOR_DB_TYPE="remote",
        VECTOR_DB_SERVER=chroma_server.host,
        VECTOR_DB_PORT=chroma_server.port,
        VECTOR_DB_DATABASE=database,
        EMBEDDING_MODEL_NAME=BGE,
    )
    out = _ok(project.ambot("reindex", "--yes"))
    assert "重映射完成" in out
    out = _ok(project.ambot("status"))
    assert f"向量库：remote {chroma_server.url}" in out and "状态：  一致" in out
    assert "记忆：共 22 条" in out
    rt = project.runtime()
    try:
        assert await snapshot(rt, MEM) == mem_before and await snapshot(rt, KNOW) == know_before
        assert await dims(rt, MEM) == {768}
    finally:
        await rt.close()


@pytest.mark.parametrize("layout", ["no_pyproject", "not_a_bot", "plugin_not_enabled"])
def test_outside_a_bot_project(tmp_path: Path, layout: str) -> None:
    """Run where it cannot work: one clear line, exit 1, nothing created on disk."""
    project = BotProject(tmp_path / "bot")
    if layout == "no_pyproject":
        (project.root / "pyproject.toml").unlink()
        expected = "不在 AmritaBot 项目中"
    elif layout == "not_a_bot":
        (project.root / "pyproject.toml").write_text(
            '[project]\nname = "not-a-bot"\nversion = "0"\n', encoding="utf-8"
        )
        expected = "不在 AmritaBot 项目中"
    else:
        text = (project.root / "pyproject.toml").read_text(encoding="utf-8")
        (project.root / "pyproject.toml").write_text(
            text.replace('plugins = ["amrita_plugin_memory"]', "plugins = []"), encoding="utf-8"
        )
        expected = "没有加载 amrita_plugin_memory 插件"
    before = sorted(p.name for p in project.root.iterdir())
    line = _error(project.ambot("status", timeout=120))
    assert expected in line
    if layout != "plugin_not_enabled":  # nothing was bootstrapped, so nothing was created
        assert sorted(p.name for p in project.root.iterdir()) == before
    assert not project.data_dir.exists()


def test_help_needs_no_bot_and_commands_print_only_their_output(project: BotProject) -> None:
    """`--help` answers without loading the bot; a command shows no start-up log unless -v."""
    before = sorted(p.name for p in project.root.iterdir())
    for args in (("--help",), ("backup", "restore", "--help")):
        done = project.ambot(*args, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "Usage: ambot memory" in done.stdout and done.stderr == ""
    # Nothing was bootstrapped (amrita.init() would have created logs/ and plugins/).
    assert sorted(p.name for p in project.root.iterdir()) == before

    quiet = project.ambot("backup", "list")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    assert quiet.stdout.splitlines()[0].startswith("备份（"), quiet.stdout
    loud = project.ambot("-v", "backup", "list")
    assert loud.returncode == 0, loud.stderr
    log = loud.stdout + loud.stderr
    assert "[INFO]" in log and "amrita_plugin_memory" in log  # the bot's start-up log
    assert "Legacy project format" not in log  # the project uses NoneBot's current format
