"""Several processes on one store: caches, limits and the sweep stay coherent (#29, #30).

Two store stacks share the session's SQLite database (through the ORM, tables
from the plugin's models) and one real ``chroma run``, each with its own Chroma
HTTP client, caches, locks, change feed and leases: exactly what two bot
processes have. ``tests/coherence_peer.py`` is a real second OS process (the
plugin loaded headless) for the lease of a killed sweeper.

Staleness is checked without sleeping: a read's feed clock is moved past
``MAX_LAG``, so the read must poll the feed before it uses its cache.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WORK, env_for
from tests.helpers import new_memory, view_of, write_rules
from tests.peer_process import PeerProcess, peer_init

P = "QQPlatform_Private_30001"


def _stack(env: Any, name: str, where: Path) -> Any:
    from amrita_plugin_memory.embedding.client import EmbeddingClient
    from amrita_plugin_memory.storage.chroma.connection import ChromaConnection
    from amrita_plugin_memory.storage.memory_store import MemoryStore
    from amrita_plugin_memory.storage.shared.coherence import Coherence

    store = MemoryStore(ChromaConnection(env, where), EmbeddingClient.from_env(env), name=name)
    store.share(Coherence.remote(env, name))  # as the runtime does
    return store


async def _close(stores: list[Any]) -> None:
    for s in stores:
        await s.coherence.close()
    try:
        await stores[0].connection.delete_collection(stores[0].name)
        await stores[0].connection.delete_collection(stores[0].archive.name)
    except Exception:
        pass
    for s in stores:
        await s.embedder.close()
        s.connection.close()


@pytest.fixture
async def pair(chroma_server: Any, embed_server: Any, tmp_path: Path) -> AsyncIterator[list[Any]]:
    """Two processes' stores on one collection (``A``, ``B``)."""
    env = env_for("remote", chroma_server)
    name = f"test-{uuid.uuid4().hex[:12]}"
    stores = [_stack(env, name, tmp_path / f"c{k}") for k in range(2)]
    yield stores
    await _close(stores)


class Lag:
    """The feed clock of one store, moved on by hand (the read's view of time)."""

    def __init__(self, store: Any) -> None:
        import time

        self.offset = 0.0
        self.feed = store.coherence.feed
        self.feed.clock = lambda: time.monotonic() + self.offset

    def past_max_lag(self) -> None:
        from amrita_plugin_memory.storage.shared.feed import MAX_LAG

        self.offset += MAX_LAG + 0.01


async def _contents(store: Any, partition: str, text: str) -> list[str]:
    return [r.content for r in await store.query(view_of(partition), text, top_k=20)]


async def test_b_sees_a_write_in_a_partition_it_has_cached(pair: list[Any]) -> None:
    from amrita_plugin_memory.upkeep.listing import newest_page

    a, b = pair
    lag = Lag(b)
    await a.add(new_memory(P, "user", "用户喜欢蓝色"))
    assert await _contents(b, P, "颜色") == ["用户喜欢蓝色"]
    assert (await newest_page(b, P, limit=10))[1] == 1
    assert P in b.index and b.index.loads == 1

    await a.add(new_memory(P, "user", "用户养了一只猫"))
    lag.past_max_lag()  # the read is due a poll: it must see the write
    assert sorted(await _contents(b, P, "猫")) == ["用户养了一只猫", "用户喜欢蓝色"]
    assert (await newest_page(b, P, limit=10))[1] == 2
    assert b.index.loads == 2 and b.coherence.feed.applied >= 1

    # The writer's own caches were kept in step, not reloaded.
    assert sorted(await _contents(a, P, "猫")) == ["用户养了一只猫", "用户喜欢蓝色"]
    assert a.index.loads <= 1


async def test_the_background_poll_applies_a_write_without_a_read(pair: list[Any]) -> None:
    """B's poller (not a read of B) invalidates what A wrote; the 1 s bound of reads is
    the deterministic ``Lag`` tests' (real time here would make the test depend on load)."""
    a, b = pair
    await a.add(new_memory(P, "user", "第一条"))
    await _contents(b, P, "第一条")  # starts B's poller, caches P
    seen = asyncio.Event()
    b.coherence.feed.follow(lambda partition: seen.set(), seen.set)
    await a.add(new_memory(P, "user", "第二条"))
    async with asyncio.timeout(10):  # hang guard
        await seen.wait()
    assert P not in b.index
    assert sorted(await _contents(b, P, "第二条")) == ["第一条", "第二条"]


