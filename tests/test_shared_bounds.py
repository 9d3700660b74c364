"""Every statement on the shared tables is bounded; a feed row committed late, or never, is
still applied (#39 items 6 and 7), on real PostgreSQL.

The plugin's tables live in a fresh database of the session's PostgreSQL cluster
(``tests/orm_engines.bound_to``: what ``SQLALCHEMY_BINDS`` does). Another
process's transaction is played by a connection of this test that begins a
statement and does not commit (a peer frozen between its ``UPDATE`` and its
``COMMIT``, a ``LOCK TABLE`` as ``VACUUM FULL`` or a migration takes, a feed row
whose commit comes late). The killed writer is a real second OS process
(``tests/coherence_peer.py``) on the same database and Chroma store.

Each test has a hang guard well above its bound: the code before these fixes
waited there without end (or, for the late row, served the cached partition).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import captured_logs, env_for
from tests.helpers import new_memory, view_of
from tests.test_coherence import Lag, P, Peer, _close, _contents, _stack, peer_database

__all__ = ["peer_database"]  # the fixture, imported for pytest

FEED_TABLE = "amrita_plugin_memory_partition_change"


@pytest.fixture
async def pg(postgres: Any) -> AsyncIterator[SimpleNamespace]:
    """The plugin's tables in a fresh PostgreSQL database, for this process."""
    from tests.orm_engines import bound_to

    url = postgres.url(postgres.create_database("bounds"))
    async with bound_to(url) as engine:
        yield SimpleNamespace(url=url, engine=engine)


@pytest.fixture
async def pg_pair(
    pg: SimpleNamespace, chroma_server: Any, embed_server: Any, tmp_path: Path
) -> AsyncIterator[list[Any]]:
    """Two processes' stores (``A``, ``B``) on one collection, their feed on PostgreSQL."""
    env = env_for("remote", chroma_server)
    name = f"test-{uuid.uuid4().hex[:12]}"
    stores = [_stack(env, name, tmp_path / f"c{k}") for k in range(2)]
    yield stores
    await _close(stores)


async def test_every_session_of_the_plugin_has_the_limits(pg: SimpleNamespace) -> None:
    from sqlalchemy import text

    from amrita_plugin_memory.storage.models import UserMemo
    from amrita_plugin_memory.storage.shared.sessions import orm_session

    on = {"mapper": UserMemo}  # the plugin's database (Amrita's stays SQLite)
    async with orm_session() as session:
        shown = [
            (await session.execute(text(f"SHOW {name}"), bind_arguments=on)).scalar()
            for name in ("lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout")
        ]
        await session.commit()
        again = (await session.execute(text("SHOW lock_timeout"), bind_arguments=on)).scalar()
    assert shown == ["2s", "5s", "20s"] and again == "2s"


def test_no_module_opens_a_session_without_the_limits() -> None:
    """Every session of the plugin comes from ``orm_session`` (which sets the limits)."""
    root = Path(__file__).resolve().parent.parent / "amrita_plugin_memory"
    pattern = re.compile(r"from nonebot_plugin_orm import[^\n]*\bget_session\b|orm\.get_session\b")
    offenders = [
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        if pattern.search(path.read_text(encoding="utf-8"))
        and path.relative_to(root).as_posix() != "storage/shared/sessions.py"
    ]
    assert offenders == []


