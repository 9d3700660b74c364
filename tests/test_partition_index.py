"""The per-partition vector index answers exactly like Chroma's filtered query.

Real embedded and remote (``chroma run``) Chroma; the index's answers are
compared with a raw ``collection.query(where=...)`` on the same collection.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from typing import Any

import numpy as np
import pytest

from tests.conftest import env_for
from tests.helpers import new_memory, view_of
from tests.lazy import lazy_import
from tests.reliability_stats import STATS

P = lazy_import(
    "amrita_plugin_memory.storage.memory_store",
    "amrita_plugin_memory.storage.partition.index",
    "amrita_plugin_memory.storage.chroma.connection",
    "amrita_plugin_memory.embedding.client",
    "amrita_plugin_memory.core.records",
)

SIZES = {"p_small": 7, "p_mid": 300, "p_big": 1200, "p_other": 150}
IMPORTANCE = ("low", "medium", "high")


async def _dim(store: Any) -> int:
    return len((await store.embedder.embed(["维度"]))[0])


async def _seed(store: Any, sizes: dict[str, int], dim: int, rng: random.Random) -> None:
    """Write memories straight into the collection (random vectors, random filters)."""
    col = await store.collection()
    for partition, n in sizes.items():
        ids, vecs, docs, metas = [], [], [], []
        for k in range(n):
            rec = P.MemoryRecord(
                id=uuid.uuid4().hex,
                content=f"{partition} 记忆 {k}",
                partition=partition,
                scope="user",
                importance=rng.choice(IMPORTANCE),
                created_at="2026-01-01T00:00:00+00:00",
                updated_at="2026-01-01T00:00:00+00:00",
                origin=rng.choice(("private", "group:1", "group:2")),
            )
            ids.append(rec.id)
            vecs.append([rng.gauss(0, 1) for _ in range(dim)])
            docs.append(rec.content)
            metas.append(rec.to_metadata())
        for s in range(0, n, 500):
            await store.connection.run(
                col.add,
                ids=ids[s : s + 500],
                embeddings=vecs[s : s + 500],
                documents=docs[s : s + 500],
                metadatas=metas[s : s + 500],
            )


async def _raw(store: Any, partition: str, vec: list[float], top_k: int, **f: Any) -> list:
    col = await store.collection()
    where = P.where_partition(partition, **f)
    res = await store.connection.run(
        col.query, query_embeddings=[vec], n_results=top_k, where=where, include=["distances"]
    )
    return list(zip(res["ids"][0], res["distances"][0], strict=True))


async def _check(store: Any, rng: random.Random, dim: int, queries: int) -> int:
    """Compare the index with Chroma on random queries; returns how many were compared."""
    compared = 0
    for _ in range(queries):
        partition = rng.choice(list(SIZES))
        vec = [rng.gauss(0, 1) for _ in range(dim)]
        top_k = rng.choice((1, 5, 10, 50))
        f: dict[str, Any] = {}
        if rng.random() < 0.4:
            f["importance"] = rng.choice(IMPORTANCE)
        if rng.random() < 0.5:
            f["origins"] = _origins(rng)
        view = view_of(partition, f.get("origins"))
        importance = f.get("importance")
        ours = await store.query_vector(view, vec, top_k=top_k, importance=importance)
        assert partition in store.index, "answered by the index"
        raw = await _raw(store, partition, vec, top_k, **f)
        assert all(r.partition == partition for r in ours)
        if [r.id for r in ours] == [i for i, _ in raw]:
            for r, (_, d) in zip(ours, raw, strict=True):
                assert r.distance == pytest.approx(d, rel=1e-6, abs=1e-4)  # float32 sums
            compared += 1
        elif [r.distance for r in ours] == pytest.approx([d for _, d in raw], abs=1e-4):
            _same_up_to_ties(ours, raw)  # rows with one vector (updated to one text)
            compared += 1
        else:
            # Chroma's filtered HNSW search is approximate (seen at top_k 50 in partitions
            # of a few hundred): ours must be the exact answer, closer rank by rank.
            assert [r.id for r in ours] == await _exact(store, partition, vec, top_k, **f)
            assert len(raw) <= len(ours)  # HNSW may even return fewer than top_k
            for r, (_, d) in zip(ours, raw, strict=False):
                assert r.distance is not None and r.distance <= d * (1 + 1e-6) + 1e-4
            APPROXIMATE[0] += 1
    return compared


def _origins(rng: random.Random) -> Any:
    """A random origin filter: any group, or one group (also one without memories)."""
    choice = rng.choice(("any", "group:1", "group:2", "group:9", "group:7", "group:404"))
    return P.OriginFilter.ANY_GROUP if choice == "any" else P.OriginFilter.only(choice)


APPROXIMATE = [0]
"""Queries where Chroma's own answer was approximate (HNSW) and ours exact."""


