"""Issue 12 item 1, as reported: a restored memory must be found by ``read_memory``.

The bot and the maintenance commands are separate processes on one embedded
Chroma directory, one after the other: the "bot" here is this test process
(its runtime is stopped and started like a bot's), every ``ambot memory …``
is a real subprocess. Before ``ChromaConnection.close()`` closed the chromadb
client, a process that opened the store again reused chromadb's cached
System, whose vector index had never seen what another process wrote
(``tests/test_remap_live.py`` pins that down); here the whole user-visible
flow is checked end to end, including the restore's own search check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.botproject import BotProject
from tests.lazy import lazy_import
from tests.servers import EmbeddingServer

T = lazy_import(
    "amrita_plugin_memory.storage.keys",
    "amrita_plugin_memory.tools.memory_tools",
    "amrita_plugin_memory.storage.scope",
)

TOPIC = "用户最喜欢的甜点是草莓蛋糕"


@pytest.fixture
def project(tmp_path: Path, embed_server: EmbeddingServer) -> BotProject:
    return BotProject(tmp_path / "bot")


def _ok(proc: Any) -> str:
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc.stdout


async def _bot(project: BotProject, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """Start the bot's runtime, call one memory tool in a private chat, stop it."""
    rt = project.runtime()
    try:
        caller = T.ScopeRules().of_chat(T.target_from_ids(10001))
        # A read first, as a chatting bot does: this process indexes the collection.
        await rt.tools.list_memory(caller, {})
        return await getattr(rt.tools, tool)(caller, args)
    finally:
        await rt.close()


async def test_restored_memory_is_found_by_read_memory(project: BotProject) -> None:
    written = await _bot(project, "write_memory", {"content": TOPIC, "tags": ["偏好"]})
    assert written["ok"], written
    memory_id = written["memory"]["id"]
    found = await _bot(project, "read_memory", {"query": TOPIC})
    assert [m["id"] for m in found["memories"]] == [memory_id]

    out = _ok(project.ambot("backup", "create"))
    assert "已创建备份" in out
    backup = sorted(project.backup_dir.glob("embed_backup_*.json"))[-1]

    deleted = await _bot(project, "delete_memory", {"id": memory_id})
    assert deleted == {"ok": True, "deleted": memory_id}
    assert (await _bot(project, "read_memory", {"query": TOPIC}))["memories"] == []

    out = _ok(project.ambot("backup", "restore", str(backup), "--yes"))
    assert "恢复完成" in out

    listed = await _bot(project, "list_memory", {})
    assert listed["total"] == 1 and [m["id"] for m in listed["memories"]] == [memory_id]
    found = await _bot(project, "read_memory", {"query": TOPIC})
    assert [m["id"] for m in found["memories"]] == [memory_id], found
    assert found["memories"][0]["content"] == TOPIC
