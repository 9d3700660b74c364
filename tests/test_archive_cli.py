"""The archive through its real surfaces: the ``/memory user archive`` chat command
(real OneBot events), ``ambot memory archive …`` subprocesses, a ``kill -9`` during
a sweep, Chroma down during a sweep, and backups / re-embedding covering the archive."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.botproject import ALICE, BGE, BotProject, ambot_ok, make_runtime, memory_meta
from tests.helpers import new_memory, view_of
from tests.lazy import lazy_import
from tests.reliability_stats import STATS
from tests.servers import ChromaServer, EmbeddingServer

A = lazy_import(
    "amrita_plugin_memory.storage.archive.store",
    "amrita_plugin_memory.upkeep.archive.restore",
    "amrita_plugin_memory.upkeep.archive.sweep",
    "amrita_plugin_memory.embedding",
    "amrita_plugin_memory.embedding.report_json",
    "amrita_plugin_memory.core.config",
    "amrita_plugin_memory.core.errors",
)


# ---------------------------------------------------------------------------
# /memory user archive (real OneBot events through the plugin's matcher)
# ---------------------------------------------------------------------------


async def _command(event: Any) -> Any:
    from tests.chat import BotRecorder, make_bot, run_turn

    recorder = BotRecorder()
    await run_turn(make_bot(recorder), event)
    return recorder


async def test_chat_archive_lists_and_restores_own_memories_only() -> None:
    from tests.events import group_event, private_event
    from tests.helpers import partition, runtime
    from tests.reliability_stats import STATS

    store = runtime().store
    me, other = partition(16001), partition(16002)
    mine = await store.add(new_memory(me, "user", "我的旧爱好是集邮"))
    await store.update(me, mine.id, content="我的爱好是摄影")
    theirs = await store.add(new_memory(other, "user", "别人的秘密"))
    await store.update(other, theirs.id, content="别人的新秘密")
    (their_version,) = await store.archive.list(view_of(other), memory_id=theirs.id)

    (reply,) = (await _command(private_event(16001, "/memory user archive"))).texts("private")
    assert "你已归档的记忆（共 1 条" in reply and "我的旧爱好是集邮" in reply
    assert "更新前的旧版本" in reply and "别人" not in reply
    (my_version,) = await store.archive.list(view_of(me), memory_id=mine.id)
    assert my_version.id in reply

    rec = await _command(group_event(16001, 26001, "/memory user archive"))  # never in a group
    assert rec.texts("group") == ["个人记忆已通过私聊发送给你"]
    assert "我的旧爱好是集邮" in rec.texts("private")[0]

    before = (await store.get(view_of(other), theirs.id), await store.archive.count(view_of(other)))
    hostile = [
        their_version.id,  # another user's version
        theirs.id,
        "not-an-id",
        "'; DROP TABLE x; --",
        "x" * 500,
        "",
        "1 2 3",
    ]
    for arg in hostile:
        STATS.inputs_tried += 1
        rec = await _command(private_event(16001, f"/memory user archive restore {arg}".strip()))
        (reply,) = rec.texts("private")
        assert reply.startswith(("恢复失败：", "请提供归档 ID")), reply
        assert "Traceback" not in reply
    assert (
        await store.get(view_of(other), theirs.id),
        await store.archive.count(view_of(other)),
    ) == before
    assert (await store.get(view_of(me), mine.id)).content == "我的爱好是摄影"

    rec = await _command(private_event(16001, f"/memory user archive restore {my_version.id}"))
    assert rec.texts("private") == [
        f"已把记忆 {mine.id} 恢复为归档中的旧版本（替换前的内容已存入归档）"
    ]
    assert (await store.get(view_of(me), mine.id)).content == "我的旧爱好是集邮"
    for garbage in ("abc", "0", "2 3"):
        STATS.inputs_tried += 1
        rec = await _command(private_event(16001, f"/memory user archive {garbage}"))
        assert rec.texts("private")[0].startswith("用法："), rec.texts("private")


# ---------------------------------------------------------------------------
# Helpers: expired memories, and "nothing lost" across live + archive
# ---------------------------------------------------------------------------

DIM = 384  # the test embedding server's dimension for NOMIC


def expired_items(n: int, prefix: str = "old") -> list[tuple[str, str, dict[str, Any]]]:
    """Memories last updated 2025-01-01 (medium: 90-day lifetime, long expired)."""
    return [
        (f"{prefix}{i:05d}", f"旧记忆 {prefix}{i}：用户喜欢第 {i} 号梨", memory_meta(ALICE))
        for i in range(n)
    ]


async def add_raw(rt: Any, items: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Add items with generated vectors (no embedding calls: fast for thousands)."""
    col = await rt.store.collection()
    rng = np.random.default_rng(7)
    for start in range(0, len(items), 500):
        chunk = items[start : start + 500]
        vectors = rng.standard_normal((len(chunk), DIM)).astype(np.float32).tolist()
        await rt.connection.run(
            lambda chunk=chunk, vectors=vectors: col.add(
                ids=[i for i, _, _ in chunk],
                documents=[d for _, d, _ in chunk],
                embeddings=vectors,
                metadatas=[m for _, _, m in chunk],
            )
        )
    rt.store.invalidate()