async def _exact(store: Any, partition: str, vec: list[float], top_k: int, **f: Any) -> list[str]:
    """Brute force in float64 over the partition read back from Chroma."""
    col = await store.collection()
    where = P.where_partition(partition, **f)
    res = await store.connection.run(col.get, where=where, include=["embeddings"])
    dist = ((np.asarray(res["embeddings"], dtype=np.float64) - np.asarray(vec)) ** 2).sum(axis=1)
    order = sorted(range(len(res["ids"])), key=lambda i: (dist[i], res["ids"][i]))
    return [res["ids"][i] for i in order[:top_k]]


def _same_up_to_ties(ours: list[Any], raw: list[tuple[str, float]]) -> None:
    """Same distances rank by rank; ids equal as sets within a group of exact ties
    (but the last group: ``top_k`` may cut a tie, and Chroma keeps any of its rows)."""
    assert [r.distance for r in ours] == pytest.approx([d for _, d in raw], abs=1e-4)
    groups: dict[float, tuple[set[str], set[str]]] = {}
    for r, (i, d) in zip(ours, raw, strict=True):
        key = round(d, 3)
        groups.setdefault(key, (set(), set()))
        groups[key][0].add(r.id)
        groups[key][1].add(i)
    assert all(a == b for a, b in list(groups.values())[:-1])


async def test_index_equals_chroma_with_writes(store: Any) -> None:
    rng = random.Random(16)
    dim = await _dim(store)
    await _seed(store, SIZES, dim, rng)
    APPROXIMATE[0] = 0
    assert await _check(store, rng, dim, 60) + APPROXIMATE[0] == 60
    loads = store.index.loads
    # Writes through the store keep the cached partitions in step (no reload).
    for k in range(6):
        await store.add(
            new_memory("p_mid", "user", f"新记忆 {k}", importance="high", origin="group:9")
        )
    mids = [r.id for r in await store.list(view_of("p_mid"), limit=20)]
    for memory_id in mids[:4]:
        await store.update("p_mid", memory_id, content="改过的内容", importance="low")
    for memory_id in mids[4:7]:
        await store.update("p_mid", memory_id, tags=["仅标签"], importance="high")
    # Origins change too: to a group no row had, and to private.
    await store.update("p_mid", mids[12], tags=["换了来源"], origin="group:7")
    await store.update("p_mid", mids[13], tags=["换了来源"], origin="private")
    for memory_id in mids[7:12]:
        assert await store.delete("p_mid", memory_id)
    assert "p_mid" in store.index
    # Queries at the written vectors (exact hits) and random ones.
    probe = (await store.embedder.embed(["改过的内容"]))[0]
    ours = await store.query_vector(view_of("p_mid"), probe, top_k=10)
    raw = await _raw(store, "p_mid", probe, 10)
    # Four memories now share one vector: an exact tie, which the index orders by id.
    assert [r.distance for r in ours[:4]] == pytest.approx([0.0] * 4, abs=1e-4)
    assert [r.id for r in ours[:4]] == sorted(r.id for r in ours[:4])
    _same_up_to_ties(ours, raw)
    before = APPROXIMATE[0]
    assert await _check(store, rng, dim, 40) + APPROXIMATE[0] - before == 40
    assert APPROXIMATE[0] <= 15  # nearly every query: the very same ids in the same order
    assert store.index.loads == loads
    assert store.index.nbytes <= store.index.max_bytes