async def test_a_replaced_collection_in_a_clears_every_cache_of_b(pair: list[Any]) -> None:
    a, b = pair
    lag = Lag(b)
    await a.add(new_memory(P, "user", "第一条"))
    await _contents(b, P, "第一条")
    b.counts.set(P, 1)
    a.invalidate()  # what maintenance does after it replaced the collection
    await a.coherence.settled()
    lag.past_max_lag()
    await b.fresh()
    assert len(b.index) == 0 and len(b.counts) == 0


async def test_a_delete_and_a_forget_through_a_are_gone_from_b(pair: list[Any]) -> None:
    from amrita_plugin_memory.upkeep.listing import newest_page
    from amrita_plugin_memory.upkeep.users.erase import erase_partition

    a, b = pair
    lag = Lag(b)
    kept = await a.add(new_memory(P, "user", "用户住在北京"))
    gone = await a.add(new_memory(P, "user", "用户的密码提示是生日"))
    assert len(await _contents(b, P, "密码")) == 2
    await newest_page(b, P, limit=10)

    assert await a.delete(P, gone.id)
    lag.past_max_lag()
    assert await _contents(b, P, "密码") == ["用户住在北京"]
    assert [r.id for r in (await newest_page(b, P, limit=10))[0]] == [kept.id]

    await erase_partition(a, P)
    lag.past_max_lag()
    assert await _contents(b, P, "北京") == []
    assert (await newest_page(b, P, limit=10))[1] == 0


async def test_the_limit_holds_when_both_write_at_once(pair: list[Any]) -> None:
    from amrita_plugin_memory.core.errors import MemoryLimitReached

    a, b = pair
    limit = 4
    await a.add(new_memory(P, "user", "第 0 条"), write_rules(limit=limit))
    await b.add(new_memory(P, "user", "第 1 条"), write_rules(limit=limit))
    # Both now hold a count below the limit; without the lease and the poll in the
    # write section each would trust its own count and write past the limit.
    assert a.counts.get(P) is not None and b.counts.get(P) is not None

    async def write(store: Any, k: int) -> bool:
        try:
            await store.add(new_memory(P, "user", f"并发写入 {k}"), write_rules(limit=limit))
            return True
        except MemoryLimitReached:
            return False

    done = await asyncio.gather(*(write(s, k) for k in range(4) for s in (a, b)))
    assert sum(done) == limit - 2
    assert await a.count(view_of(P)) == limit


async def test_a_repeat_written_by_both_at_once_is_stored_once(pair: list[Any]) -> None:
    a, b = pair
    await a.add(new_memory(P, "user", "用户在学吉他"))
    await b.query(view_of(P), "吉他")  # both have the partition cached
    await a.query(view_of(P), "吉他")
    results = await asyncio.gather(
        a.write(new_memory(P, "user", "用户每天练习钢琴"), write_rules(merge=True)),
        b.write(new_memory(P, "user", "用户每天练习钢琴"), write_rules(merge=True)),
    )
    assert sorted(r.merged for r in results) == [False, True]
    assert await a.count(view_of(P)) == 2


async def test_two_processes_never_sweep_at_once(pair: list[Any]) -> None:
    from amrita_plugin_memory.upkeep.archive.sweep import SweepBusy, sweep

    a, b = pair
    old = (datetime.now(UTC) - timedelta(days=400)).isoformat()
    a.clock = lambda: old
    for k in range(3):
        await a.add(new_memory(P, "user", f"很久以前的事 {k}", importance="low"))
    entered, release = asyncio.Event(), asyncio.Event()
    original = a.archive.save

    async def save(*args: Any, **kwargs: Any) -> None:
        entered.set()
        await release.wait()
        await original(*args, **kwargs)

    a.archive.save = save
    lifetime = lambda importance: 30.0  # noqa: E731
    first = asyncio.create_task(sweep(a, lifetime))
    async with asyncio.timeout(20):
        await entered.wait()
    with pytest.raises(SweepBusy, match="另一个进程正在执行归档清理"):
        await sweep(b, lifetime)
    release.set()
    async with asyncio.timeout(20):
        result = await first
    assert result.archived == 3
    assert (await sweep(b, lifetime)).archived == 0  # free again, nothing left
    assert await a.count(view_of(P)) == 0 and len(await a.archive.list(view_of(P), limit=10)) == 3


# ---------------------------------------------------------------------------
# A second OS process
# ---------------------------------------------------------------------------


class Peer(PeerProcess):
    """``tests/coherence_peer.py`` on the remote database ``database``."""

    def __init__(self, chroma: Any, database: str, plugin_db: str | None = None) -> None:
        init = peer_init(
            WORK / "peer-data",
            WORK / "peer-cache",
            sqlalchemy_database_url=f"sqlite+aiosqlite:///{WORK / 'db.sqlite3'}",
            embed_mismatch_policy="never",
            vector_db_type="remote",
            vector_db_server=chroma.host,
            vector_db_port=chroma.port,
            vector_db_database=database,
        )
        if plugin_db is not None:  # the plugin's tables in another database (PostgreSQL)
            init["sqlalchemy_binds"] = {"amrita_plugin_memory": plugin_db}
        super().__init__(init)


