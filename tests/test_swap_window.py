"""A call that meets a collection while a remap swaps it: retried or refused, never Chroma's error.

A remap's swap deletes the original and renames the re-embedded copy. The
marker check cannot exclude a call that is already past it (or a read, which
is never refused): such a call may reach the original while Chroma deletes
it, and Chroma answers ``ChromaError: Missing field: [Missing metadata
segment]`` (issue 32), or after, with "does not exist". The proxy of
``tests/servers/chroma_proxy.py`` holds the drop as long as the test needs,
in front of a real ``chroma run``:

* a read is retried on the collection the name has now;
* while the name still answers with the collection being dropped, a read
  and a write are refused with the maintenance message, nothing applied;
* the knowledge base (the L3 loop's writes) is refused the same way;
* a scan (export, forget, key migration) whose handle is stale starts again
  on the new collection, and one that meets the drop half-way is refused.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, cast

import pytest

from tests.botproject import ALICE, make_runtime
from tests.helpers import new_memory, view_of
from tests.lazy import lazy_import
from tests.reliability_stats import STATS
from tests.servers import ChromaProxy, ChromaServer, EmbeddingServer

E = lazy_import("amrita_plugin_memory.core.errors")
T = lazy_import(
    "amrita_plugin_memory.storage.keys",
    "amrita_plugin_memory.tools.memory_tools",
    "amrita_plugin_memory.storage.scope",
)
KB = lazy_import("amrita_plugin_memory.subconscious.knowledge_base")

REFUSED = {"ok": False, "error": "记忆库维护中，请稍后再试（本次操作未执行）"}


def _runtime(tmp_path: Path, proxy: ChromaProxy) -> tuple[Any, str]:
    name = f"swap-{uuid.uuid4().hex[:8]}"
    return make_runtime(tmp_path, mode="remote", chroma=proxy, memory_name=name), name


def _swap(server: ChromaServer, name: str, extra_id: str) -> str:
    """What a remap's swap does (another process, straight to Chroma): the copy gets one
    more row (``extra_id``), the original is deleted, the copy renamed. The old id."""
    with server.client() as client:
        old = client.get_collection(name, embedding_function=None)
        rows = old.get(include=["documents", "metadatas", "embeddings"])
        docs, metas, vectors = rows["documents"], rows["metadatas"], rows["embeddings"]
        assert docs is not None and metas is not None and vectors is not None
        copy = client.create_collection(
            name + "__reembed", metadata=old.metadata, embedding_function=None
        )
        copy.add(
            ids=[*rows["ids"], extra_id],
            documents=[*docs, "换上来的新集合里才有的记忆"],
            embeddings=[[float(x) for x in v] for v in [*vectors, vectors[0]]],
            metadatas=[*metas, metas[0]],
        )
        client.delete_collection(name)
        copy.modify(name=name)
        return str(old.id)


def _drop(proxy: ChromaProxy, name: str) -> None:
    """The swap's delete, sent through the proxy (which holds it)."""
    import chromadb
    from chromadb.api.client import Client
    from chromadb.config import Settings

    client = chromadb.HttpClient(
        host=proxy.host, port=proxy.port, settings=Settings(anonymized_telemetry=False)
    )
    with cast(Client, client):
        client.delete_collection(name)


async def _held_drop(proxy: ChromaProxy, name: str) -> asyncio.Task[None]:
    """Start deleting ``name`` and return once the proxy holds the delete."""
    proxy.hold_drop(name)
    task = asyncio.create_task(asyncio.to_thread(_drop, proxy, name))
    await proxy.wait_held()
    return task


async def _release(proxy: ChromaProxy, task: asyncio.Task[None]) -> None:
    proxy.release_drop()
    await task


async def test_a_read_that_meets_the_dropped_original_is_retried_on_the_new_collection(
    tmp_path: Path,
    embed_server: EmbeddingServer,
    chroma_server: ChromaServer,
    chroma_proxy: ChromaProxy,
) -> None:
    rt, name = _runtime(tmp_path, chroma_proxy)
    try:
        first = await rt.store.add(new_memory(ALICE, "user", "用户喜欢吃草莓蛋糕"))
        assert (await rt.store.get(view_of(ALICE), first.id)) is not None  # the handle is cached
        old_id = await asyncio.to_thread(_swap, chroma_server, name, "after-swap")
        # The reply to the next call left Chroma while it dropped the original.
        chroma_proxy.answer_as_dropped(old_id)
        STATS.faults_injected += 1
        got = await rt.store.get(view_of(ALICE), "after-swap")
        assert got is not None and got.content == "换上来的新集合里才有的记忆"
        assert chroma_proxy.drop_answers == 1
        # And the store goes on with the new collection.
        assert {r.id for r in await rt.store.list(view_of(ALICE))} == {first.id, "after-swap"}
        assert chroma_proxy.drop_answers == 1
    finally:
        await rt.close()