async def rows_of(rt: Any, col: Any) -> dict[str, tuple[str, dict[str, Any]]]:
    res = await rt.connection.run(lambda: col.get(include=["documents", "metadatas"]))
    return {
        i: (d, dict(m))
        for i, d, m in zip(res["ids"], res["documents"], res["metadatas"], strict=True)
    }


async def check_nothing_lost(
    rt: Any, items: list[tuple[str, str, dict[str, Any]]]
) -> tuple[int, int]:
    """Every item is live or archived with its text and metadata; ``(live, archived)``.

    ``updated_at`` may differ: a restored memory's is the restore time.
    """
    rt.store.invalidate()
    live = await rows_of(rt, await rt.store.collection())
    archived = await rows_of(rt, await rt.store.archive.collection())
    lost = 0
    for item_id, doc, meta in items:
        got = live.get(item_id) or archived.get(item_id)
        if (
            got is None
            or got[0] != doc
            or any(got[1].get(k) != v for k, v in meta.items() if k != "updated_at")
        ):
            lost += 1
    STATS.items_lost += lost
    assert lost == 0
    return len(live), len(archived)


def write_config(project: BotProject, text: str) -> None:
    path = project.root / "config" / "amrita_plugin_memory" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


_ok = ambot_ok


# ---------------------------------------------------------------------------
# ambot memory archive sweep | list | restore, and status
# ---------------------------------------------------------------------------


async def test_cli_sweep_list_restore_and_status(
    tmp_path: Path, embed_server: EmbeddingServer
) -> None:
    project = BotProject(tmp_path / "bot")
    rt = project.runtime()
    old = expired_items(12)
    try:
        await add_raw(rt, old)
        await rt.store.add(new_memory(ALICE, "user", "今天刚记住的事"))
    finally:
        await rt.close()

    assert "归档清理完成：扫描 13 条记忆，归档 12 条" in _ok(project.ambot("archive", "sweep"))
    out = _ok(project.ambot("archive", "list", "-p", ALICE, "-n", "3"))
    assert f"分区 {ALICE} 归档共 12 条（最新的在前，显示 3 条）" in out
    assert "[超过寿命，归档于" in out and "旧记忆 old" in out
    assert _ok(project.ambot("archive", "restore", "old00003")).strip() == "已恢复记忆 old00003"

    rt = project.runtime()
    try:
        report = A.status_json(await A.collect_status(rt.maintenance), project.backup_dir)
        assert report["archive_total"] == 11  # `ambot memory status` prints "归档：11 条"
        assert await check_nothing_lost(rt, old) == (2, 11)
        back = await rt.store.get(view_of(ALICE), "old00003")
        assert back is not None and back.created_at == old[3][2]["created_at"]
    finally:
        await rt.close()


# ---------------------------------------------------------------------------
# Faults during a sweep: kill -9 of the process, Chroma down
# ---------------------------------------------------------------------------


async def test_sigkill_during_a_sweep_loses_nothing(
    tmp_path: Path, embed_server: EmbeddingServer, chroma_server: ChromaServer
) -> None:
    project = BotProject(tmp_path / "bot")
    project.write_remote_env(chroma_server, "archive_kill")
    write_config(project, "[archive]\nbatch_size = 20\n")
    # Remote mode: the sweep's lease is a row of the shared database (its tables first).
    upgrade = project.command("orm", "upgrade")
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    items = expired_items(3000)
    rt = project.runtime()
    try:
        await add_raw(rt, items)
        proc = project.spawn_ambot("memory", "archive", "sweep")
        try:
            deadline = time.monotonic() + 120
            archived = 0
            # Polls another process's progress: no event to wait on.
            while archived < 200 and time.monotonic() < deadline and proc.poll() is None:
                await asyncio.sleep(0.05)
                archived = await rt.store.archive.count_all()
            assert 0 < archived < len(items), f"the sweep was not caught mid-way ({archived})"
            os.killpg(proc.pid, signal.SIGKILL)
            STATS.faults_injected += 1
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
        live, archived = await check_nothing_lost(rt, items)
        assert 0 < live < len(items)
        result = await A.sweep(rt.store, rt.config.file.lifetime_days, batch_size=500)
        assert result.archived == live  # the next sweep completes the move
        assert await check_nothing_lost(rt, items) == (0, len(items))
    finally:
        await rt.close()


