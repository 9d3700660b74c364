"""The background embedding of pending memories (issue #47, ``embedding/pending``).

Real Chroma (embedded, and ``chroma run`` for the shared store), the scripted Ollama
embedding service; the ``PendingEmbedder`` of a real runtime. A memory kept during an
outage gets its vector when the service answers; a store whose first memories were
written during an outage is rebuilt at the right dimension; a changed model stops the
task with the advice to reindex; two processes never embed a memory twice, and a
SIGKILL in the middle of a pass loses nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.botproject import make_runtime
from tests.conftest import EMBED_MODEL
from tests.helpers import new_memory, partition, view_of, write_rules
from tests.servers import EmbeddingServer
from tests.test_coherence import Peer

ALICE = "QQPlatform_Private_10001"
BOB = "QQPlatform_Private_10002"


@pytest.fixture
async def runtimes(embed_server: EmbeddingServer) -> AsyncIterator[Callable[..., Any]]:
    made: list[Any] = []

    def factory(data_dir: Path, **kwargs: Any) -> Any:
        rt = make_runtime(data_dir, **kwargs)
        made.append(rt)
        return rt

    yield factory
    for rt in made:
        await rt.close()


def _back(rt: Any, embed_server: EmbeddingServer) -> None:
    """The service answers again; the breaker's cooldown (seconds) is skipped."""
    embed_server.set_mode("ok")
    rt.store.vectors.breaker.success()


async def _stored_vectors(rt: Any) -> dict[str, tuple[str, list[float]]]:
    res = await rt.store._run(lambda c: c.get(include=["documents", "embeddings"]))
    return {
        i: (d, list(map(float, e)))
        for i, d, e in zip(res["ids"], res["documents"], res["embeddings"], strict=True)
    }


async def _assert_each_embedded_once(rt: Any, expected: int) -> None:
    """Every memory once, with the vector of its own text, none pending."""
    rows = await _stored_vectors(rt)
    assert len(rows) == expected
    assert len({doc for doc, _ in rows.values()}) == expected  # no text stored twice
    docs = [doc for doc, _ in rows.values()]
    truth = await rt.embedder.embed(docs, "document")
    for (doc, got), want in zip(rows.values(), truth, strict=True):
        assert np.allclose(got, want, atol=1e-5), doc
    assert await rt.store.count_pending() == 0