@pytest.fixture
def peer_database() -> str:
    return f"coherence_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def peer(chroma_server: Any, embed_server: Any, peer_database: str) -> Iterator[Peer]:
    p = Peer(chroma_server, peer_database)
    yield p
    p.kill()


async def test_a_killed_sweepers_lease_expires_and_another_process_sweeps(
    peer: Peer, chroma_server: Any, peer_database: str, tmp_path: Path
) -> None:
    from amrita_plugin_memory.storage.memory_store import MEMORY_COLLECTION
    from amrita_plugin_memory.upkeep.archive.sweep import SweepBusy, sweep

    assert (await peer.read())["ready"]
    env = env_for("remote", chroma_server, vector_db_database=peer_database)
    mine = _stack(env, MEMORY_COLLECTION, tmp_path / "mine")
    try:
        lag = Lag(mine)
        # A write of the other process is seen by this one's cached partition.
        await mine.add(new_memory(P, "user", "本进程写的"))
        assert await _contents(mine, P, "写的") == ["本进程写的"]
        answer = await peer.ask(op="add", partition=P, text="另一个进程写的")
        assert "id" in answer, answer
        lag.past_max_lag()
        assert sorted(await _contents(mine, P, "写的")) == ["另一个进程写的", "本进程写的"]

        # The other process takes the sweep's lease, then is killed mid-sweep.
        ttl = 3.0
        assert (await peer.ask(op="hold_sweep", ttl=ttl))["held"] is True
        lifetime = lambda importance: 0.0  # noqa: E731  (nothing expires: the lease is the point)
        with pytest.raises(SweepBusy):
            await sweep(mine, lifetime)
        peer.kill()
        loop = asyncio.get_running_loop()
        killed = loop.time()
        async with asyncio.timeout(30):  # hang guard: the lease expires after ≤ ttl
            while True:
                try:
                    await sweep(mine, lifetime)
                    break
                except SweepBusy:
                    await asyncio.sleep(0.1)
        assert loop.time() - killed <= ttl + 2.0
    finally:
        await _close([mine])


# ---------------------------------------------------------------------------
# The pieces
# ---------------------------------------------------------------------------


def test_a_load_that_began_before_an_invalidation_is_not_cached() -> None:
    from amrita_plugin_memory.storage.partition.cache import PartitionCache

    cache: PartitionCache[int] = PartitionCache(max_entries=2)
    assert cache.get("p") is None  # a miss: the load that follows is ticketed
    cache.invalidate("p")  # another process wrote p while it was read
    assert cache.put("p", 1) is False and "p" not in cache
    assert cache.get("p") is None
    assert cache.put("p", 2) is True and cache.get("p") == 2
    cache.invalidate("q")  # another partition: p stays
    assert cache.get("p") == 2
    # Budget and generation.
    cache.get("q")
    cache.put("q", 3)
    cache.get("r")
    cache.put("r", 4)
    assert len(cache) == 2 and "p" not in cache
    assert cache.get("r", generation="other") is None and len(cache) == 0
    cache.put("r", 5, "g2")
    assert cache.get("r", "g2") == 5


async def test_a_lease_is_exclusive_and_a_wait_is_bounded() -> None:
    from amrita_plugin_memory.storage.shared.leases import Leases, LeaseTimeout

    one, two = Leases(), Leases()
    name = f"test:{uuid.uuid4().hex}"
    async with one.hold(name, ttl=30, wait=1, what="测试"):
        assert await two.try_take(name, two.token(), 30) is False
        with pytest.raises(LeaseTimeout, match="测试：另一个进程一直占用"):
            async with two.hold(name, ttl=30, wait=0.2, what="测试"):
                pass
        async with two.attempt(name, ttl=30) as held:
            assert held is False
    async with two.attempt(name, ttl=30) as held:
        assert held is True


