"""The archive in the console: list archived memories, restore one, run a sweep.

The operations of ``ambot memory archive`` and of the page's 归档 view. The
work is the storage layer's (:mod:`..storage.archive.store`,
:mod:`..upkeep.archive.restore`, :mod:`..upkeep.archive.sweep`); the answers carry
both the rows (for the page) and the very lines ``ambot memory archive``
prints when it does the work itself (:mod:`..upkeep.archive.view`), so the
command's output is the same whether or not the bot is running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ..core.calendar import OwnerCalendar
from ..core.config import ConfigFile
from ..core.errors import ErrorKind
from ..storage.archive.store import ArchivedMemory
from ..storage.episodes.store import EpisodeStore
from ..storage.memory_store import MemoryStore, operator_view
from ..tools.args import parse_int
from ..upkeep.archive.restore import ArchiveRestoreError, restore
from ..upkeep.archive.sweep import sweep
from ..upkeep.archive.view import REASON_TEXT, listing_lines, sweep_message
from . import params
from .catalog import PartitionCatalog
from .errors import ConsoleError, audit, conflict, guarded
from .memories import record_json

__all__ = ["LIST_MAX", "ArchiveAdmin", "row_json"]

LIST_MAX = 10_000
"""Most rows of one listing (``ambot memory archive list -n`` allows as many)."""


def row_json(row: ArchivedMemory, versions: int | None = None) -> dict[str, Any]:
    """One archive row for the page: the memory as it was, why and when it was archived."""
    out = record_json(row.record)
    out.update(
        id=row.id,
        memory_id=row.memory_id,
        is_version=row.is_version,
        reason=row.reason,
        reason_text=REASON_TEXT.get(row.reason, row.reason),
        archived_at=row.archived_at,
    )
    if versions is not None:
        out["versions"] = versions
    return out


class ArchiveAdmin:
    """The archive operations of the console (one store, the plugin's config)."""

    def __init__(
        self,
        store: MemoryStore,
        config: ConfigFile,
        catalog: PartitionCatalog,
        *,
        calendar: OwnerCalendar,
        episodes: EpisodeStore | None = None,
    ) -> None:
        self.store = store
        self.episodes = episodes
        """The conversation episodes the sweep also expires (``None``: memories only)."""
        self.calendar = calendar
        """The owner's calendar: the times in :func:`listing_lines` (the command's output)."""
        self.config = config
        self.catalog = catalog
        self._sweeping = asyncio.Lock()

    async def list(self, query: Mapping[str, Any]) -> dict[str, Any]:
        """Archived rows, newest first: every partition or one (``partition``), or the
        versions of one memory (``memory_id``); ``offset`` / ``limit`` page them."""
        partition = params.optional_partition(query.get("partition"))
        raw_mid = query.get("memory_id")
        memory_id = params.memory_id(raw_mid) if raw_mid not in (None, "") else None
        offset = params.arg(parse_int, query, "offset", low=0, high=params.OFFSET_MAX, default=0)
        limit = params.arg(parse_int, query, "limit", low=1, high=LIST_MAX, default=20)
        archive = self.store.archive

        async def run() -> dict[str, Any]:
            view = None if partition is None else operator_view(partition)
            if memory_id is None:
                total = await (archive.count_all() if view is None else archive.count(view))
                rows = await (
                    archive.list_all(limit=limit, offset=offset)
                    if view is None
                    else archive.list(view, limit=limit, offset=offset)
                )
            else:  # the versions of one memory: a handful of rows
                every = await (
                    archive.list_all(memory_id=memory_id, limit=LIST_MAX)
                    if view is None
                    else archive.list(view, memory_id=memory_id, limit=LIST_MAX)
                )
                total, rows = len(every), every[offset : offset + limit]
            versions = await archive.versions([row.memory_id for row in rows])
            return {
                "partition": partition,
                "memory_id": memory_id,
                "total": total,
                "offset": offset,
                "limit": limit,
                "rows": [row_json(row, versions.get(row.memory_id, 0)) for row in rows],
                "lines": listing_lines(partition, total, rows, self.calendar),
            }

        return await guarded("console_archive_list", run)

    async def restore(self, actor: str, row_id: Any) -> dict[str, Any]:
        """Restore one row (:func:`..upkeep.archive.restore.restore`, the partition limit
        applies): 404 for an id the archive does not hold, 409 when it cannot come back."""
        rid = params.archive_id(row_id)

        async def run() -> dict[str, Any]:
            try:
                done = await restore(self.store, rid, limit=self.config.per_session_memory_limit)
            except ArchiveRestoreError as exc:
                # Held but refused (its memory archived, a forgotten user's): a conflict.
                held = await self.store.archive.ids([rid])
                raise ConsoleError(
                    ErrorKind.CONFLICT if held else ErrorKind.NOT_FOUND, str(exc)
                ) from None
            self.catalog.invalidate()
            audit(actor, "恢复归档", partition=done.record.partition, id=rid)
            return {
                "message": done.describe(),
                "replaced_text": done.replaced_text,
                "row": row_json(done.row),
                "memory": record_json(done.record),
            }

        return await guarded("console_archive_restore", run)

    async def sweep(self, actor: str) -> dict[str, Any]:
        """One sweep now (idempotent; one at a time from the console)."""
        if self._sweeping.locked():
            conflict("归档清理正在进行，请稍后再试")
        file = self.config

        async def run() -> dict[str, Any]:
            async with self._sweeping:
                result = await sweep(
                    self.store,
                    file.lifetime_days,
                    batch_size=file.archive.batch_size,
                    episodes=self.episodes,
                )
            if result.archived:
                self.catalog.invalidate()
            audit(actor, "归档清理", archived=result.archived, partitions=len(result.partitions))
            return {
                "message": sweep_message(result),
                "scanned": result.scanned,
                "archived": result.archived,
                "skipped": result.skipped,
                "batches": result.batches,
                "partitions": len(result.partitions),
                "episodes": result.episodes,
            }

        return await guarded("console_archive_sweep", run)
