"""Two bot processes on one memory: what one writes or forgets, the other sees within 1 s.

Two ``ambot run`` (``tests/scale_out_bots.py``: each its own project, ``.env``,
port and Amrita tables) in remote mode on the session's ``chroma run`` and one
shared database for the plugin's tables (``SQLALCHEMY_BINDS``; the
``plugin_database`` parameters). Bot A is written to through chat turns over
a OneBot connection (the model calls ``write_memory``) and told to forget
through ``ambot memory forget`` in its project (which asks the running bot);
bot B is read through the WebUI's admin API (the memory list and the search,
which is the recall path) and through a chat turn calling ``read_memory``.

B always reads a user before A changes it, so that B has the partition cached:
the standard is that B sees A's change within :data:`COHERENT` seconds anyway.
Two more cases: one ``ambot orm upgrade`` makes the plugin's tables in the
database of its bind, and a bot killed (``kill -9``) half-way through an archive
sweep keeps the other from sweeping only until its lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.botproject import memory_meta, seed
from tests.conftest import CHAT
from tests.console_bot import run_async
from tests.lazy import lazy_import
from tests.scale_out_bots import (
    DEADLINE,
    ChatTurns,
    ScaleBot,
    SharedMemory,
    collection_count,
    partition_of,
    poll_until,
    running,
    stored_documents,
)
from tests.servers import ChromaServer
from tests.servers.postgres import PostgresServer

S = lazy_import(
    "amrita_plugin_memory.storage.archive.store", "amrita_plugin_memory.storage.memory_store"
)
COHERENT = 1.0
"""Seconds within which a write or forget in one process is seen by the other."""
PATIENCE = 75.0
"""How long a test goes on polling after a miss, to say when it was seen (the message)."""
LIMIT = 6
"""``per_session_memory_limit`` of both bots."""

WRITER = 10011  # case: B reads A's write
FILLER = 10012  # case: the limit under two writers
FORGOTTEN = 10013  # case: a forget through A
USERS = {WRITER, FILLER, FORGOTTEN}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def plugin_database(request: pytest.FixtureRequest, tmp_path_factory: Any) -> str:
    """The URL of the plugin's shared database: a SQLite file, or a fresh database in the
    session's throw-away PostgreSQL cluster (``tests/servers/postgres.py``)."""
    if request.param == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres")
        return server.url(server.create_database("scale"))
    path = tmp_path_factory.mktemp("scale-out-db") / "memory.sqlite3"
    return f"sqlite+aiosqlite:///{path}"