async def test_calls_that_meet_the_drop_in_progress_are_refused_and_nothing_is_applied(
    tmp_path: Path, embed_server: EmbeddingServer, chroma_proxy: ChromaProxy
) -> None:
    rt, name = _runtime(tmp_path, chroma_proxy)
    caller = T.ScopeRules().of_chat(T.target_from_ids(10001))  # partition ALICE
    try:
        first = await rt.store.add(new_memory(ALICE, "user", "用户的猫叫做团子"))
        dropping = await _held_drop(chroma_proxy, name)
        try:
            STATS.faults_injected += 1
            # A write past the marker check (none is set here: the check passed
            # before the remap began) reaches the original while it is deleted.
            with pytest.raises(E.MaintenanceInProgress) as info:
                await rt.store.add(new_memory(ALICE, "user", "迟到的写入"))
            assert not info.value.ambiguous
            # Reads are never refused by the markers; here they meet the drop.
            with pytest.raises(E.MaintenanceInProgress):
                await rt.store.get(view_of(ALICE), first.id)
            # The tools answer with the maintenance message, not Chroma's error.
            assert await rt.tools.write_memory(caller, {"content": "第二条", "tags": ["测试"]}) == REFUSED  # fmt: skip
            assert await rt.tools.delete_memory(caller, {"id": first.id}) == REFUSED
            assert chroma_proxy.drop_answers >= 4
        finally:
            await _release(chroma_proxy, dropping)
        # The original is gone and no remap's copy is there: a clear error, nothing re-created.
        with pytest.raises(E.VectorStoreError, match="不存在"):
            await rt.store.get(view_of(ALICE), first.id)
        assert name not in await rt.connection.list_collections()
    finally:
        await rt.close()


async def test_knowledge_writes_that_meet_the_drop_are_refused(
    tmp_path: Path, embed_server: EmbeddingServer, chroma_proxy: ChromaProxy
) -> None:
    rt, _ = _runtime(tmp_path, chroma_proxy)
    name = f"kb-{uuid.uuid4().hex[:8]}"
    kb = KB.KnowledgeBaseManager(
        root=tmp_path / "l3",
        connection=rt.connection,
        embedder=rt.embedder,
        collection_name=name,
        max_chars=200,
        log=lambda _line: None,
    )
    try:
        entry = await kb.create("猫", "团子", "用户的猫叫做团子")
        assert [hit["kid"] for hit in await kb.search("团子")] == [entry.kid]
        dropping = await _held_drop(chroma_proxy, name)
        try:
            STATS.faults_injected += 1
            with pytest.raises(E.MaintenanceInProgress):
                await kb.update(entry.kid, body="用户的猫改名叫做年糕")
            with pytest.raises(E.MaintenanceInProgress):
                await kb.delete(entry.kid)
            with pytest.raises(E.MaintenanceInProgress):
                await kb.search("团子")
            assert chroma_proxy.drop_answers >= 3
        finally:
            await _release(chroma_proxy, dropping)
    finally:
        await rt.close()


async def test_a_scan_starts_again_on_the_new_collection_and_is_refused_half_way(
    tmp_path: Path,
    embed_server: EmbeddingServer,
    chroma_server: ChromaServer,
    chroma_proxy: ChromaProxy,
) -> None:
    rt, name = _runtime(tmp_path, chroma_proxy)
    try:
        for text in ("第一条记忆", "第二条记忆", "第三条记忆"):
            await rt.store.add(new_memory(ALICE, "user", text))
        assert await rt.store.count(view_of(ALICE)) == 3  # the handle is cached
        await asyncio.to_thread(_swap, chroma_server, name, "after-swap")
        STATS.faults_injected += 1
        # The cached handle is stale (Chroma: "does not exist"): the scan uses the new one.
        seen = [r.id async for page in rt.store.iter_records(view_of(ALICE)) for r in page]
        assert len(seen) == 4 and "after-swap" in seen

        # A scan that meets the drop after its first page never mixes two collections.
        col = await rt.store.collection()
        pages = rt.store.iter_records(view_of(ALICE), page_size=1)
        assert len(await anext(pages)) == 1
        chroma_proxy.answer_as_dropped(col.id)
        with pytest.raises(E.MaintenanceInProgress):
            await anext(pages)
        await pages.aclose()
    finally:
        await rt.close()