async def test_byte_budget_evicts_least_recently_used(store: Any) -> None:
    rng = random.Random(3)
    dim = await _dim(store)
    sizes = {"a": 100, "b": 100, "c": 100}
    await _seed(store, sizes, dim, rng)
    q = [0.0] * dim
    await store.query_vector(view_of("a"), q)
    one = store.index.nbytes
    store.index.max_bytes = int(one * 2.5)  # room for two partitions
    await store.query_vector(view_of("b"), q)
    await store.query_vector(view_of("a"), q)  # a is now the most recently used
    await store.query_vector(view_of("c"), q)
    assert "a" in store.index and "c" in store.index and "b" not in store.index
    assert store.index.nbytes <= store.index.max_bytes
    loads = store.index.loads
    await store.query_vector(view_of("b"), q)
    assert store.index.loads == loads + 1 and "a" not in store.index
    # A partition larger than the whole budget is not cached: Chroma answers.
    store.index.max_bytes = one // 2
    hits = await store.query_vector(view_of("a"), q, top_k=3)
    assert [h.id for h in hits] == [i for i, _ in await _raw(store, "a", q, 3)]
    assert "a" not in store.index and store.index.nbytes <= store.index.max_bytes
    # ... and is not read again on every search (a useless full read), until rechecked.
    loads = store.index.loads
    for _ in range(3):
        hits = await store.query_vector(view_of("a"), q, top_k=3)
        assert [h.id for h in hits] == [i for i, _ in await _raw(store, "a", q, 3)]
    assert store.index.loads == loads
    now = [store.index.clock() + P.OVERSIZED_RECHECK + 1]
    store.index.clock = lambda: now[0]
    await store.query_vector(view_of("a"), q, top_k=3)
    assert store.index.loads == loads + 1
    # An empty partition is cached too, and counts into the budget (no unbounded growth).
    store.index.max_bytes = 1 << 30
    assert await store.query_vector(view_of("nobody"), q) == []
    before = store.index.nbytes
    assert "nobody" in store.index and before > 0
    await store.query_vector(view_of("nobody-2"), q)
    assert store.index.nbytes > before
    # 0 disables the index.
    store.index.max_bytes = 0
    store.index.clear()
    await store.query_vector(view_of("a"), q)
    assert len(store.index) == 0


async def test_error_drops_entry_and_falls_back(store: Any, logs: list[str]) -> None:
    rng = random.Random(5)
    dim = await _dim(store)
    await _seed(store, {"a": 50}, dim, rng)
    q = [rng.gauss(0, 1) for _ in range(dim)]
    await store.query_vector(view_of("a"), q)
    # Corrupt the cached rows (a fault inside the index): the next search fails in
    # the scan, the entry is dropped and Chroma answers.
    # Rows pointing outside the stored vectors: the scan fails.
    store.index.replace("a", lambda e: dataclasses.replace(e, phys=e.phys + 10**6))
    STATS.faults_injected += 1
    hits = await store.query_vector(view_of("a"), q, top_k=5)
    assert [h.id for h in hits] == [i for i, _ in await _raw(store, "a", q, 5)]
    assert "a" not in store.index
    assert any("分区向量索引出错" in line for line in logs)
    # A later search rebuilds it.
    await store.query_vector(view_of("a"), q)
    assert "a" in store.index
    # A query vector of another dimension is left to Chroma (which reports it).
    with pytest.raises(P.VectorStoreError):
        await store.query_vector(view_of("a"), [0.0] * (dim + 1))


