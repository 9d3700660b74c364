"""The ChromaDB wrapper, against embedded and remote (``chroma run``) ChromaDB."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import env_for
from tests.helpers import LoopStalls, new_memory, view_of, write_rules
from tests.lazy import lazy_import
from tests.servers import EmbeddingServer

V = lazy_import(
    "amrita_plugin_memory.storage.memory_store",
    "amrita_plugin_memory.storage.chroma.connection",
    "amrita_plugin_memory.core.errors",
    "amrita_plugin_memory.core.records",
)

ALICE = "QQPlatform_Private_10001"
BOB = "QQPlatform_Private_10002"
GROUP = "QQPlatform_Group_20001"


async def test_add_get_list_count(store: Any) -> None:
    rec = await store.add(
        new_memory(ALICE, "user", "用户喜欢吃苹果", tags=["饮食", "偏好"], importance="high")
    )
    assert len(rec.id) == 32 and rec.created_at.endswith("+00:00")
    got = await store.get(view_of(ALICE), rec.id)
    assert got is not None
    assert (got.content, got.partition, got.scope, got.tags, got.importance) == (
        "用户喜欢吃苹果",
        ALICE,
        "user",
        ["饮食", "偏好"],
        "high",
    )
    assert got.created_at == got.updated_at == rec.created_at
    await store.add(new_memory(ALICE, "user", "用户住在上海"))
    await store.add(new_memory(BOB, "user", "Bob 喜欢猫"))
    assert await store.count(view_of(ALICE)) == 2
    assert await store.count(view_of(BOB)) == 1
    assert await store.count_all() == 3
    listed = await store.list(view_of(ALICE), limit=10)
    assert [r.content for r in listed] == ["用户喜欢吃苹果", "用户住在上海"]
    assert [r.content for r in await store.list(view_of(ALICE), limit=1, offset=1)] == [
        "用户住在上海"
    ]


async def test_query_orders_by_distance_within_partition(store: Any) -> None:
    await store.add(new_memory(ALICE, "user", "我喜欢吃苹果"))
    await store.add(new_memory(ALICE, "user", "明天去北京出差"))
    await store.add(new_memory(BOB, "user", "我很喜欢吃苹果"))  # closer, but Bob's
    hits = await store.query(view_of(ALICE), "我很喜欢吃苹果", top_k=5)
    assert [h.content for h in hits] == ["我喜欢吃苹果", "明天去北京出差"]
    assert hits[0].distance is not None and hits[0].distance < hits[1].distance
    exact = await store.query(view_of(BOB), "我很喜欢吃苹果", top_k=1)
    assert exact[0].distance == pytest.approx(0, abs=1e-3)


async def test_importance_filter_combines_with_partition(store: Any) -> None:
    await store.add(new_memory(ALICE, "user", "重要的事", importance="high"))
    await store.add(new_memory(ALICE, "user", "琐碎的事", importance="low"))
    await store.add(new_memory(BOB, "user", "Bob 重要的事", importance="high"))
    hits = await store.query(view_of(ALICE), "事", top_k=10, importance="high")
    assert [h.content for h in hits] == ["重要的事"]
    assert await store.query(view_of(GROUP), "事", top_k=10, importance="high") == []


async def test_other_partition_ids_are_not_found(store: Any) -> None:
    rec = await store.add(new_memory(ALICE, "user", "Alice 的秘密"))
    assert await store.get(view_of(BOB), rec.id) is None
    assert await store.update(BOB, rec.id, content="被篡改") is None
    assert await store.delete(BOB, rec.id) is False
    assert await store.get(view_of(ALICE), "0" * 32) is None
    assert await store.delete(ALICE, "does-not-exist") is False
    still = await store.get(view_of(ALICE), rec.id)
    assert still is not None and still.content == "Alice 的秘密"


async def test_update_reembeds_and_keeps_created_at(
    store: Any, embed_server: EmbeddingServer
) -> None:
    days = iter(range(1, 28))
    store.clock = lambda: f"2026-01-{next(days):02d}T08:00:00+00:00"  # one day per call
    rec = await store.add(new_memory(ALICE, "user", "喜欢喝咖啡", tags=["饮品"]))
    updated = await store.update(ALICE, rec.id, content="喜欢喝绿茶", importance="high")
    assert updated is not None
    got = await store.get(view_of(ALICE), rec.id)
    assert got.content == "喜欢喝绿茶" and got.tags == ["饮品"] and got.importance == "high"
    assert got.created_at == rec.created_at and got.updated_at > rec.created_at
    hits = await store.query(view_of(ALICE), "喜欢喝绿茶", top_k=1)
    assert hits[0].id == rec.id and hits[0].distance == pytest.approx(0, abs=1e-3)
    # Metadata-only updates do not call the embedding service.
    before = embed_server.embed_calls
    await store.update(ALICE, rec.id, tags=["茶"])
    assert embed_server.embed_calls == before
    assert (await store.get(view_of(ALICE), rec.id)).tags == ["茶"]


async def test_delete(store: Any) -> None:
    rec = await store.add(new_memory(GROUP, "group", "群规：不刷屏"))
    assert await store.delete(GROUP, rec.id) is True
    assert await store.get(view_of(GROUP), rec.id) is None
    assert await store.count(view_of(GROUP)) == 0


async def test_limit_is_atomic_under_concurrency(store: Any) -> None:
    async def write(i: int) -> str:
        try:
            await store.add(new_memory(ALICE, "user", f"并发记忆 {i}"), write_rules(limit=5))
            return "ok"
        except V.MemoryLimitReached as exc:
            assert "5/5" in str(exc)
            return "refused"

    results = await asyncio.gather(*(write(i) for i in range(20)))
    assert results.count("ok") == 5 and results.count("refused") == 15
    assert await store.count(view_of(ALICE)) == 5


async def test_limit_follows_deletes_and_key_rewrites(store: Any) -> None:
    """The kept count tracks our own adds and deletes; a refusal is always re-counted."""
    ids = [
        (await store.add(new_memory(ALICE, "user", f"记忆 {i}"), write_rules(limit=3))).id
        for i in range(3)
    ]
    assert store.counts.get(ALICE) == 3
    with pytest.raises(V.MemoryLimitReached):
        await store.add(new_memory(ALICE, "user", "第四条"), write_rules(limit=3))
    assert await store.delete(ALICE, ids[0]) is True
    assert store.counts.get(ALICE) == 2
    await store.add(new_memory(ALICE, "user", "删除后再写"), write_rules(limit=3))
    with pytest.raises(V.MemoryLimitReached, match="3/3"):
        await store.add(new_memory(ALICE, "user", "又满了"), write_rules(limit=3))
    # Key migration moves memories between partitions: every kept count is dropped.
    await store.rewrite_keys({ids[1]: BOB})
    assert len(store.counts) == 0
    await store.add(new_memory(ALICE, "user", "迁走一条后还能写"), write_rules(limit=3))
    assert await store.count(view_of(ALICE)) == 3 and await store.count(view_of(BOB)) == 1


async def test_limit_sees_writes_of_another_process(store: Any) -> None:
    """Another writer on the same collection: seen after the TTL, and before any refusal."""
    other = V.MemoryStore(store.connection, store.embedder, name=store.name)
    await store.add(new_memory(ALICE, "user", "本进程写的"), write_rules(limit=3))
    for i in range(2):
        await other.add(new_memory(ALICE, "user", f"另一个进程写的 {i}"))
    # The kept count (1) is stale, but the partition is full: an exact count decides.
    store.counts.ttl = 0.0
    with pytest.raises(V.MemoryLimitReached, match="3/3"):
        await store.add(new_memory(ALICE, "user", "超出上限"), write_rules(limit=3))
    assert await store.count(view_of(ALICE)) == 3
    # A refusal from a stale "full" count is re-checked too.
    store.counts.ttl = 60.0
    store.counts.set(ALICE, 3)
    await other.delete(ALICE, (await other.list(view_of(ALICE), limit=1))[0].id)
    await store.add(new_memory(ALICE, "user", "对方删除后可以写"), write_rules(limit=3))
    assert await store.count(view_of(ALICE)) == 3


async def test_one_write_object_carries_every_rule(store: Any) -> None:
    """``MemoryStore.write``: one ``NewMemory`` and one ``WriteRules`` through the fence,
    the merge into a true repeat, the limit and what may give way, in that order."""
    from amrita_plugin_memory.core.errors import WriteFenced
    from amrita_plugin_memory.core.records import SOURCE_AUTO

    store.settings = V.RetrievalSettings(dedup=True)
    auto = await store.add(new_memory(ALICE, "user", "用户喜欢喝乌龙茶", source=SOURCE_AUTO))
    await store.add(new_memory(ALICE, "user", "用户住在杭州", importance="high"))
    full = write_rules(merge=True, limit=2)
    # A true repeat merges into the full partition (it adds nothing), keeping the new tags.
    repeat = new_memory(ALICE, "user", "用户喜欢喝乌龙茶", tags=["饮品"], source=SOURCE_AUTO)
    merged = await store.write(repeat, full)
    assert merged.merged and merged.record.id == auto.id and merged.record.tags == ["饮品"]
    # Without merge the same text is a new memory: refused, the partition is full…
    with pytest.raises(V.MemoryLimitReached):
        await store.write(repeat, write_rules(limit=2))
    # …unless an automatic memory may give way (it is archived, restorable).
    written = await store.write(
        new_memory(ALICE, "user", "用户在学日语"), write_rules(limit=2, displace="high")
    )
    assert not written.merged and await store.get(view_of(ALICE), auto.id) is None

    async def voided() -> None:
        raise WriteFenced("10001", "已遗忘")

    with pytest.raises(WriteFenced):
        await store.write(new_memory(ALICE, "user", "不该写入"), write_rules(fence=voided))
    assert sorted(r.content for r in await store.list(view_of(ALICE))) == [
        "用户住在杭州",
        "用户在学日语",
    ]


def test_partition_counts_are_bounded() -> None:
    counts = V.PartitionCounts(max_entries=3)
    for i in range(5):
        counts.set(f"p{i}", i)
    assert len(counts) == 3 and counts.get("p0") is None and counts.get("p4") == 4
    counts.adjust("unknown", +1)
    assert counts.get("unknown") is None
    counts.adjust("p4", -10)
    assert counts.get("p4") == 0


async def test_embedding_failure_keeps_the_write_pending(
    store: Any, embed_server: EmbeddingServer
) -> None:
    """Issue #47: an outage no longer refuses a write; the text is stored pending, found
    by keywords, and nothing stored before is touched."""
    await store.add(new_memory(ALICE, "user", "已有记忆"))
    rec = (await store.list(view_of(ALICE)))[0]
    embed_server.set_mode("error500")
    kept = await store.write(new_memory(ALICE, "user", "新记忆：周五去苏州看园林"))
    assert kept.pending and not kept.merged
    changed = await store.update(ALICE, rec.id, content="改写：用户的猫叫年糕")
    assert changed is not None and changed.pending
    embed_server.set_mode("ok")
    assert await store.count(view_of(ALICE)) == 2
    assert (await store.get(view_of(ALICE), rec.id)).content == "改写：用户的猫叫年糕"
    assert (await store.get(view_of(ALICE), kept.record.id)).pending
    hits = await store.search(view_of(ALICE), "苏州园林", None, top_k=5)
    assert hits and hits[0].id == kept.record.id
    assert await store.count_pending() == 2


async def test_collection_metadata_is_merged(store: Any) -> None:
    await store.set_meta({"a": "1"})
    await store.set_meta({"b": "2"})
    assert await store.get_meta("a") == "1"
    assert await store.get_meta("b") == "2"
    await store.set_meta({"a": "3"})
    meta = await store.get_metadata()
    assert meta["a"] == "3" and meta["b"] == "2"


async def test_distribution_and_paging(store: Any) -> None:
    from amrita_plugin_memory.embedding.status import memory_distribution

    for i in range(7):
        await store.add(new_memory(ALICE, "user", f"A{i}"))
    for i in range(3):
        await store.add(new_memory(GROUP, "group", f"G{i}"))
    assert await memory_distribution(store) == {(ALICE, "user"): 7, (GROUP, "group"): 3}
    seen, sizes = [], []
    async for page in store.iter_all_records(with_documents=True, page_size=4):
        seen += [r.content for r in page]
        sizes.append(len(page))
    assert sizes == [4, 4, 2]
    assert sorted(seen) == sorted([f"A{i}" for i in range(7)] + [f"G{i}" for i in range(3)])
    own = [
        r.content
        async for page in store.iter_records(view_of(ALICE), with_documents=True, page_size=3)
        for r in page
    ]
    assert sorted(own) == [f"A{i}" for i in range(7)]


async def test_chroma_calls_do_not_block_the_event_loop(store: Any) -> None:
    """A ticker keeps running while many store calls are in flight."""
    for i in range(20):
        await store.add(new_memory(ALICE, "user", f"记忆 {i}"))
    async with LoopStalls(min_ticks=40) as stalls:  # this process's work, not a loaded machine
        await asyncio.gather(
            *(store.query(view_of(ALICE), f"记忆 {i}", top_k=5) for i in range(30))
        )
    assert stalls.worst < 0.25, sorted(stalls.stalls)[-5:]


async def test_local_data_dir_is_locked_against_a_second_process(tmp_path: Path) -> None:
    first = V.ChromaConnection(env_for("local"), tmp_path / "db")
    second = V.ChromaConnection(env_for("local"), tmp_path / "db")
    try:
        await first.client()
        with pytest.raises(V.DataDirLocked, match="正被另一个进程"):
            await second.client()
        first.close()
        await second.client()  # free again once the first one closed
    finally:
        first.close()
        second.close()


async def test_remote_server_down_is_a_clear_error_and_recovers(
    chroma_server: Any, embed_server: EmbeddingServer, tmp_path: Path
) -> None:
    from amrita_plugin_memory.embedding.client import EmbeddingClient

    env = env_for("remote", chroma_server)
    conn = V.ChromaConnection(env, tmp_path / "unused")
    embedder = EmbeddingClient.from_env(env)
    s = V.MemoryStore(conn, embedder, name="test-down-recover")
    try:
        rec = await s.add(new_memory(ALICE, "user", "服务器重启前的记忆"))
        chroma_server.stop()
        with pytest.raises(V.VectorStoreError, match="向量数据库"):
            await s.get(view_of(ALICE), rec.id)
        chroma_server.start()
        got = await s.get(view_of(ALICE), rec.id)
        assert got is not None and got.content == "服务器重启前的记忆"
    finally:
        if not chroma_server.running:
            chroma_server.start()
        await conn.delete_collection(s.name)
        await embedder.close()
        conn.close()


async def test_remote_named_tenant_and_database_are_created(
    chroma_server: Any, tmp_path: Path
) -> None:
    env = env_for("remote", chroma_server, vector_db_tenant="amrita", vector_db_database="memories")
    conn = V.ChromaConnection(env, tmp_path / "unused")
    try:
        await conn.get_collection("tenant-probe")
        assert "tenant-probe" in await conn.list_collections()
    finally:
        conn.close()


async def test_remote_unreachable_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = env_for("remote", None, vector_db_server="127.0.0.1", vector_db_port=port)
    conn = V.ChromaConnection(env, tmp_path / "unused")
    with pytest.raises(V.VectorStoreError, match="无法连接向量数据库"):
        await conn.client()
