"""`ambot memory status` shows the marker a killed remote remap leaves behind.

On a remote ChromaDB the "running" marker of ``reindex`` lives in the
collections' metadata, so it outlives a ``kill -9`` of the process that set
it, and every writer keeps refusing ("记忆库维护中") until recovery removes it.
The operator must see it in ``status`` (terminal and ``--json``), with what it
means and what to do; after ``reindex`` it is gone and nothing was lost.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import (
    BotProject,
    make_runtime,
    sample_memories,
    seed,
    snapshot,
)
from tests.helpers import new_memory
from tests.lazy import lazy_import
from tests.reliability_stats import STATS
from tests.servers import ChromaServer, EmbeddingServer

E = lazy_import("amrita_plugin_memory.embedding", "amrita_plugin_memory.core.errors")
MEM = "amrita_user_memory"


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc.stdout


async def _kill_reindex_mid_way(project: BotProject, embed_server: EmbeddingServer) -> int:
    """``ambot memory reindex --yes``, SIGKILLed while it embeds; its pid."""
    embed_server.reset()
    embed_server.set_mode("hang", after=3)  # the remap stalls after 3 batches
    proc = project.spawn_ambot("memory", "reindex", "--yes")
    try:
        async with asyncio.timeout(120):  # hang guard only
            # Polls another process's progress: no event to wait on.
            while embed_server.embed_calls < 3 and proc.poll() is None:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        assert embed_server.embed_calls >= 3, "the reindex never got going"
        os.killpg(proc.pid, signal.SIGKILL)
        STATS.faults_injected += 1
        await asyncio.to_thread(proc.wait, 10)
    finally:
        if proc.poll() is None:
            proc.kill()
        embed_server.set_mode("ok")
    return proc.pid


async def test_status_shows_the_marker_of_a_killed_remote_reindex(
    tmp_path: Path, embed_server: EmbeddingServer, chroma_server: ChromaServer
) -> None:
    project = BotProject(tmp_path / "bot")
    project.write_remote_env(chroma_server, "marker", REEMBED_BATCH_SIZE=8)
    rt = project.runtime()
    try:
        await seed(rt, MEM, sample_memories(60))
        await E.reset_fingerprint(rt.maintenance)
        before = await snapshot(rt, MEM)
    finally:
        await rt.close()
    pid = await _kill_reindex_mid_way(project, embed_server)

    # The marker outlived the process: status says so, in both forms.
    text = _ok(project.ambot("status"))
    assert f"维护标记：重映射（reindex）未结束（PID {pid}" in text, text
    assert "带标记的集合：" in text and MEM in text
    assert "写入记忆与知识库都会被拒绝" in text
    assert "该进程已不存在：维护被中断" in text
    assert "原集合完好、没有记忆丢失：运行 `ambot memory reindex` 重新执行" in text
    report: dict[str, Any] = json.loads(_ok(project.ambot("status", "--json")))
    marker = report["remap_marker"]
    assert marker is not None, report
    assert (marker["kind"], marker["pid"], marker["process"], marker["committed"]) == (
        "reindex",
        pid,
        "gone",
        False,
    )
    assert MEM in marker["collections"]
    assert marker["summary"] in text and all(line in text for line in marker["advice"])

    # Writers really are refused meanwhile (what the text says).
    rt = project.runtime()
    try:
        with pytest.raises(E.MaintenanceInProgress):
            await rt.store.add(new_memory("QQPlatform_Private_10009", "user", "标记期间的一次写入"))
    finally:
        await rt.close()

    # What the advice says: reindex again. Then the marker is gone, nothing lost.
    _ok(project.ambot("reindex", "--yes"))
    assert json.loads(_ok(project.ambot("status", "--json")))["remap_marker"] is None
    rt = project.runtime()
    try:
        after = await snapshot(rt, MEM)
        STATS.items_lost += len(set(before) - set(after))
        assert after == before
    finally:
        await rt.close()


async def test_marker_of_a_running_remap_and_of_another_host(
    tmp_path: Path, embed_server: EmbeddingServer
) -> None:
    """Set through the remap's own ``mark_running``; the advice follows the process's state."""
    from amrita_plugin_memory.embedding.recovery import mark_running
    from amrita_plugin_memory.embedding.report_json import status_json

    rt = make_runtime(tmp_path)
    try:
        await seed(rt, rt.store.name, sample_memories(3))
        assert (await E.collect_status(rt.maintenance)).remap_marker is None
        await mark_running(rt.maintenance, "restore")  # as a restore in this process does
        report = status_json(await E.collect_status(rt.maintenance), rt.config.backup_dir)
        marker = report["remap_marker"]
        assert (marker["kind"], marker["pid"], marker["process"]) == (
            "restore",
            os.getpid(),
            "running",
        )
        assert marker["summary"].startswith("维护标记：从备份恢复（backup restore）未结束")
        assert any("仍在运行" in line and "请等待" in line for line in marker["advice"])

        # A marker written by a process on another machine (JSON note as mark_running writes it).
        note = json.dumps({"kind": "reindex", "pid": 4242, "host": "elsewhere", "since": "x"})
        await rt.store.set_meta({"reembed_running": note})
        marker = (await E.collect_status(rt.maintenance)).remap_marker
        assert marker is not None and marker.process == "unknown"
        assert (
            "无法确认进行维护的进程是否仍在运行（它在另一台主机 elsewhere 上）。" in marker.advice
        )
        assert any(line.startswith("确认它已不在运行后，原集合完好") for line in marker.advice)

        assert await E.recover_interrupted_remap(rt.maintenance) == "dropped"
        assert (await E.collect_status(rt.maintenance)).remap_marker is None

        # Killed after the commit point and the swap, before the fingerprint: the
        # swapped-in collection still carries the target fingerprint as a marker.
        target = await E.current_fingerprint(rt.embedder)
        await rt.store.set_meta({"reembed_target": target.to_json()})
        marker = (await E.collect_status(rt.maintenance)).remap_marker
        assert marker is not None and marker.committed and marker.pid is None
        assert "无法确认进行维护的进程是否仍在运行。" in marker.advice
        assert any("新集合已完整（重映射已提交）" in line for line in marker.advice)
        assert await E.recover_interrupted_remap(rt.maintenance) == "finished"
        assert (await E.collect_status(rt.maintenance)).remap_marker is None
    finally:
        await rt.close()
