"""The archive: update history, the sweep, restore (real embedded and remote Chroma)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.helpers import new_memory, view_of, write_rules
from tests.lazy import lazy_import

A = lazy_import(
    "amrita_plugin_memory.storage.archive.store",
    "amrita_plugin_memory.upkeep.archive.restore",
    "amrita_plugin_memory.upkeep.archive.sweep",
    "amrita_plugin_memory.core.config",
    "amrita_plugin_memory.core.errors",
    "amrita_plugin_memory.core.records",
)

ALICE = "QQPlatform_Private_10001"
BOB = "QQPlatform_Private_10002"
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def days_ago(days: float) -> str:
    return (NOW - timedelta(days=days)).isoformat(timespec="seconds")


def lifetime(importance: str) -> float:
    """The defaults: low 7 days, medium 90, high never."""
    return A.ConfigFile().lifetime_days(importance)


async def stored_vector(store: Any, memory_id: str) -> list[float]:
    res = await store._run(lambda c: c.get(ids=[memory_id], include=["embeddings"]))
    return [float(x) for x in res["embeddings"][0]]


async def add_at(store: Any, when: str, partition: str, text: str, importance: str) -> Any:
    store.clock = lambda: when
    return await store.add(new_memory(partition, "user", text, importance=importance, tags=["t"]))


@pytest.fixture(autouse=True)
async def drop_archive(store: Any) -> AsyncIterator[None]:
    """The remote server is shared by the whole session: drop this test's archive."""
    yield
    if store.connection.mode == "remote":
        with contextlib.suppress(Exception):
            await store.connection.delete_collection(store.archive.name)


async def live_ids(store: Any) -> set[str]:
    return set((await store._run(lambda c: c.get(include=[])))["ids"])


async def test_update_keeps_the_previous_text_in_the_archive(store: Any) -> None:
    rec = await store.add(new_memory(ALICE, "user", "用户喜欢吃苹果", tags=["饮食"]))
    old_vector = await stored_vector(store, rec.id)
    await store.update(ALICE, rec.id, content="用户喜欢吃香蕉")
    await store.update(ALICE, rec.id, tags=["水果"])  # no text change: no version
    versions = await store.archive.list(view_of(ALICE), memory_id=rec.id)
    assert [(v.record.content, v.reason, v.is_version) for v in versions] == [
        ("用户喜欢吃苹果", "updated", True)
    ]
    got = await store.archive.get(versions[0].id, with_vector=True)
    assert got is not None and got[1] == old_vector  # copied, not re-embedded
    assert (await store.get(view_of(ALICE), rec.id)).content == "用户喜欢吃香蕉"
    assert await store.count(view_of(ALICE)) == 1
    assert await store.archive.count(view_of(BOB)) == 0


async def test_update_changes_nothing_when_the_history_cannot_be_saved(store: Any) -> None:
    """The archive refuses writes (a remap marker on it): the update is refused too."""
    from tests.reliability_stats import STATS

    rec = await store.add(new_memory(ALICE, "user", "用户住在上海"))
    archive = await store.connection.get_collection(store.archive.name, create=True)
    await store.connection.run(lambda: archive.modify(metadata={"reembed_running": "test"}))
    STATS.faults_injected += 1
    with pytest.raises(A.MaintenanceInProgress):
        await store.update(ALICE, rec.id, content="用户住在北京")
    got = await store.get(view_of(ALICE), rec.id)
    if got is None or got.content != "用户住在上海":
        STATS.items_lost += 1
    assert got is not None and got.content == "用户住在上海"


async def test_sweep_moves_exactly_the_expired_memories(store: Any) -> None:
    old_low = await add_at(store, days_ago(8), ALICE, "低重要度的旧事", "low")
    new_low = await add_at(store, days_ago(6), ALICE, "低重要度的新事", "low")
    old_medium = await add_at(store, days_ago(91), BOB, "中等重要度的旧事", "medium")
    new_medium = await add_at(store, days_ago(89), BOB, "中等重要度的新事", "medium")
    ancient_high = await add_at(store, days_ago(5000), ALICE, "高重要度永不过期", "high")
    vector = await stored_vector(store, old_low.id)
    assert await store.count(view_of(ALICE)) == 3  # warms the cached count

    result = await A.sweep(store, lifetime, batch_size=1, now=NOW)

    assert (result.archived, result.batches, result.scanned) == (2, 2, 5)
    assert await live_ids(store) == {new_low.id, new_medium.id, ancient_high.id}
    archived = await store.archive.list_all(limit=10)
    assert {(r.id, r.reason, r.record.partition) for r in archived} == {
        (old_low.id, "expired", ALICE),
        (old_medium.id, "expired", BOB),
    }
    row = await store.archive.get(old_low.id, with_vector=True)
    assert row[0].record.content == "低重要度的旧事" and row[1] == vector
    assert row[0].record.tags == ["t"] and row[0].archived_at
    assert await store.count(view_of(ALICE)) == 2 and store.counts.get(ALICE) in (None, 2)
    hits = await store.query(view_of(ALICE), "低重要度的旧事", top_k=5)
    assert {h.id for h in hits} == {new_low.id, ancient_high.id}  # out of read_memory
    again = await A.sweep(store, lifetime, now=NOW)
    assert again.archived == 0