async def test_memories_kept_during_an_outage_get_their_vectors_when_it_ends(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    rt = runtimes(tmp_path)
    older = await rt.store.add(new_memory(ALICE, "user", "用户喜欢吃苹果"))
    embed_server.set_mode("error500")
    kept = [
        (
            await rt.store.write(new_memory(ALICE, "user", f"用户的第{i}个收藏是编号{i}的邮票"))
        ).record
        for i in range(40)  # more than one batch
    ]
    repeat = (await rt.store.write(new_memory(ALICE, "user", "用户喜欢吃苹果"))).record
    assert all(r.pending for r in [*kept, repeat])
    # Still down: a pass changes nothing and says so.
    during = await rt.pending.run_once()
    assert during.unavailable and during.embedded == 0
    assert await rt.store.count_pending() == 41

    _back(rt, embed_server)
    done = await rt.pending.run_once()
    assert (done.embedded, done.merged, done.unavailable) == (40, 1, False)
    assert await rt.store.count_pending() == 0
    # The repeat was merged into the older memory when its vector arrived (and archived).
    assert await rt.store.get(view_of(ALICE), repeat.id) is None
    assert await rt.store.get(view_of(ALICE), older.id) is not None
    # Each is found by meaning now: its own text's vector puts it first.
    for record in kept[:5]:
        vector = (await rt.embedder.embed([record.content], "query"))[0]
        near = await rt.store.query_vector(view_of(ALICE), vector, top_k=1)
        assert near[0].id == record.id
    await _assert_each_embedded_once(rt, 41)
    # Nothing left: another pass is a no-op.
    assert (await rt.pending.run_once()).embedded == 0


async def test_a_store_first_written_during_an_outage_is_rebuilt_at_the_models_dimension(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    rt = runtimes(tmp_path)
    embed_server.set_mode("close")
    first = (await rt.store.write(new_memory(ALICE, "user", "用户在学吉他"))).record
    other = (await rt.store.write(new_memory(BOB, "user", "Bob likes hiking"))).record
    assert first.pending and other.pending
    assert await rt.store.stored_dimension() == 8  # placeholders: no model answered yet
    hits = await rt.store.query(view_of(ALICE), "吉他", top_k=3)
    assert [h.id for h in hits] == [first.id]

    _back(rt, embed_server)
    done = await rt.pending.run_once()
    assert done.rebuilt
    assert await rt.store.stored_dimension() == embed_server.dim_for(EMBED_MODEL)
    assert list(rt.config.backup_dir.glob("*"))  # backed up first
    await _assert_each_embedded_once(rt, 2)
    vector = (await rt.embedder.embed(["Bob likes hiking"], "query"))[0]
    assert [r.id for r in await rt.store.query_vector(view_of(BOB), vector, top_k=1)] == [other.id]
    assert await rt.store.query_vector(view_of(ALICE), vector, top_k=5) != []  # own only
    assert all(r.partition == ALICE for r in await rt.store.query_vector(view_of(ALICE), vector))


async def test_vectors_of_another_dimension_pause_the_task_and_say_reindex(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    rt = runtimes(tmp_path)
    await rt.store.add(new_memory(ALICE, "user", "用户住在上海"))
    embed_server.set_mode("error503")
    kept = (await rt.store.write(new_memory(ALICE, "user", "用户的车牌是沪A12345"))).record
    # Another model behind the same name: vectors of another dimension.
    embed_server.model_dims[EMBED_MODEL] = 768
    _back(rt, embed_server)
    done = await rt.pending.run_once()
    assert "reindex" in done.stopped and done.embedded == 0
    assert await rt.store.count_pending() == 1  # kept, still found by keywords
    hits = await rt.store.query(view_of(ALICE), "沪A12345", top_k=1)
    assert hits[0].id == kept.id


async def test_a_reindex_gives_pending_memories_their_vectors(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    from amrita_plugin_memory.embedding.remap import remap

    rt = runtimes(tmp_path)
    await rt.store.add(new_memory(ALICE, "user", "用户住在上海"))
    embed_server.set_mode("error500")
    await rt.store.write(new_memory(ALICE, "user", "用户养了一只柯基"))
    _back(rt, embed_server)
    await remap(rt.maintenance)
    await _assert_each_embedded_once(rt, 2)


@pytest.fixture
def shared_database() -> str:
    return f"pending_{uuid.uuid4().hex[:8]}"


async def test_two_processes_never_embed_a_memory_twice(
    tmp_path: Path,
    runtimes: Callable[..., Any],
    embed_server: EmbeddingServer,
    chroma_server: Any,
    shared_database: str,
) -> None:
    kw = {"mode": "remote", "chroma": chroma_server, "vector_db_database": shared_database}
    one = runtimes(tmp_path / "one", **kw)
    two = runtimes(tmp_path / "two", **kw)
    await one.store.add(new_memory(ALICE, "user", "用户住在上海"))
    embed_server.set_mode("error500")
    for i in range(50):
        await one.store.write(new_memory(ALICE if i % 2 else BOB, "user", f"第{i}条：暗号{i}"))
    _back(one, embed_server)
    two.store.vectors.breaker.success()
    embed_server.reset()
    a, b = await asyncio.gather(one.pending.run_once(), two.pending.run_once())
    assert a.embedded + b.embedded == 50
    embedded_texts = [t for r in embed_server.embed_requests() for t in r["body"]["input"]]
    assert sorted(embedded_texts) == sorted(f"第{i}条：暗号{i}" for i in range(50))
    await _assert_each_embedded_once(one, 51)


async def test_a_sigkill_while_embedding_loses_nothing_and_embeds_each_once(
    tmp_path: Path,
    runtimes: Callable[..., Any],
    embed_server: EmbeddingServer,
    chroma_server: Any,
    shared_database: str,
) -> None:
    from amrita_plugin_memory.storage.memory_store import MEMORY_COLLECTION

    peer = Peer(chroma_server, shared_database)
    try:
        assert (await peer.read())["ready"]
        env = {"mode": "remote", "chroma": chroma_server, "vector_db_database": shared_database}
        mine = runtimes(tmp_path, memory_name=MEMORY_COLLECTION, **env)
        await mine.store.add(new_memory(ALICE, "user", "用户住在上海"))
        embed_server.set_mode("error500")
        total = 96  # three batches
        for i in range(total):
            await mine.store.write(new_memory(ALICE, "user", f"记录{i}：口令{i * 7}"))
        assert await mine.store.count_pending() == total
        _back(mine, embed_server)
        embed_server.delay = 0.4  # a batch is in flight for a while
        ttl = 3.0
        peer.send(op="embed_pending", ttl=ttl)
        async with asyncio.timeout(60):
            while await mine.store.count_pending() > total - 32:  # noqa: ASYNC110 - another process
                await asyncio.sleep(0.05)
        peer.kill()  # SIGKILL: mid-pass (a batch of the rest in flight)
        await peer.exited()
        left = await mine.store.count_pending()
        assert 0 < left < total
        embed_server.delay = 0.0
        mine.pending.lease_ttl = ttl
        async with asyncio.timeout(60):  # the dead process's lease expires after ≤ ttl
            while (done := await mine.pending.run_once()).busy:  # noqa: ASYNC110 - a lease elsewhere
                await asyncio.sleep(0.2)
        assert done.embedded == left
        await _assert_each_embedded_once(mine, total + 1)
    finally:
        peer.kill()


async def test_export_forget_and_the_partition_limit_cover_pending_memories(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    from amrita_plugin_memory.adapters.group_hooks import current_hooks
    from amrita_plugin_memory.core.errors import MemoryLimitReached

    rt = runtimes(tmp_path)
    user = "16101"
    mine = partition(int(user))
    await rt.store.add(new_memory(mine, "user", "用户住在苏州"))
    embed_server.set_mode("error500")
    kept = (await rt.store.write(new_memory(mine, "user", "用户的护照号是E12345678"))).record
    assert kept.pending
    # The partition limit counts a pending memory like any other.
    with pytest.raises(MemoryLimitReached):
        await rt.store.write(new_memory(mine, "user", "用户会下围棋"), write_rules(limit=2))
    hooks = current_hooks()
    assert hooks is not None
    data = rt.user_data(hooks.awareness.stores)
    exported = await data.export(user)
    pending = [m for m in exported["memories"] if m["content"] == kept.content]
    assert pending and pending[0]["pending"] is True
    counts = await data.forget(user)
    assert counts.memories == 2
    assert await rt.store.count_pending() == 0
    # The service is back: nothing of the forgotten user is embedded or brought back.
    _back(rt, embed_server)
    assert (await rt.pending.run_once()).embedded == 0
    assert await rt.store.count(view_of(mine)) == 0