def _sqlite_tables(path: str | Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _check_shared_tables(url: str) -> None:
    """The plugin's tables are in the shared database (the bind took effect)."""
    if url.startswith("sqlite"):
        tables = _sqlite_tables(url.split(":///", 1)[1])
        assert "amrita_plugin_memory_user_memo" in tables, tables


@pytest.fixture(scope="module")
def bots(
    tmp_path_factory: Any, chroma_server: ChromaServer, plugin_database: str
) -> Iterator[tuple[ScaleBot, ScaleBot, SharedMemory]]:
    shared = SharedMemory.fresh(chroma_server, plugin_database)
    root = tmp_path_factory.mktemp("scale-out")
    a = ScaleBot(root / "a", shared, CHAT, memory_limit=LIMIT)
    b = ScaleBot(root / "b", shared, CHAT, memory_limit=LIMIT)
    with running(a, b):  # as the docs say: the schema upgraded once, before the bots start
        _check_shared_tables(plugin_database)
        yield a, b, shared


def test_one_orm_upgrade_makes_the_plugin_tables_in_the_shared_database(
    tmp_path: Path, chroma_server: ChromaServer
) -> None:
    """The schema is upgraded once, from one project (``ambot orm upgrade``); the plugin's
    tables go to the database of its bind, Amrita's stay in the project's own."""
    shared = SharedMemory.fresh(chroma_server, f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}")
    bot = ScaleBot(tmp_path / "a", shared, CHAT, memory_limit=LIMIT)
    done = bot.project.command("orm", "upgrade")
    assert done.returncode == 0, done.stdout + done.stderr
    plugin_tables = {
        "amrita_plugin_memory_user_memo",
        "amrita_plugin_memory_subconscious_state",
        "amrita_plugin_memory_group_message",
        "amrita_plugin_memory_active_optout",
        "amrita_plugin_memory_active_notice",
    }
    own = _sqlite_tables(bot.project.root / "data" / "nonebot_plugin_orm" / "db.sqlite3")
    assert "amrita_chat_context_record" in own  # Amrita's own tables
    assert not plugin_tables & own, sorted(plugin_tables & own)
    assert plugin_tables <= _sqlite_tables(tmp_path / "shared.db")


@pytest.fixture
def turns() -> Iterator[ChatTurns]:
    CHAT.clear()
    yield ChatTurns(CHAT)
    CHAT.clear()


async def _listed(client: httpx.AsyncClient, partition: str) -> list[str] | None:
    """The texts B's memory list shows for ``partition`` (``None``: no such partition)."""
    resp = await client.get("/api/memory/memories", params={"partition": partition, "limit": 100})
    if resp.status_code == 404:
        return None
    assert resp.status_code == 200, resp.text
    return [m["content"] for m in resp.json()["data"]["memories"]]


async def _found(client: httpx.AsyncClient, partition: str, query: str) -> list[str]:
    """The texts B's search (the recall path: vector and keyword channels) finds."""
    params = {"partition": partition, "q": query, "limit": 10}
    resp = await client.get("/api/memory/memories", params=params)
    if resp.status_code == 404:
        return []
    assert resp.status_code == 200, resp.text
    return [m["content"] for m in resp.json()["data"]["memories"]]


async def _seen_after(check: Callable[[], Awaitable[bool]], since: float) -> float | None:
    """Seconds from ``since`` until ``check()`` first holds (polled), ``None`` if not within
    :data:`PATIENCE`. A miss of :data:`COHERENT` keeps polling, to report when it was seen."""
    while True:
        if await check():
            return time.monotonic() - since
        if time.monotonic() - since > PATIENCE:
            return None
        await asyncio.sleep(0.05)


def _verdict(what: str, elapsed: float | None) -> str:
    when = f"after {elapsed:.2f} s" if elapsed is not None else f"not within {PATIENCE:.0f} s"
    return f"{what}: seen {when} (standard: {COHERENT} s)"


async def test_b_sees_a_write_to_a_user_it_has_cached(
    bots: tuple[ScaleBot, ScaleBot, SharedMemory], turns: ChatTurns
) -> None:
    a, b, _ = bots
    partition = partition_of(WRITER)
    first = "写入者的第一件事：她的猫叫年糕。"
    second = "写入者的第二件事：她在杭州学小提琴。"
    async with a.onebot(USERS) as chat_a, b.webui() as webui_b:
        await chat_a.say(WRITER, f"记住：{first}")
        assert turns.write_result(first)["ok"] is True
        # B reads the user: the list and a search load (and cache) the partition.
        assert await _listed(webui_b, partition) == [first]
        assert await _found(webui_b, partition, first) == [first]

        await chat_a.say(WRITER, f"记住：{second}")
        written = time.monotonic()  # the write landed before the model got its result
        assert turns.write_result(second)["ok"] is True

        async def listed() -> bool:
            return second in (await _listed(webui_b, partition) or [])

        async def found() -> bool:
            return second in await _found(webui_b, partition, second)

        in_list, in_search = await asyncio.gather(
            _seen_after(listed, written), _seen_after(found, written)
        )
    report = [_verdict("B's memory list", in_list), _verdict("B's search", in_search)]
    assert in_list is not None and in_list <= COHERENT, report
    assert in_search is not None and in_search <= COHERENT, report


async def test_the_partition_limit_holds_when_both_write_at_once(
    bots: tuple[ScaleBot, ScaleBot, SharedMemory], turns: ChatTurns
) -> None:
    a, b, shared = bots
    partition = partition_of(FILLER)
    async with a.onebot(USERS) as chat_a, b.onebot(USERS) as chat_b:
        # Each bot has written (and so counted) the partition before the race.
        await chat_a.say(FILLER, "记住：甲的起始记忆：喜欢吃橘子。")
        await chat_b.say(FILLER, "记住：乙的起始记忆：周末去爬山。")
        facts = {
            "甲": [f"甲写的第{i}条：收藏了第{i}张黑胶唱片。" for i in range(1, 5)],
            "乙": [f"乙写的第{i}条：养了第{i}盆多肉植物。" for i in range(1, 5)],
        }

        async def write_all(chat: Any, texts: list[str]) -> None:
            for text in texts:  # one user's messages follow each other in a chat
                await chat.say(FILLER, f"记住：{text}")

        await asyncio.gather(write_all(chat_a, facts["甲"]), write_all(chat_b, facts["乙"]))

    writes = [r for r in turns.tool_results() if "memory" in r or r.get("ok") is False]
    accepted = [r["memory"]["content"] for r in writes if r.get("ok") is True]
    refused = [r for r in writes if r.get("ok") is False]
    stored = stored_documents(shared, partition)
    assert len(writes) == 10, writes  # every turn reached the tool
    assert sorted(stored) == sorted(accepted), (stored, accepted)  # nothing lost or made up
    assert len(stored) == LIMIT, f"{len(stored)} memories stored under a limit of {LIMIT}"
    assert len(refused) == 10 - LIMIT and all("上限" in str(r) for r in refused), refused


async def test_a_forget_through_a_is_gone_from_b(
    bots: tuple[ScaleBot, ScaleBot, SharedMemory], turns: ChatTurns
) -> None:
    a, b, shared = bots
    partition = partition_of(FORGOTTEN)
    fact = "被遗忘者的秘密：他的银行卡密码写在日记本里。"
    async with a.onebot(USERS) as chat_a, b.onebot(USERS) as chat_b, b.webui() as webui_b:
        await chat_a.say(FORGOTTEN, f"记住：{fact}")
        assert turns.write_result(fact)["ok"] is True
        assert await _listed(webui_b, partition) == [fact]  # B has it cached
        assert await _found(webui_b, partition, fact) == [fact]

        forget = await asyncio.to_thread(
            a.project.ambot, "forget", "--user", str(FORGOTTEN), "--yes", timeout=DEADLINE
        )
        assert forget.returncode == 0, forget.stdout + forget.stderr
        forgotten = time.monotonic()
        assert f"已遗忘用户 {FORGOTTEN}" in forget.stdout and "由运行中的 Bot" in forget.stdout
        assert stored_documents(shared, partition) == []  # gone from the shared store

        # Recall in a chat turn with B right away: read_memory finds nothing of the user.
        CHAT.clear()
        recall = ChatTurns(CHAT)
        await chat_b.say(FORGOTTEN, f"回忆：{fact}")
        await poll_until(lambda: bool(recall.tool_results()), DEADLINE, "read_memory's result")
        recalled = recall.tool_results()[0]
        recalled_after = time.monotonic() - forgotten

        async def not_listed() -> bool:
            return fact not in (await _listed(webui_b, partition) or [])

        async def not_found() -> bool:
            return fact not in await _found(webui_b, partition, fact)

        off_list, off_search = await asyncio.gather(
            _seen_after(not_listed, forgotten), _seen_after(not_found, forgotten)
        )
    report = [
        _verdict("gone from B's list", off_list),
        _verdict("gone from B's search", off_search),
    ]
    recall_note = f"B's read_memory {recalled_after:.2f} s after the forget returned {recalled}"
    assert fact not in str(recalled), [recall_note, *report]
    assert off_list is not None and off_list <= COHERENT, report
    assert off_search is not None and off_search <= COHERENT, report


# ---------------------------------------------------------------------------
# The archive sweep: one sweeper at a time, a killed one does not block the others
# ---------------------------------------------------------------------------

SWEPT = 10014
EXPIRED = 3000
"""Expired memories seeded: a sweep of them lasts long enough to be killed half-way."""
SWEEP_LEASE = 60.0
"""How long a sweeper's lease lasts unrenewed (``storage.archive.sweep.SWEEP_LEASE_TTL``)."""


@pytest.fixture
def sweepers(
    tmp_path: Path, chroma_server: ChromaServer
) -> Iterator[tuple[ScaleBot, ScaleBot, SharedMemory]]:
    """Two bots (their own shared memory) whose store holds :data:`EXPIRED` expired memories."""
    from amrita_plugin_memory.embedding import reset_fingerprint
    from amrita_plugin_memory.upkeep.rekey import migrate_partition_keys

    shared = SharedMemory.fresh(chroma_server, f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}")
    a = ScaleBot(tmp_path / "a", shared, CHAT, memory_limit=100_000)
    b = ScaleBot(tmp_path / "b", shared, CHAT, memory_limit=100_000)
    items = [
        (f"old{i:05d}", f"过期记忆 {i}：去过第 {i} 个城市", memory_meta(partition_of(SWEPT)))
        for i in range(EXPIRED)
    ]

    async def fill() -> None:
        rt = a.project.runtime()
        try:
            await seed(rt, rt.store.name, items)
            await reset_fingerprint(rt.maintenance)
            await migrate_partition_keys(rt.store)
        finally:
            await rt.close()

    upgrade = a.project.command("orm", "upgrade")
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    run_async(fill())
    started: list[ScaleBot] = []
    try:
        for bot in (a, b):
            bot.start()
            started.append(bot)
        yield a, b, shared
    finally:
        for bot in started:
            bot.stop()


@pytest.mark.timeout(600)  # 3,000 memories seeded, two bots started, a lease to outlive
async def test_a_killed_sweepers_lease_expires_and_another_process_sweeps(
    sweepers: tuple[ScaleBot, ScaleBot, SharedMemory],
) -> None:
    a, b, shared = sweepers
    archive = S.archive_name(S.MEMORY_COLLECTION)
    async with a.webui() as webui_a, b.webui() as webui_b:
        sweeping = asyncio.create_task(webui_a.post("/api/memory/archive/sweep"))
        await poll_until(
            lambda: collection_count(shared, archive) > 0 or sweeping.done(),
            DEADLINE,
            "A's sweep to archive its first memories",
        )
        assert not sweeping.done(), f"A's sweep ended before it was killed: {sweeping.result()}"
        a.kill()  # half-way: its lease (if any) is held and no longer renewed
        killed = time.monotonic()
        with contextlib.suppress(httpx.HTTPError):
            await sweeping
        moved = collection_count(shared, archive)
        assert 0 < moved < EXPIRED, moved

        first = await webui_b.post("/api/memory/archive/sweep")  # right after the kill
        assert first.status_code != 200, (
            f"B's sweep started right after A was killed mid-sweep ran (answered "
            f"{time.monotonic() - killed:.2f} s after the kill) while A's lease should "
            f"still hold: {first.text}"
        )
        assert "另一个进程正在执行归档清理" in first.text, first.text

        done: dict[str, Any] | None = None
        took = 0.0  # from the kill until the start of B's sweep that ran
        while done is None and time.monotonic() - killed < SWEEP_LEASE + 30:
            took = time.monotonic() - killed
            resp = await webui_b.post("/api/memory/archive/sweep")
            if resp.status_code == 200:
                done = resp.json()["data"]
            else:  # polling the lease's expiry through B
                assert "另一个进程正在执行归档清理" in resp.text, resp.text
                await asyncio.sleep(0.5)
    assert done is not None, f"B could not sweep {took:.0f} s after A was killed"
    assert took <= SWEEP_LEASE + 10, f"B's sweep started only {took:.0f} s after A was killed"
    assert done["archived"] > 0, done
    # Nothing lost, nothing twice: every expired memory is in the archive exactly once.
    assert stored_documents(shared, partition_of(SWEPT)) == []
    archived = stored_documents(shared, partition_of(SWEPT), archive)
    assert len(archived) == len(set(archived)) == EXPIRED