async def test_a_peer_frozen_inside_its_lease_update_costs_a_hold_its_wait_only(
    pg: SimpleNamespace,
) -> None:
    """The peer updated the lease row and froze before its commit: the row is locked. A
    hold with ``wait=1`` gives up after about a second (it waited without end), and its
    attempt, still waiting for the row, releases the lease it takes once the peer is gone."""
    from sqlalchemy import insert, select, update

    from amrita_plugin_memory.storage.models import SharedLease
    from amrita_plugin_memory.storage.shared.leases import Leases, LeaseTimeout
    from amrita_plugin_memory.storage.shared.sessions import orm_session, wall_ms

    leases = Leases()
    name = f"partition:test:{uuid.uuid4().hex}"
    loop = asyncio.get_running_loop()
    async with pg.engine.connect() as peer:
        expired = {"name": name, "holder": "killed", "expires_ms": wall_ms() - 1000}
        await peer.execute(insert(SharedLease).values(**expired))
        await peer.commit()
        await peer.execute(  # taken by the peer, which then freezes: never committed
            update(SharedLease)
            .where(SharedLease.name == name)
            .values(holder="frozen", expires_ms=wall_ms() + 60_000)
        )
        began = loop.time()
        async with asyncio.timeout(12):  # hang guard
            with pytest.raises(LeaseTimeout, match="另一个进程一直占用"):
                async with leases.hold(name, ttl=15, wait=1, what="写入分区"):
                    pass
        waited = loop.time() - began
        await peer.rollback()  # the peer is gone (the server ended its transaction)
    assert waited < 3.0, waited
    async with asyncio.timeout(30):
        await leases.settle()  # the attempt that was still waiting, and its release
    async with orm_session() as session:
        row = await session.scalar(select(SharedLease).where(SharedLease.name == name))
    assert row is None or row.holder == "killed"  # nobody holds it in the peer's place
    async with asyncio.timeout(12), leases.hold(name, ttl=15, wait=3, what="写入分区"):
        pass


async def test_a_locked_feed_table_refuses_a_write_with_a_reason_and_serves_reads(
    pg: SimpleNamespace, pg_pair: list[Any]
) -> None:
    """``LOCK TABLE … ACCESS EXCLUSIVE`` (``VACUUM FULL``, a migration) on the feed: a
    write is refused within seconds, nothing written, its lock released (the write
    section used to wait for its feed row without end); a read is served from Chroma
    with a log line; after the lock, writes work again."""
    from sqlalchemy import text

    from amrita_plugin_memory.core.errors import VectorStoreError

    a, b = pg_pair
    await a.add(new_memory(P, "user", "第一条记忆"))
    assert await _contents(b, P, "记忆") == ["第一条记忆"]
    loop = asyncio.get_running_loop()
    with captured_logs("WARNING") as logs:
        async with pg.engine.connect() as peer:
            await peer.execute(text(f"LOCK TABLE {FEED_TABLE} IN ACCESS EXCLUSIVE MODE"))
            began = loop.time()
            async with asyncio.timeout(30):  # hang guard
                with pytest.raises(VectorStoreError, match="无法通知其他进程"):
                    await a.add(new_memory(P, "user", "第二条记忆"))
            refused_after = loop.time() - began
            Lag(b).past_max_lag()
            async with asyncio.timeout(30):
                assert await _contents(b, P, "记忆") == ["第一条记忆"]
            await peer.rollback()
    assert refused_after < 10.0, refused_after
    assert any("读取跨进程变更记录失败" in line for line in logs), logs
    async with asyncio.timeout(30):
        await a.add(
            new_memory(P, "user", "第二条记忆")
        )  # the partition's lock and lease were released
    Lag(b).past_max_lag()
    assert sorted(await _contents(b, P, "记忆")) == ["第一条记忆", "第二条记忆"]


async def test_readers_of_an_unreadable_feed_wait_for_one_poll_together(
    pg: SimpleNamespace, pg_pair: list[Any]
) -> None:
    """Six turns arriving together while the feed cannot be read: they share one poll
    (bounded by ``POLL_TIMEOUT``), not six polls one after another (2, 4 … 12 s)."""
    from sqlalchemy import text

    from amrita_plugin_memory.storage.shared.feed import POLL_TIMEOUT

    a, b = pg_pair
    await a.add(new_memory(P, "user", "一条记忆"))
    assert await _contents(b, P, "记忆") == ["一条记忆"]
    lag = Lag(b)
    loop = asyncio.get_running_loop()
    async with pg.engine.connect() as peer:
        await peer.execute(text(f"LOCK TABLE {FEED_TABLE} IN ACCESS EXCLUSIVE MODE"))
        lag.past_max_lag()
        began = loop.time()
        async with asyncio.timeout(60):  # hang guard
            await asyncio.gather(*(b.fresh() for _ in range(6)))
        waited = loop.time() - began
        await peer.rollback()
    assert waited < 3 * POLL_TIMEOUT, waited  # one poll (and one under way): not six


