"""Local mode served by a child ``chroma run`` (``VECTOR_DB_LOCAL_SERVER``, the default on Linux).

The embedded ChromaDB holds the GIL during writes, so the bot serves its data
directory from a child process instead. These tests run the real thing: a
runtime whose local store is served, the child killed under it (a clear error,
then a new child, nothing lost), the data directory shared with the in-process
mode (same files), and a bot process killed with SIGKILL taking its child along.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest

from tests.botproject import ALICE, BotProject, make_runtime, memory_meta, seed
from tests.conftest import EMBED
from tests.console_bot import RunningBot
from tests.lazy import lazy_import
from tests.reliability_stats import STATS

E = lazy_import("amrita_plugin_memory.core.errors")
F = lazy_import("amrita_plugin_memory.embedding")
MEM = "amrita_user_memory"


def _state(pid: int) -> str | None:
    """The process state letter of ``pid`` (``None``: gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _gone(pid: int) -> bool:
    return _state(pid) in (None, "Z", "X")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out.extend(int(child) for child in text)
    return out


def _chroma_children(pid: int) -> list[int]:
    """Every ``chroma run`` started by the plugin below ``pid`` (children of children too)."""
    found: list[int] = []
    for child in _children(pid):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
            if b"chromadb.cli.cli" in cmdline and b" run " in cmdline:
                found.append(child)
            found.extend(_chroma_children(child))
    return found


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


async def _wait_gone(pid: int) -> None:
    for _ in range(600):  # a hang guard (30 s), not a measurement
        if _gone(pid):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"process {pid} is still running ({_state(pid)})")


async def test_the_local_store_is_served_by_a_child_and_shares_its_files(tmp_path: Path) -> None:
    served = make_runtime(tmp_path, vector_db_local_server=True)
    try:
        record = await served.store.add(ALICE, "user", "用户养的猫叫年糕")
        server = served.connection.server
        assert served.connection.served and not served.connection.in_process
        assert server is not None and server.alive() and server.pid != os.getpid()
        assert server.pid in _chroma_children(os.getpid())
        hits = await served.store.query(ALICE, "猫叫什么", top_k=1)
        assert [h.id for h in hits] == [record.id]
        pid = server.pid
    finally:
        await served.close()
    await _wait_gone(pid)  # closing stops the child before the lock is released

    # The same directory opened in-process (as a maintenance command does) sees it all.
    inproc = make_runtime(tmp_path, vector_db_local_server=False)
    try:
        assert inproc.connection.in_process
        got = await inproc.store.get(ALICE, record.id)
        assert got is not None and got.content == "用户养的猫叫年糕"
    finally:
        await inproc.close()


async def test_a_killed_child_is_a_clear_error_then_a_new_one_serves(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path, vector_db_local_server=True)
    try:
        items = [(f"m{i}", f"记忆 {i}：用户喜欢第 {i} 号苹果", memory_meta(ALICE)) for i in range(20)]
        await seed(rt, MEM, items)
        server = rt.connection.server
        assert server is not None and server.pid is not None
        old_pid = server.pid
        os.kill(old_pid, signal.SIGKILL)
        STATS.faults_injected += 1
        await _wait_gone(old_pid)
        with pytest.raises(E.VectorStoreError, match="子进程已退出"):
            await rt.store.count()
        # The next call starts a new child on the same directory: nothing lost.
        assert await rt.store.count() == len(items)
        assert rt.connection.server is not None and rt.connection.server.pid != old_pid
        written = await rt.store.add(ALICE, "user", "用户的生日是3月5日")
        assert (await rt.store.get(ALICE, written.id)) is not None
    finally:
        await rt.close()


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_a_bad_value_names_the_key(value: str) -> None:
    from amrita_plugin_memory.core.config import ConfigError, EnvConfig

    with pytest.raises(ConfigError, match="VECTOR_DB_LOCAL_SERVER"):
        EnvConfig.load({"vector_db_local_server": value})
    STATS.inputs_tried += 1


async def test_a_bot_killed_with_sigkill_takes_its_chroma_child_along(tmp_path: Path) -> None:
    project = BotProject(tmp_path / "bot")
    rt = project.runtime()
    items = [(f"k{i}", f"记忆 {i}：用户喜欢第 {i} 号梨", memory_meta(ALICE)) for i in range(10)]
    try:
        await seed(rt, MEM, items)
        await F.reset_fingerprint(rt.maintenance)  # the bot starts without a mismatch
    finally:
        await rt.close()
    EMBED.reset()
    bot = RunningBot(project, l3=False)  # the project's .env leaves VECTOR_DB_LOCAL_SERVER unset
    bot.start()
    try:
        assert bot.proc is not None
        # The store opens lazily: a status through the running bot opens it (in the bot).
        asked = project.ambot("status")
        assert asked.returncode == 0, asked.stdout + asked.stderr
        [child] = _chroma_children(bot.proc.pid)
        assert f"本地向量库由子进程提供（chroma run，PID {child}" in bot.log()
        owner = _parent(child)  # the bot's Python process (``ambot run`` may wrap it)
        os.kill(owner, signal.SIGKILL)  # the bot alone, not its process group
        STATS.faults_injected += 1
        await _wait_gone(child)
    finally:
        bot.stop()
    # The data directory is free again and nothing was lost.
    result = project.ambot("status")
    assert result.returncode == 0, result.stdout + result.stderr
    rt = project.runtime()
    try:
        assert await rt.store.count() == len(items)
    finally:
        await rt.close()
