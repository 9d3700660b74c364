"""Local mode served by a child ``chroma run`` (``VECTOR_DB_LOCAL_SERVER``, the default on Linux).

The embedded ChromaDB holds the GIL during writes, so the bot serves its data
directory from a child process instead. These tests run the real thing: a
runtime whose local store is served, the child killed under it (a clear error,
then a new child, nothing lost), the data directory shared with the in-process
mode (same files), a bot process killed with SIGKILL taking its child along, a
port taken by another process's ChromaDB (refused, never used), the lock of
the connection free while a child starts, the shutdown (in a worker thread,
closed for good) and a Ctrl+C in the bot's terminal (no warning).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import ALICE, BotProject, make_runtime, memory_meta, seed
from tests.conftest import EMBED
from tests.console_bot import RunningBot
from tests.helpers import new_memory, view_of
from tests.lazy import lazy_import
from tests.reliability_stats import STATS
from tests.servers import ChromaServer

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
        record = await served.store.add(new_memory(ALICE, "user", "用户养的猫叫年糕"))
        server = served.connection.server
        assert served.connection.served and not served.connection.in_process
        assert server is not None and server.alive() and server.pid != os.getpid()
        assert server.pid in _chroma_children(os.getpid())
        hits = await served.store.query(view_of(ALICE), "猫叫什么", top_k=1)
        assert [h.id for h in hits] == [record.id]
        pid = server.pid
    finally:
        await served.close()
    await _wait_gone(pid)  # closing stops the child before the lock is released

    # The same directory opened in-process (as a maintenance command does) sees it all.
    inproc = make_runtime(tmp_path, vector_db_local_server=False)
    try:
        assert inproc.connection.in_process
        got = await inproc.store.get(view_of(ALICE), record.id)
        assert got is not None and got.content == "用户养的猫叫年糕"
    finally:
        await inproc.close()


async def test_a_killed_child_is_a_clear_error_then_a_new_one_serves(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path, vector_db_local_server=True)
    try:
        items = [
            (f"m{i}", f"记忆 {i}：用户喜欢第 {i} 号苹果", memory_meta(ALICE)) for i in range(20)
        ]
        await seed(rt, MEM, items)
        server = rt.connection.server
        assert server is not None and server.pid is not None
        old_pid = server.pid
        os.kill(old_pid, signal.SIGKILL)
        STATS.faults_injected += 1
        await _wait_gone(old_pid)
        with pytest.raises(E.VectorStoreError, match="子进程已退出"):
            await rt.store.count_all()
        # The next call starts a new child on the same directory: nothing lost.
        assert await rt.store.count_all() == len(items)
        assert rt.connection.server is not None and rt.connection.server.pid != old_pid
        written = await rt.store.add(new_memory(ALICE, "user", "用户的生日是3月5日"))
        assert (await rt.store.get(view_of(ALICE), written.id)) is not None
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
        assert await rt.store.count_all() == len(items)
    finally:
        await rt.close()


# ---------------------------------------------------------------------------
# Whose server, the lock while starting, shutdown (issue 24, findings 5-7)
# ---------------------------------------------------------------------------


async def test_a_port_taken_by_another_process_is_refused_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process listens on the port the plugin chose (it took it between the choice
    and the child's bind): a clear error, and not one request reaches that database."""
    from amrita_plugin_memory.storage.chroma import local_server as chroma_server

    other = ChromaServer(tmp_path / "other")
    other.start()
    try:
        with other.client() as client:
            col = client.get_or_create_collection(MEM, embedding_function=None)
            col.add(ids=["x"], documents=["别人的数据"], embeddings=[[0.1] * 8])
        # The race, made certain: the port the plugin picks is the other server's.
        monkeypatch.setattr(chroma_server, "_free_port", lambda: other.port)
        rt = make_runtime(tmp_path / "bot", vector_db_local_server=True)
        try:
            with pytest.raises(E.VectorStoreError, match="由另一个进程监听") as refused:
                await rt.store.count_all()
            STATS.faults_injected += 1
            assert f"127.0.0.1:{other.port}" in str(refused.value)
            assert "Traceback" not in str(refused.value)
            monkeypatch.undo()  # the next operation starts its own child on a free port
            assert await rt.store.count_all() == 0
            server = rt.connection.server
            assert server is not None and server.port != other.port
        finally:
            await rt.close()
        with other.client() as client:  # the other database was never touched
            got = client.get_collection(MEM, embedding_function=None).get()
            assert got["ids"] == ["x"] and got["documents"] == ["别人的数据"]
    finally:
        other.stop()