async def test_restore_round_trip_keeps_id_text_and_vector(store: Any) -> None:
    old = await add_at(store, days_ago(100), ALICE, "用户养了一只叫团子的猫", "medium")
    vector = await stored_vector(store, old.id)
    await A.sweep(store, lifetime, now=NOW)
    assert await store.get(view_of(ALICE), old.id) is None
    store.clock = lambda: NOW.isoformat(timespec="seconds")

    done = await A.restore(store, old.id, partition=ALICE, limit=10)

    back = await store.get(view_of(ALICE), old.id)
    assert back is not None and back.content == "用户养了一只叫团子的猫"
    assert (back.created_at, back.updated_at) == (old.created_at, NOW.isoformat(timespec="seconds"))
    assert await stored_vector(store, old.id) == vector
    assert done.describe() == f"已恢复记忆 {old.id}"
    assert await store.archive.count_all() == 0
    hits = await store.query(view_of(ALICE), "用户养了一只叫团子的猫", top_k=1)
    assert [h.id for h in hits] == [old.id]
    assert (await A.sweep(store, lifetime, now=NOW)).archived == 0  # fresh again


async def test_restoring_a_version_brings_the_old_text_back(store: Any) -> None:
    rec = await store.add(new_memory(ALICE, "user", "用户最喜欢的颜色是蓝色"))
    await store.update(ALICE, rec.id, content="用户最喜欢的颜色是红色")
    (version,) = await store.archive.list(view_of(ALICE))

    done = await A.restore(store, version.id, partition=ALICE, limit=1)

    assert done.replaced_text
    assert (await store.get(view_of(ALICE), rec.id)).content == "用户最喜欢的颜色是蓝色"
    (kept,) = await store.archive.list(view_of(ALICE))  # the replaced text is history now
    assert kept.record.content == "用户最喜欢的颜色是红色" and kept.memory_id == rec.id


async def test_partition_limit_counts_live_memories_only(store: Any) -> None:
    old = await add_at(store, days_ago(30), ALICE, "一个月前的小事", "low")
    await A.sweep(store, lifetime, now=NOW)
    store.clock = lambda: NOW.isoformat(timespec="seconds")
    await store.add(new_memory(ALICE, "user", "新的记忆一"), write_rules(limit=2))
    await store.add(
        new_memory(ALICE, "user", "新的记忆二"), write_rules(limit=2)
    )  # the archived one does not count
    with pytest.raises(A.MemoryLimitReached):
        await A.restore(store, old.id, partition=ALICE, limit=2)
    assert await store.count(view_of(ALICE)) == 2
    assert await store.archive.ids([old.id]) == {old.id}  # still archived, nothing lost


async def test_restore_refuses_foreign_and_unknown_ids(store: Any) -> None:
    from tests.reliability_stats import STATS

    old = await add_at(store, days_ago(30), BOB, "Bob 的旧事", "low")
    await A.sweep(store, lifetime, now=NOW)
    for hostile in (old.id, "no-such-id", "' OR 1=1 --", "x" * 5000, old.id + "~0"):
        STATS.inputs_tried += 1
        with pytest.raises(A.ArchiveRestoreError, match="归档中没有"):
            await A.restore(store, hostile, partition=ALICE, limit=10)
    assert await store.count(view_of(ALICE)) == 0 and await store.archive.count(view_of(BOB)) == 1