async def test_invalidate_and_reconnect_drop_everything(store: Any) -> None:
    rng = random.Random(7)
    dim = await _dim(store)
    await _seed(store, {"a": 20, "b": 20}, dim, rng)
    q = [0.0] * dim
    await store.query_vector(view_of("a"), q)
    await store.query_vector(view_of("b"), q)
    assert len(store.index) == 2
    store.invalidate()
    assert len(store.index) == 0 and store.index.nbytes == 0
    await store.query_vector(view_of("a"), q)
    await store.query_vector(view_of("b"), q)
    # A reconnect (a remap closes the client): every entry is stale.
    store.connection.close()
    await store.query_vector(view_of("a"), q)
    assert "b" not in store.index and "a" in store.index
    # Key migration moves memories between partitions: all dropped.
    memory_id = (await store.list(view_of("a"), limit=1))[0].id
    await store.rewrite_keys({memory_id: "b"})
    assert len(store.index) == 0
    hits = await store.query_vector(view_of("b"), q, top_k=50)
    assert memory_id in [h.id for h in hits]


async def test_remote_write_of_another_store_seen_after_ttl(
    embed_server: Any, chroma_server: Any, tmp_path: Any
) -> None:
    env = env_for("remote", chroma_server)
    name = f"test-{uuid.uuid4().hex[:12]}"
    stores = []
    for k in range(2):
        conn = P.ChromaConnection(env, tmp_path / f"c{k}")
        stores.append(P.MemoryStore(conn, P.EmbeddingClient.from_env(env), name=name))
    mine, other = stores
    now = [1000.0]
    mine.index.clock = lambda: now[0]
    assert mine.index.ttl is not None
    try:
        await mine.add(new_memory("a", "user", "第一条记忆"))
        probe = (await mine.embedder.embed(["另一个进程写的"]))[0]
        assert [h.content for h in await mine.query_vector(view_of("a"), probe, top_k=5)] == [
            "第一条记忆"
        ]
        await other.add(new_memory("a", "user", "另一个进程写的"))
        now[0] += mine.index.ttl / 2  # still trusted: the cached answer
        assert [h.content for h in await mine.query_vector(view_of("a"), probe, top_k=5)] == [
            "第一条记忆"
        ]
        now[0] += mine.index.ttl  # expired: reloaded from Chroma
        hits = await mine.query_vector(view_of("a"), probe, top_k=5)
        assert [h.content for h in hits] == ["另一个进程写的", "第一条记忆"]
    finally:
        await mine.connection.delete_collection(name)
        for s in stores:
            await s.embedder.close()
            s.connection.close()


def test_budget_config_key() -> None:
    from amrita_plugin_memory.core.config import ConfigFile, render_config_toml

    assert ConfigFile().vector_index_max_mb == 256
    assert ConfigFile(vector_index_max_mb=0).vector_index_max_mb == 0
    with pytest.raises(ValueError):
        ConfigFile(vector_index_max_mb=-1)
    assert "vector_index_max_mb = 256" in render_config_toml()


async def test_writes_racing_a_load_are_not_lost(store: Any) -> None:
    rng = random.Random(11)
    dim = await _dim(store)
    await _seed(store, {"a": 400}, dim, rng)
    q = [rng.gauss(0, 1) for _ in range(dim)]
    texts = [f"并发写入 {k}" for k in range(8)]
    results = await asyncio.gather(
        store.query_vector(view_of("a"), q),
        *(store.add(new_memory("a", "user", t)) for t in texts),
        store.query_vector(view_of("a"), q),
    )
    added = {r.id for r in results[1:-1]}
    assert "a" in store.index
    for text in texts:
        probe = (await store.embedder.embed([text]))[0]
        hits = await store.query_vector(view_of("a"), probe, top_k=1)
        assert hits[0].id in added and hits[0].content == text
        assert hits[0].id == (await _raw(store, "a", probe, 1))[0][0]