def test_the_parent_death_signal_is_set_in_the_child_not_in_a_preexec_fn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Python code runs between fork and exec of the (multi-threaded) bot; the child's
    own interpreter asks for the signal and refuses to serve if the bot is already gone."""
    from amrita_plugin_memory.storage.chroma import local_server as chroma_server

    spawned: list[dict[str, Any]] = []
    real_popen = subprocess.Popen

    def recording_popen(*args: Any, **kwargs: Any) -> Any:
        spawned.append(kwargs)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    server = chroma_server.LocalChromaServer(tmp_path / "db")
    try:
        server.start()
        [kwargs] = spawned
        assert kwargs.get("preexec_fn") is None and kwargs.get("start_new_session") is True
        assert server.pid is not None and chroma_server.listens_on(server.pid, server.port)
    finally:
        server.stop()
        monkeypatch.undo()
    # Started for a bot that is not its parent (the bot died before prctl): it refuses.
    child = subprocess.run(
        [sys.executable, "-c", chroma_server.CHILD_MAIN, "1", "run", "--path", str(tmp_path)],
        capture_output=True,
        timeout=60,
    )
    assert child.returncode == 1 and b"exited before" in child.stderr


async def test_starting_a_child_does_not_hold_the_connection_lock(tmp_path: Path) -> None:
    """While one thread starts the child (seconds), Chroma calls of other threads enter and
    leave without waiting for it (they used to queue on the lock, starving the workers)."""
    rt = make_runtime(tmp_path, vector_db_local_server=True)
    conn = rt.connection
    try:
        began = time.monotonic()
        opening = asyncio.create_task(conn.client())
        for _ in range(12_000):  # a hang guard (60 s), not a measurement
            if conn.server is not None and conn.server.pid is not None:
                break  # the child process exists: its start is under way
            await asyncio.sleep(0.005)
        t0 = time.monotonic()
        answers = await asyncio.gather(*(conn.run(lambda i=i: i) for i in range(8)))
        waited = time.monotonic() - t0
        await opening
        starting = time.monotonic() - began
        assert answers == list(range(8))
        assert waited < starting / 4, (waited, starting)
    finally:
        await rt.close()


async def test_shutdown_closes_in_a_worker_thread_and_stays_closed(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path, vector_db_local_server=True)
    record = await rt.store.add(new_memory(ALICE, "user", "用户喜欢爬山"))
    server = rt.connection.server
    assert server is not None and server.pid is not None
    pid = server.pid
    # A call still running at shutdown: closing waits for it (it completes), and stops the child.
    started, release = threading.Event(), threading.Event()

    def call() -> bool:
        started.set()
        return release.wait(60)

    running = asyncio.create_task(rt.connection.run(call))
    try:
        assert await asyncio.to_thread(started.wait, 30)
        closing = asyncio.create_task(rt.close())
        # The event loop keeps running while the close waits for that call: were the
        # close on the loop, no turn would come until its wait gave up (10 s).
        for _ in range(20):
            await asyncio.sleep(0.01)
            assert not closing.done()
    finally:
        release.set()
    await closing
    assert await running is True  # it completed
    await _wait_gone(pid)
    # Closed for good: a late call is an error, never a new child.
    with pytest.raises(E.VectorStoreError, match="已关闭"):
        await rt.store.get(view_of(ALICE), record.id)
    assert not [c for c in _chroma_children(os.getpid()) if str(tmp_path) in _cmdline(c)]


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


SLOW_SHUTDOWN_PLUGIN = """\
import time

from nonebot import get_driver

driver = get_driver()


@driver.on_startup
async def register_late() -> None:
    # Registered after every plugin's own hooks, so it runs first at shutdown: the
    # shutdown work of other plugins that comes before the memory plugin's.
    driver.on_shutdown(lambda: time.sleep(2))
"""


async def test_ctrl_c_in_the_terminal_stops_the_bot_without_a_warning(tmp_path: Path) -> None:
    """Ctrl+C signals the terminal's whole process group. The child is not in it: the bot stops
    it after its other shutdown work (here 2 s of another plugin's), and no
    "意外退出（退出码 0）" warning is logged."""
    project = BotProject(tmp_path / "bot")
    (project.root / "plugins").mkdir()  # Amrita loads the project's local plugins from here
    (project.root / "plugins" / "slow_shutdown.py").write_text(SLOW_SHUTDOWN_PLUGIN)
    rt = project.runtime()
    try:
        await seed(rt, MEM, [("c1", "记忆：用户喜欢橘子", memory_meta(ALICE))])
        await F.reset_fingerprint(rt.maintenance)
    finally:
        await rt.close()
    EMBED.reset()
    bot = RunningBot(project, l3=False)
    bot.start()
    try:
        assert bot.proc is not None
        asked = project.ambot("status")  # opens the store in the bot: its child starts
        assert asked.returncode == 0, asked.stdout + asked.stderr
        [child] = _chroma_children(bot.proc.pid)
        os.killpg(bot.proc.pid, signal.SIGINT)  # what the terminal does on Ctrl+C
        STATS.faults_injected += 1
        assert bot.proc.wait(60) is not None
        await _wait_gone(child)
    finally:
        bot.stop()
    log = bot.log()
    assert "意外退出" not in log, log[-3000:]
    # Closed by the shutdown hook (NoneBot runs the plugin's hooks in reverse order of
    # registration, so the store's, registered first, runs after the others).
    closed = log.index("[Memory] 向量库连接已关闭")
    assert log.index("Waiting for application shutdown") < closed
    assert closed < log.index("Application shutdown complete")
