"""Prototypes of the fixes the analysis proposes, measured next to the real code.

These are NOT the plugin's code: they live here only so that the benchmark
can show what a proposed change to ``vector.py`` / ``embedding.py`` would
buy, on the same data in the same run. The real change belongs to the owners
of those files (see the notes printed under the table).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

    from amrita_plugin_memory.runtime import MemoryRuntime
    from amrita_plugin_memory.vector import MemoryStore


def proposed_store(base: MemoryStore) -> MemoryStore:
    """A ``MemoryStore`` with the two proposed changes, on ``base``'s collection.

    1. By-id reads without the ``where`` filter: ``get(ids=[id])`` and a
       partition check on the returned metadata (same semantics: an id of
       another partition is "not there"); ``delete`` then needs no ``where``.
    2. A per-partition count kept in memory for the limit check, loaded once
       with the exact count and maintained by add/delete. (Prototype only: the
       real change must update it under the partition lock, see the notes.)
    """
    from amrita_plugin_memory.vector import MemoryRecord, MemoryStore

    class ProposedStore(MemoryStore):
        def __init__(self) -> None:
            super().__init__(base.connection, base.embedder, base.name)
            self._counts: dict[str, int] = {}

        async def get(self, partition: str, memory_id: str) -> MemoryRecord | None:
            res = await self._run(
                lambda c: c.get(ids=[memory_id], include=["documents", "metadatas"])
            )
            if not res["ids"]:
                return None
            meta = (res.get("metadatas") or [None])[0]
            if meta is None or meta.get("user_id") != partition:
                return None
            docs = res.get("documents") or [None]
            return MemoryRecord.from_chroma(res["ids"][0], docs[0], meta)

        async def delete(self, partition: str, memory_id: str) -> bool:
            async with self.locks.hold(partition):
                if await self.get(partition, memory_id) is None:
                    return False
                await self._run(lambda c: c.delete(ids=[memory_id]))
                if partition in self._counts:
                    self._counts[partition] -= 1
            return True

        async def count(self, partition: str | None = None) -> int:
            if partition is None:
                return await super().count()
            if partition not in self._counts:
                self._counts[partition] = await super().count(partition)
            return self._counts[partition]

        async def add(
            self,
            partition: str,
            scope: str,
            content: str,
            *,
            tags: Sequence[str] = (),
            importance: str = "medium",
            limit: int | None = None,
        ) -> MemoryRecord:
            record = await super().add(
                partition, scope, content, tags=tags, importance=importance, limit=limit
            )
            if partition in self._counts:
                self._counts[partition] += 1
            return record

    return ProposedStore()


async def proposed_rebuild(
    rt: MemoryRuntime,
    source: Collection,
    target_name: str,
    *,
    read_page: int = 1024,
    pipeline: bool = True,
    dispatch_yields: int = 0,
) -> tuple[int, float, dict[str, float]]:
    """The proposed re-embedding loop, into a scratch collection (no backup, no swap).

    * keyset paging: the id list is read once, pages are fetched by id
      (``get(ids=...)``) instead of ``get(limit, offset)``, whose cost grows
      with the offset;
    * read pages of ``read_page`` items, embedded in batches of
      REEMBED_BATCH_SIZE;
    * a one-batch pipeline: the next batch is read and embedded while the
      current one is added to Chroma (two batches in memory at most);
    * ``dispatch_yields``: yield to the event loop a few times before each add,
      so the next embedding request has left the process before the add starts
      (the embedded Chroma holds the GIL during an add: nothing else in the
      process runs until it returns, but the embedding service does).

    Returns ``(items, seconds, phase seconds)``.
    """
    conn = rt.connection
    batch = rt.config.env.reembed_batch_size
    phases: dict[str, float] = {}

    async def clocked(phase: str, coro: Any) -> Any:
        started = time.perf_counter()
        try:
            return await coro
        finally:
            phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - started

    started = time.perf_counter()
    client = await conn.client()
    if target_name in await conn.list_collections():
        await conn.delete_collection(target_name)
    target = await conn.run(
        functools.partial(client.create_collection, target_name, embedding_function=None)
    )
    ids: list[str] = (
        await clocked("read id list", conn.run(functools.partial(source.get, include=[])))
    )["ids"]

    async def batches() -> AsyncIterator[tuple[Any, Any, Any]]:
        for start in range(0, len(ids), read_page):
            chunk = ids[start : start + read_page]
            res = await clocked(
                "read pages by id",
                conn.run(
                    functools.partial(source.get, ids=chunk, include=["documents", "metadatas"])
                ),
            )
            if len(res["ids"]) != len(chunk):
                raise RuntimeError("source changed during the rebuild")
            docs, metas = res["documents"], res["metadatas"]
            for s in range(0, len(chunk), batch):
                yield res["ids"][s : s + batch], docs[s : s + batch], metas[s : s + batch]

    async def embedded(item: tuple[Any, Any, Any]) -> tuple[Any, Any, Any, list[list[float]]]:
        page_ids, docs, metas = item
        vectors = await clocked("embedding", rt.embedder.embed([d or "" for d in docs]))
        return page_ids, docs, metas, vectors

    it = batches().__aiter__()
    done = 0

    async def next_embedded() -> tuple[Any, Any, Any, list[list[float]]] | None:
        try:
            item = await it.__anext__()
        except StopAsyncIteration:
            return None
        return await embedded(item)

    pending: asyncio.Task[Any] = asyncio.create_task(next_embedded())
    while (current := await pending) is not None:
        if pipeline:
            pending = asyncio.create_task(next_embedded())  # overlaps with the add below
            for _ in range(dispatch_yields):
                await asyncio.sleep(0)  # let the next request leave before the add
        page_ids, docs, metas, vectors = current
        await clocked(
            "Chroma add",
            conn.run(
                functools.partial(
                    target.add, ids=page_ids, documents=docs, embeddings=vectors, metadatas=metas
                )
            ),
        )
        done += len(page_ids)
        if not pipeline:
            pending = asyncio.create_task(next_embedded())
    seconds = time.perf_counter() - started
    await conn.delete_collection(target_name)
    return done, seconds, phases