async def test_a_forget_on_one_host_fences_the_others(tmp_path: Path) -> None:
    """Tombstones are rows of the shared database: a host that never saw the file sees them."""
    from amrita_plugin_memory.core.errors import WriteFenced
    from amrita_plugin_memory.infra.fences import UserEpochs
    from amrita_plugin_memory.storage.shared.sessions import orm_session
    from amrita_plugin_memory.storage.users.fences import UserFences
    from amrita_plugin_memory.storage.users.tombstones import ForgottenUsers

    user = str(uuid.uuid4().int % 10**9)
    old_user = str(uuid.uuid4().int % 10**9)
    # A tombstone written before the table existed (the file only) ...
    await ForgottenUsers.in_dir(tmp_path / "a").add(
        old_user, f"QQPlatform_Private_{old_user}", datetime.now(UTC)
    )
    here = ForgottenUsers.in_dir(tmp_path / "a", orm_session)
    there = ForgottenUsers.in_dir(tmp_path / "b", orm_session)  # another host's data dir
    fences = UserFences(UserEpochs(), there)
    ticket = fences.ticket(user)
    await fences.check(ticket)  # not forgotten: allowed
    assert old_user not in await there.entries()
    assert old_user in await here.entries()  # ... is copied into the table by its first read
    assert old_user in await there.entries()

    await here.add(user, f"QQPlatform_Private_{user}", datetime.now(UTC))
    assert not (tmp_path / "b" / "forgotten_users.json").exists()
    assert await there.forgotten_at(user) is not None
    with pytest.raises(WriteFenced):
        await fences.check(ticket)


async def test_one_l3_cycle_per_target_across_processes() -> None:
    from amrita_plugin_memory.storage.shared.leases import Leases
    from amrita_plugin_memory.subconscious.scheduling import cycle_lease

    target = uuid.uuid4().hex[:10]
    async with cycle_lease(Leases(), target) as first:
        async with cycle_lease(Leases(), target) as second:
            assert (first, second) == (True, False)
        async with cycle_lease(None, target) as own_store:  # no leases: a local store
            assert own_store is True
    async with cycle_lease(Leases(), target) as again:
        assert again is True


async def test_the_console_of_b_sees_a_write_through_a(pair: list[Any]) -> None:
    from amrita_plugin_memory.console.catalog import PartitionCatalog

    a, b = pair
    lag = Lag(b)
    catalog = PartitionCatalog(b)
    await a.add(new_memory(P, "user", "第一条"))
    assert set((await catalog.get()).partitions) == {P}
    other = "QQPlatform_Private_30002"
    await a.add(new_memory(other, "user", "另一个分区"))
    lag.past_max_lag()
    assert set((await catalog.get()).partitions) == {P, other}  # not 30 s later


async def test_the_start_up_check_ends_its_loop_only_after_its_database_work(
    tmp_path: Path, chroma_server: Any, embed_server: Any
) -> None:
    """CI's red run: the start-up check runs on a private event loop, and re-reading the
    collection starts a feed row in a task of its own (``Coherence.changed_later``).
    The check returned, ``asyncio.run`` cancelled that task while it held a connection
    (SQLAlchemy's pool logged the cancelled rollback of ``Session.close`` with its
    traceback) and the row was never committed. Here another connection holds
    SQLite's write lock for two seconds, so the row is surely still waiting when the
    check's own work ends: it must be written all the same, and nothing cancelled.
    """
    import logging
    import sqlite3
    import threading

    from sqlalchemy import func, select

    from amrita_plugin_memory.embedding import reset_fingerprint
    from amrita_plugin_memory.embedding.startup import run_startup_check
    from amrita_plugin_memory.storage.models import PartitionChange
    from amrita_plugin_memory.storage.shared.sessions import orm_session
    from tests.botproject import ALICE, make_runtime, memory_meta, seed

    rt = make_runtime(tmp_path, mode="remote", chroma=chroma_server)
    feed = rt.store.coherence.feed
    assert feed is not None

    async def rows() -> int:
        async with orm_session() as session:
            query = select(func.count()).where(
                PartitionChange.collection == feed.collection, PartitionChange.partition == "*"
            )
            return int(await session.scalar(query) or 0)

    errors: list[logging.LogRecord] = []

    class Errors(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            errors.append(record)

    pool_log = logging.getLogger("sqlalchemy.pool")
    handler = Errors(level=logging.ERROR)
    pool_log.addHandler(handler)
    try:
        await seed(
            rt,
            rt.store.name,
            [(f"m{i}", f"爱丽丝的第 {i} 件事", memory_meta(ALICE)) for i in range(3)],
        )
        await reset_fingerprint(rt.maintenance)
        await rt.store.coherence.settle()
        before = await rows()

        lock = sqlite3.connect(WORK / "db.sqlite3", isolation_level=None, check_same_thread=False)
        lock.execute("BEGIN IMMEDIATE")  # another writer, as a second process would be
        release = threading.Timer(2.0, lock.rollback)
        release.start()
        try:
            result = await asyncio.to_thread(run_startup_check, rt.maintenance, interactive=False)
        finally:
            release.join()
            lock.close()
        assert result.action == "match", result.message
        assert await rows() > before  # the other processes hear of the re-read collection
        assert [r.getMessage() for r in errors] == []
    finally:
        pool_log.removeHandler(handler)
        await rt.close()