async def test_a_feed_row_committed_late_is_applied(
    pg: SimpleNamespace, pg_pair: list[Any], chroma_server: Any, tmp_path: Path
) -> None:
    """A writer drew its row's sequence number, then 40 rows of others were committed
    and read before its commit came: the row is applied when it comes (the feed used to
    re-read only the last 32 numbers, and the partition stayed cached)."""
    from sqlalchemy import insert

    from amrita_plugin_memory.storage.chroma.connection import ChromaConnection
    from amrita_plugin_memory.storage.memory_store import MemoryStore
    from amrita_plugin_memory.storage.models import PartitionChange
    from amrita_plugin_memory.storage.shared.sessions import wall_ms

    a, b = pg_pair
    lag = Lag(b)
    env = env_for("remote", chroma_server)
    # The late writer's Chroma write, by a store that writes no feed row of its own.
    silent = MemoryStore(ChromaConnection(env, tmp_path / "silent"), a.embedder, name=a.name)
    await a.add(new_memory(P, "user", "第一条记忆"))
    assert await _contents(b, P, "记忆") == ["第一条记忆"]
    try:
        async with pg.engine.connect() as late:
            row = {
                "collection": b.coherence.feed.collection,
                "partition": P,
                "origin": "late-writer",
                "at_ms": wall_ms(),
            }
            await late.execute(insert(PartitionChange).values(**row))  # not committed yet
            for k in range(40):
                await a.coherence.changed([f"QQPlatform_Private_{41000 + k}"])
            lag.past_max_lag()
            await b.fresh()  # B reads past all of them
            await silent.add(new_memory(P, "user", "迟到的记忆"))
            await _contents(b, P, "记忆")
            assert P in b.index  # B has P cached
            await late.commit()
        lag.past_max_lag()
        assert sorted(await _contents(b, P, "记忆")) == ["第一条记忆", "迟到的记忆"]
    finally:
        silent.connection.close()  # its embedding client is A's


async def test_a_writer_killed_between_its_chroma_write_and_its_feed_row_leaves_no_one_stale(
    pg: SimpleNamespace,
    chroma_server: Any,
    embed_server: Any,
    peer_database: str,
    tmp_path: Path,
) -> None:
    """A real second process writes a memory to Chroma and exits before its feed row: this
    process, which had the partition cached (its memories and its count), sees the
    memory at its next read (it used to serve the cache for up to 600 s: a deleted memory
    recalled, a limit off by one). The writer's intent row, committed before its Chroma
    write, keeps the partition uncached here until it expires."""
    from amrita_plugin_memory.storage.memory_store import MEMORY_COLLECTION

    peer = Peer(chroma_server, peer_database, plugin_db=pg.url)
    env = env_for("remote", chroma_server, vector_db_database=peer_database)
    mine = _stack(env, MEMORY_COLLECTION, tmp_path / "mine")
    try:
        assert (await peer.read())["ready"]
        lag = Lag(mine)
        await mine.add(new_memory(P, "user", "本进程写的记忆"))
        assert await _contents(mine, P, "记忆") == ["本进程写的记忆"]
        assert await mine.count(view_of(P)) == 1
        peer.send(op="add_then_die", partition=P, text="另一个进程写的记忆")
        assert await peer.exited() == 9
        lag.past_max_lag()
        assert sorted(await _contents(mine, P, "记忆")) == ["另一个进程写的记忆", "本进程写的记忆"]
        assert await mine.count(view_of(P)) == 2
    finally:
        peer.kill()
        await _close([mine])
