"""Memories in the console: partitions, the paged table, search, edit and delete.

The table never loads a whole partition: a page is a slice of the
partition's cached id list and one read by id (:mod:`..upkeep.listing`). A
search is one query of at most :data:`.params.SEARCH_MAX` results. Edits go
through :class:`~..storage.memory_store.MemoryStore` like the tools' (same
partition lock, same limits, same write gate during maintenance). Each
operation works in the operator's :class:`~..storage.scope.Scope` of its
partition (``Scope.of_operator``: every origin, every right; both kinds name
that one partition, so the console asks for ``user``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.records import MemoryRecord
from ..storage.memory_store import MemoryStore
from ..storage.scope import Scope
from ..upkeep.listing import locate, newest_page, partition_ids
from . import params
from .catalog import PartitionCatalog
from .errors import audit, guarded, not_found

__all__ = ["MemoryAdmin", "record_json"]


def record_json(record: MemoryRecord) -> dict[str, Any]:
    return record.to_json()


class MemoryAdmin:
    """The memory operations of the console."""

    def __init__(self, store: MemoryStore, catalog: PartitionCatalog) -> None:
        self.store = store
        self.catalog = catalog

    async def partitions(self, query: Mapping[str, Any]) -> dict[str, Any]:
        """Every partition (largest first), paged; ``fresh=1`` rescans now."""
        offset, limit = params.page(query, default_limit=50)
        fresh = str(query.get("fresh", "")).strip().lower() in ("1", "true", "yes")
        catalog = await guarded("partitions", lambda: self.catalog.get(fresh=fresh))
        rows = sorted(catalog.partitions.values(), key=lambda p: (-p.count, p.key))
        return {
            "total": len(rows),
            "memories": catalog.total,
            "offset": offset,
            "limit": limit,
            "scan_seconds": round(catalog.seconds, 3),
            "partitions": [p.to_json() for p in rows[offset : offset + limit]],
        }

    async def list(self, query: Mapping[str, Any]) -> dict[str, Any]:
        """A page of a partition, newest first, or a semantic search in it (``q``); only the
        memories of ``since`` … ``until`` (the owner's dates) when either is given."""
        partition = params.partition_key(query.get("partition"))
        q = params.search_query(query.get("q"))
        offset, limit = params.page(query)
        window = params.window(query, self.store.calendar.zone)
        scope = Scope.of_operator(partition)

        async def run() -> dict[str, Any]:
            if not await partition_ids(self.store, partition):
                not_found(f"分区 {partition} 不存在（没有任何记忆）")
            if q is None and window is not None:
                dated = await self.store.list(scope.view("user"), limit=10**9, window=window)
                dated.reverse()  # newest first, like the plain listing
                records, total = dated[offset : offset + limit], len(dated)
                mode = "list"
            elif q is None:
                records, total = await newest_page(
                    self.store, partition, offset=offset, limit=limit
                )
                mode = "list"
            else:
                depth = min(offset + limit, params.SEARCH_MAX)
                hits = (
                    await self.store.query(scope.view("user"), q, top_k=depth, window=window)
                    if offset < depth
                    else []
                )
                records, total = hits[offset:depth], len(hits)
                mode = "search"
            return {
                "partition": partition,
                "mode": mode,
                "total": total,
                "offset": offset,
                "limit": limit,
                "memories": [record_json(r) for r in records],
            }

        return await guarded("console_list", run)

    async def _owner(self, memory_id: str, partition: Any) -> str:
        """The partition of ``memory_id``: the given one (checked by the store) or its own."""
        if partition is not None and str(partition).strip():
            return params.partition_key(partition)
        found = await locate(self.store, memory_id)
        if found is None:
            not_found(f"记忆 {memory_id} 不存在")
        return found.partition

    async def update(
        self, actor: str, memory_id: Any, partition: Any, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        mid = params.memory_id(memory_id)
        changes = params.memory_changes(body)

        async def run() -> dict[str, Any]:
            owner = await self._owner(mid, partition)
            record = await self.store.update(
                await Scope.of_operator(owner).require("update", "user"),
                mid,
                content=changes.content,
                tags=changes.tags,
                importance=changes.importance,
            )
            if record is None:
                not_found(f"记忆 {mid} 不存在（或不属于分区 {owner}）")
            self.catalog.invalidate()
            audit(actor, "修改记忆", partition=owner, id=mid, fields=changes.fields)
            return {"memory": record_json(record)}

        return await guarded("console_update_memory", run)

    async def delete(self, actor: str, memory_id: Any, partition: Any) -> dict[str, Any]:
        mid = params.memory_id(memory_id)

        async def run() -> dict[str, Any]:
            owner = await self._owner(mid, partition)
            if not await self.store.delete(
                await Scope.of_operator(owner).require("delete", "user"), mid
            ):
                not_found(f"记忆 {mid} 不存在（或不属于分区 {owner}）")
            self.catalog.invalidate()
            audit(actor, "删除记忆", partition=owner, id=mid)
            return {"deleted": mid, "partition": owner}

        return await guarded("console_delete_memory", run)