async def test_a_chat_write_waits_for_one_chunk_not_for_the_sweep(store: Any) -> None:
    """The sweep takes a partition's lock per chunk: a write to that partition gets in."""
    import asyncio

    col = await store.collection()
    ids = [f"old{i:04d}" for i in range(400)]
    meta = {"user_id": ALICE, "scope": "user", "tags": "[]", "importance": "low"}
    meta |= {"created_at": days_ago(30), "updated_at": days_ago(30)}
    vector = (await store.embedder.embed(["旧事"]))[0]
    await store.connection.run(
        lambda: col.add(
            ids=ids, documents=["旧事"] * 400, embeddings=[vector] * 400, metadatas=[meta] * 400
        )
    )
    task = asyncio.create_task(A.sweep(store, lifetime, batch_size=400, now=NOW))
    try:
        async with asyncio.timeout(120):  # hang guard only
            while await store.archive.count_all() < A.WRITE_CHUNK and not task.done():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            new = await store.add(new_memory(ALICE, "user", "清理进行中写入的新记忆"))
            assert not task.done(), "the write waited for the whole sweep"
            result = await task
    finally:
        task.cancel()
    assert result.archived == 400 and result.batches == 1
    assert await store.get(view_of(ALICE), new.id) is not None


async def test_reading_an_empty_archive_creates_nothing(store: Any) -> None:
    assert await store.archive.count_all() == 0 and await store.archive.list(view_of(ALICE)) == []
    assert await store.archive.get("x") is None and await store.archive.ids(["x"]) == set()
    with pytest.raises(A.ArchiveRestoreError):
        await A.restore(store, "x", partition=ALICE)
    assert store.archive.name not in await store.connection.list_collections()


async def test_the_archive_is_read_through_a_view(store: Any) -> None:
    """The archive holds what people asked to delete: a read names one partition and the
    origins it may see (issue #49); the whole archive is an operator door, named as such."""
    mine_a = await store.add(
        new_memory(ALICE, "user", "在 A 群说过：用户住在杭州", origin="group:1")
    )
    mine_b = await store.add(
        new_memory(ALICE, "user", "在 B 群说过：用户养了一只猫", origin="group:2")
    )
    theirs = await store.add(new_memory(BOB, "user", "用户对花生过敏"))
    for partition, record in ((ALICE, mine_a), (ALICE, mine_b), (BOB, theirs)):
        assert await store.delete(partition, record.id)

    only_a = view_of(ALICE, A.OriginFilter.only("group:1"))
    assert [r.id for r in await store.archive.list(only_a)] == [mine_a.id]
    assert await store.archive.count(only_a) == 1
    assert await store.archive.list(only_a, memory_id=mine_b.id) == []
    assert {r.id for r in await store.archive.list(view_of(ALICE))} == {mine_a.id, mine_b.id}
    assert await store.archive.count(view_of(BOB)) == 1
    for call in (store.archive.list(ALICE), store.archive.count(None)):
        with pytest.raises(TypeError, match="View"):
            await call
    assert await store.archive.count_all() == 3
    assert {r.id for r in await store.archive.list_all(limit=10)} == {
        mine_a.id,
        mine_b.id,
        theirs.id,
    }
    assert [r.id for r in await store.archive.list_all(memory_id=theirs.id)] == [theirs.id]


@pytest.mark.usefixtures("orm_db")
async def test_sweep_archives_episodes_past_the_medium_lifetime(store: Any) -> None:
    """Episodes expire with the memories' clock (``EPISODE_IMPORTANCE``: 90 days by
    default) into their archive, never deleted; ``0`` days keeps them."""
    from amrita_plugin_memory.core.episodes import NewEpisode
    from amrita_plugin_memory.storage.episodes.store import EpisodeStore

    episodes = EpisodeStore()
    kept = {}
    for days, summary in ((92, "很久以前聊过搬家"), (91, "也很久了"), (89, "最近聊过面试")):
        end = (NOW - timedelta(days=days)).timestamp()
        new = NewEpisode(
            chat=ALICE, origin="private", start=end - 600, end=end, participants=("10001",),
            summary=summary, topics=(), source="extract", messages=2, chars=20,
        )  # fmt: skip
        kept[summary] = await episodes.keep(new, [])
    never = await A.sweep(store, lambda _: 0.0, now=NOW, episodes=episodes)
    assert never.episodes == 0

    result = await A.sweep(store, lifetime, batch_size=1, now=NOW, episodes=episodes)

    assert result.episodes == 2 and "归档对话片段 2 段" in result.describe()
    live = await episodes.recent(view_of(ALICE), 10)
    assert [e.summary for e in live] == ["最近聊过面试"]
    every = await episodes.of_chat_any(ALICE, archived=True)
    assert [(e.summary, e.archived) for e in every] == [
        ("很久以前聊过搬家", True), ("也很久了", True), ("最近聊过面试", False),
    ]  # fmt: skip
    assert (await A.sweep(store, lifetime, now=NOW, episodes=episodes)).episodes == 0
    assert await episodes.restore_episode(ALICE, kept["也很久了"].id)