async def test_chroma_down_during_a_sweep_loses_nothing(
    tmp_path: Path, embed_server: EmbeddingServer, chroma_server: ChromaServer
) -> None:
    rt = make_runtime(
        tmp_path,
        mode="remote",
        chroma=chroma_server,
        vector_db_database=f"archive_down_{uuid.uuid4().hex[:8]}",
    )
    items = expired_items(1500)
    try:
        await add_raw(rt, items)
        task = asyncio.create_task(A.sweep(rt.store, rt.config.file.lifetime_days, batch_size=10))
        try:
            async with asyncio.timeout(60):  # hang guard only
                while await rt.store.archive.count_all() < 30 and not task.done():  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            assert not task.done(), "the sweep ended before the fault"
            chroma_server.stop()
            STATS.faults_injected += 1
            with pytest.raises(A.VectorStoreError):
                async with asyncio.timeout(120):
                    await task
        finally:
            if not chroma_server.running:
                chroma_server.start()
        live, archived = await check_nothing_lost(rt, items)
        assert live > 0 and archived >= 30
        result = await A.sweep(rt.store, rt.config.file.lifetime_days, batch_size=500)
        assert result.archived == live
        assert await check_nothing_lost(rt, items) == (0, len(items))
    finally:
        await rt.close()


# ---------------------------------------------------------------------------
# Backups, restore and re-embedding cover the archive
# ---------------------------------------------------------------------------


async def test_backup_restore_and_reindex_cover_the_archive(
    tmp_path: Path, embed_server: EmbeddingServer
) -> None:
    from tests.botproject import dims, seed, snapshot

    rt = make_runtime(tmp_path)
    archive_name = rt.store.archive.name
    try:
        await seed(rt, rt.store.name, expired_items(6))
        fresh = await rt.store.add(new_memory(ALICE, "user", "用户最近在学日语"))
        await rt.store.update(ALICE, fresh.id, content="用户最近在学韩语")
        await A.reset_fingerprint(rt.maintenance)
        assert (await A.sweep(rt.store, rt.config.file.lifetime_days)).archived == 6
        before = await snapshot(rt, archive_name)
        assert len(before) == 7  # 6 swept + 1 previous version
        info = await A.create_backup(rt.maintenance)
        assert info.counts[archive_name] == 7
    finally:
        await rt.close()

    rt = make_runtime(tmp_path, embedding_model_name=BGE)  # another model: 768 dimensions
    try:
        report = await A.remap(rt.maintenance)
        assert report.counts[archive_name] == 7
        assert await snapshot(rt, archive_name) == before
        assert await dims(rt, archive_name) == {768}
        await rt.store.archive.remove(["old00000", "old00001"])
        await A.restore_backup(rt.maintenance, info.path)
        assert await snapshot(rt, archive_name) == before
        assert await dims(rt, archive_name) == {768}
        done = await A.restore(rt.store, "old00002", limit=10)  # searchable after the remap
        hits = await rt.store.query(view_of(ALICE), done.record.content, top_k=1)
        assert [h.id for h in hits] == ["old00002"]
    finally:
        await rt.close()


async def test_the_bot_schedules_the_sweep_and_a_run_archives(
    tmp_path: Path, embed_server: EmbeddingServer
) -> None:
    """The plugin loaded by the test session registered the job; one run of it archives."""
    from nonebot_plugin_apscheduler import scheduler

    from amrita_plugin_memory.adapters.archive_hooks import JOB_ID, ArchiveSweeper
    from tests.helpers import runtime

    job = scheduler.get_job(JOB_ID)
    assert job is not None
    minutes = runtime().config.file.archive.sweep_interval_minutes
    assert job.trigger.interval.total_seconds() == minutes * 60
    rt = make_runtime(tmp_path)  # its own store: the session's memories are left alone
    try:
        rt.store.clock = lambda: "2020-01-01T00:00:00+00:00"
        old = await rt.store.add(new_memory(ALICE, "user", "很久以前的一件小事", importance="low"))
        result = await ArchiveSweeper(rt, scheduler).run_once()
        assert result is not None and result.archived == 1
        assert await rt.store.get(view_of(ALICE), old.id) is None
        assert await rt.store.archive.ids([old.id]) == {old.id}
    finally:
        await rt.close()
