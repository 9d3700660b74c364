"""Two memories linked as versions of one fact (the older stays: it answers "before").

Called through ``MemoryStore.link_versions`` only (and by retrieval for a newer version
the ranking did not bring): both rows are read and rewritten in the partition's write
section, so a link never joins memories of two partitions and never half-exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..core.records import MemoryRecord

__all__ = ["VersionStore", "link_versions"]


class VersionStore(Protocol):
    """What linking needs of ``MemoryStore``."""

    index: Any

    def writing(self, *partitions: str, lease: bool = True) -> Any: ...

    async def _get(self, partition: str, memory_id: str) -> MemoryRecord | None: ...

    async def set_metadatas(self, ids: Sequence[str], metadatas: Sequence[Any]) -> None: ...

    def drop_views(self, partition: str) -> None: ...


async def link_versions(store: VersionStore, partition: str, older_id: str, newer_id: str) -> bool:
    """Mark ``newer_id`` as the newer version of ``older_id`` (both of ``partition``);
    ``False`` when either is not there (nothing written)."""
    if older_id == newer_id:
        return False
    async with store.writing(partition):
        older = await store._get(partition, older_id)
        newer = await store._get(partition, newer_id)
        if older is None or newer is None:
            return False
        older.superseded_by, newer.supersedes = newer_id, older_id
        try:
            await store.set_metadatas(
                [older_id, newer_id], [older.to_metadata(), newer.to_metadata()]
            )
        except BaseException:
            store.drop_views(partition)
            raise
        store.index.updated(partition, None, older)
        store.index.updated(partition, None, newer)
    return True
