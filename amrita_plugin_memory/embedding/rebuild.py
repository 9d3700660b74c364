"""Re-embedding one collection into its temporary ``X__reembed`` (step 3 of :mod:`.remap`).

A remap and a restore both build their temporaries here, from the live
collection or from a backup's rows (a :class:`Plan`): items are read page by
page, embedded in batches and added to Chroma in larger chunks, the next chunk
being embedded while the current one is added, so that the embedding service
and Chroma work at the same time.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nonebot.log import logger

from ..core.records import without_pending
from ..storage.memory_store import Item
from .errors import RemapError
from .fingerprint import FingerprintInfo
from .maintenance import (
    META_REEMBED_COMPLETE,
    META_REEMBED_SOURCE,
    META_REEMBED_TARGET,
    Covered,
    Maintenance,
    count_of,
    drop_collection,
    user_meta,
)

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = [
    "ADD_BATCH_LOCAL",
    "ADD_BATCH_REMOTE",
    "DISPATCH_YIELDS",
    "Plan",
    "ProgressCallback",
    "build_temp",
    "list_pages",
]

ProgressCallback = Callable[[int, int], None]
"""Called with (items done, items in all) after every add."""


async def list_pages(items: Sequence[Item], page_size: int) -> AsyncIterator[list[Item]]:
    """A backup's rows in pages, as :func:`~..storage.memory_store.iter_pages` reads a collection."""
    for start in range(0, len(items), page_size):
        yield list(items[start : start + page_size])


@dataclass(slots=True)
class Plan:
    """One covered collection to re-embed: where its rows come from and what it holds."""

    cov: Covered
    expected: int
    metadata: dict[str, Any]
    space: str | None
    pages: Callable[[], AsyncIterator[list[Item]]]
    live: Collection | None = None


ADD_BATCH_LOCAL = 256
"""Items per Chroma add while re-embedding, embedded ChromaDB.

Chroma adds far fewer items per second in batches of 64 than of 256 (about
1,400 vs 2,100 here), so embedded batches are gathered into larger adds. The
embedded ChromaDB holds the GIL during an add, so the bot's event loop stalls
for its duration: 256 keeps that near 100 ms.
"""

ADD_BATCH_REMOTE = 512
"""Items per Chroma add while re-embedding, remote ChromaDB.

An HTTP call, so the event loop runs during the request; but the client
serialises the request holding the GIL, and 1,024 items raised the loop's
worst stall to about 50 ms, while 512 kept it near 30 ms at 1,200 items/s.
"""

DISPATCH_YIELDS = 10
"""Event-loop turns granted to the next embedding request before an add starts."""


async def _let_request_leave() -> None:
    """Let the next embedding request reach its socket before a Chroma add starts.

    The embedded ChromaDB holds the GIL for a whole add: a request still inside
    this process when the add starts waits for it, and the pipeline overlaps
    nothing. A few loop turns are enough for aiohttp to write the request; the
    embedding service then works while the add runs.
    """
    for _ in range(DISPATCH_YIELDS):
        await asyncio.sleep(0)


async def _settle(pending: asyncio.Future[Any]) -> None:
    """Cancel ``pending`` if needed and wait for it; its failure never hides ours.

    The pending embedding's own error or cancellation is swallowed (the
    failure that matters is the one that stopped the pipeline), but a
    cancellation of the task running this code is re-raised, never eaten.
    """
    if not pending.done():
        pending.cancel()
    try:
        await pending
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
    except Exception:
        pass


async def build_temp(
    maint: Maintenance,
    plan: Plan,
    target: FingerprintInfo,
    done: list[int],
    total: int,
    progress: ProgressCallback | None,
) -> Collection:
    """Build ``plan.cov.temp``, marked incomplete, with every row of ``plan`` embedded anew.

    ``done[0]`` counts the items added over all collections (of ``total``).
    From a backup (no live collection) the count is checked at the end.
    """
    conn = maint.connection
    await drop_collection(conn, plan.cov.temp)
    meta: dict[str, Any] = {
        **user_meta(plan.metadata),
        META_REEMBED_COMPLETE: False,
        META_REEMBED_SOURCE: plan.cov.name,
        META_REEMBED_TARGET: target.to_json(),
    }
    if plan.space:
        meta["hnsw:space"] = plan.space
    temp = await conn.create_collection(plan.cov.temp, meta)
    batch_size = maint.env.reembed_batch_size
    add_size = max(batch_size, ADD_BATCH_REMOTE if conn.mode == "remote" else ADD_BATCH_LOCAL)

    async def chunks() -> AsyncGenerator[tuple[list[Item], list[list[float]]], None]:
        """Embedded items in chunks of about ``add_size`` (embedding calls of ``batch_size``)."""
        items: list[Item] = []
        vectors: list[list[float]] = []
        async for page in plan.pages():
            for start in range(0, len(page), batch_size):
                batch = page[start : start + batch_size]
                vectors += await maint.embedder.embed([item.document or "" for item in batch])
                items += batch
                if len(items) >= add_size:
                    yield items, vectors
                    items, vectors = [], []
        if items:
            yield items, vectors

    source = chunks()

    # A one-chunk pipeline: chunk k+1 is read and embedded while chunk k is
    # added to Chroma, so the two services work at the same time; at most two
    # chunks are in memory. Each step starts only after the previous one is
    # done, so the source generator is never entered twice at once.
    pending = asyncio.ensure_future(anext(source, None))
    try:
        while (current := await pending) is not None:
            pending = asyncio.ensure_future(anext(source, None))
            await _let_request_leave()
            batch, vectors = current
            await conn.run(
                functools.partial(
                    temp.add,
                    ids=[item.id for item in batch],
                    documents=[item.document for item in batch],  # type: ignore[arg-type]
                    embeddings=vectors,  # type: ignore[arg-type]
                    metadatas=[without_pending(item.metadata or {}) or None for item in batch],  # type: ignore[arg-type]
                )
            )
            done[0] += len(batch)
            line = f"[Memory] 重映射进度 {done[0]}/{total}（{plan.cov.name}）"
            if progress is None:
                logger.info(line)
            else:  # a progress bar shows it already (CLI)
                logger.debug(line)
                progress(done[0], total)
    finally:
        await _settle(pending)
        await source.aclose()
    if plan.live is None:  # from a file: nothing else writes to it
        got = await count_of(conn, temp)
        if got != plan.expected:
            raise RemapError(
                f"集合 {plan.cov.name} 重映射后条数不符（应为 {plan.expected}，实际 {got}）"
            )
    return temp