async def test_cosine_collection_is_left_to_chroma(store: Any) -> None:
    client = await store.connection.client()
    await store.connection.run(
        client.create_collection,
        store.name,
        configuration={"hnsw": {"space": "cosine"}},
        embedding_function=None,
    )
    for text in ("喜欢猫", "住在上海", "明天出差"):
        await store.add(new_memory("a", "user", text))
    probe = (await store.embedder.embed(["喜欢猫"]))[0]
    hits = await store.query_vector(view_of("a"), probe, top_k=3)
    assert [h.id for h in hits] == [i for i, _ in await _raw(store, "a", probe, 3)]
    assert hits[0].content == "喜欢猫" and len(store.index) == 0


def _rows_by_id(entry: Any) -> dict[str, tuple[str | None, dict[str, Any], list[float]]]:
    vectors = np.asarray(entry.vectors)
    return {
        i: (entry.documents[r], dict(entry.metadatas[r]), vectors[r].tolist())
        for r, i in enumerate(entry.ids)
    }


async def test_writes_are_cheap_and_never_change_a_snapshot(store: Any) -> None:
    """Writes reuse the partition's vector storage (no copy of every row per write) yet an
    entry a reader holds never changes; after many writes the cache equals a fresh read."""
    rng = random.Random(13)
    dim = await _dim(store)
    await _seed(store, {"a": 300}, dim, rng)
    q = [rng.gauss(0, 1) for _ in range(dim)]
    await store.query_vector(view_of("a"), q)
    held = await store.index.snapshot(store, "a")
    assert held is not None
    frozen = _rows_by_id(held)
    # The first add makes room; the next ones write into that room, no copy.
    await store.add(new_memory("a", "user", "第一条新记忆"))
    grown = store.index.peek("a")
    await store.add(new_memory("a", "user", "第二条新记忆"))
    assert store.index.peek("a").arena is grown.arena
    ids = [r.id for r in await store.list(view_of("a"), limit=40)]
    for k, memory_id in enumerate(ids[:10]):
        await store.update("a", memory_id, content=f"改写 {k}", importance="high")
    for memory_id in ids[10:15]:
        await store.update("a", memory_id, tags=["只改标签"])
    for memory_id in ids[15:40]:
        assert await store.delete("a", memory_id)
    for k in range(40):
        await store.add(new_memory("a", "user", f"更多新记忆 {k}", importance="low"))
    assert store.index.loads == 1  # kept in step, never reloaded
    # The snapshot held by a reader is exactly what it was.
    assert _rows_by_id(held) == frozen
    hits = await asyncio.to_thread(
        P.scan, held, np.asarray(q, dtype=np.float32), 5, None, P.OriginFilter.ALL
    )
    assert [held.ids[r] for r, _ in hits] == await _exact_rows(held, q, 5)
    assert all(held.vector(r).tolist() == frozen[i][2] for r, i in enumerate(held.ids))
    # The cached entry equals the partition read again from Chroma.
    cached = store.index.peek("a")
    store.index.clear()
    fresh = await store.index.snapshot(store, "a")
    assert fresh is not None and store.index.loads == 2
    mine, theirs = _rows_by_id(cached), _rows_by_id(fresh)
    assert mine.keys() == theirs.keys() and len(mine) == 300 + 2 + 40 - 25
    for memory_id, (doc, meta, vec) in mine.items():
        assert (doc, meta) == theirs[memory_id][:2]
        assert vec == pytest.approx(theirs[memory_id][2], abs=1e-6)
    assert store.index.nbytes <= store.index.max_bytes
    for _ in range(10):
        probe = [rng.gauss(0, 1) for _ in range(dim)]
        ours = [r.id for r in await store.query_vector(view_of("a"), probe, top_k=10)]
        assert ours == await _exact(store, "a", probe, 10)


async def _exact_rows(entry: Any, vec: list[float], top_k: int) -> list[str]:
    vectors = np.asarray(entry.vectors, dtype=np.float64)
    dist = ((vectors - np.asarray(vec)) ** 2).sum(axis=1)
    order = sorted(range(len(entry.ids)), key=lambda i: (dist[i], entry.ids[i]))
    return [entry.ids[i] for i in order[:top_k]]
