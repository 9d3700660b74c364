"""What re-embedding maintenance works on: the :class:`Maintenance` bundle and the covered collections.

:class:`Maintenance` is handed to every re-embedding, backup, status and
start-up function: the connection, the memory store, the embedding client,
the settings, and the names of the covered collections (the memory
collection, its archive (``storage.archive.store``) and the L3 knowledge
collection, passed in by whoever builds it: this layer never reads the L3
configuration).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..core.config import EnvConfig
from ..core.records import without_pending
from ..storage.chroma.connection import ChromaConnection
from ..storage.chroma.remap_markers import (
    MAINTENANCE_KEYS,
    META_REEMBED_COMPLETE,
    META_REEMBED_RUNNING,
    META_REEMBED_SOURCE,
    META_REEMBED_TARGET,
    TEMP_SUFFIX,
)
from ..storage.memory_store import Item, MemoryStore, iter_pages
from .client import EmbeddingClient
from .errors import RemapError
from .fingerprint import FINGERPRINT_KEYS, PUBLISHED_FINGERPRINT_KEYS

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = [
    "MARKER_KEYS",
    "META_REEMBED_COMPLETE",
    "META_REEMBED_RUNNING",
    "META_REEMBED_SOURCE",
    "META_REEMBED_TARGET",
    "TEMP_SUFFIX",
    "Covered",
    "Maintenance",
    "apply_live_changes",
    "count_of",
    "drop_collection",
    "meta_of",
    "open_collection",
    "replace_meta",
    "space_of",
    "user_meta",
]

# Markers of an in-progress remap live in the storage layer, because writers
# check them (see storage.chroma.remap_markers.CollectionGuard): "running" on the live
# collections while their replacements are built, the others on temporaries
# and, between the swap and the final fingerprint write, on the swapped-in ones.
MARKER_KEYS = MAINTENANCE_KEYS


@dataclass(frozen=True, slots=True)
class Covered:
    """A collection covered by the fingerprint."""

    name: str
    role: Literal["memory", "archive", "knowledge"]

    @property
    def temp(self) -> str:
        return self.name + TEMP_SUFFIX


async def open_collection(conn: ChromaConnection, name: str) -> Collection | None:
    return await conn.get_collection(name, create=False)


def meta_of(col: Collection) -> dict[str, Any]:
    return dict(col.metadata or {})


def space_of(col: Collection) -> str | None:
    """The distance space of a collection (kept in its configuration, not only metadata)."""
    cfg = getattr(col, "configuration_json", None)
    hnsw = cfg.get("hnsw") if isinstance(cfg, dict) else None
    space = hnsw.get("space") if isinstance(hnsw, dict) else None
    if not space:
        space = (col.metadata or {}).get("hnsw:space")
    return str(space) if space else None


def user_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata without fingerprints (the published plugin's too: re-embedded vectors are
    not what it recorded), remap markers and Chroma's ``hnsw:`` settings."""
    drop = set(FINGERPRINT_KEYS) | set(PUBLISHED_FINGERPRINT_KEYS) | set(MARKER_KEYS)
    return {k: v for k, v in meta.items() if k not in drop and not k.startswith("hnsw:")}


async def replace_meta(conn: ChromaConnection, col: Collection, meta: Mapping[str, Any]) -> None:
    """Replace a collection's metadata (Chroma refuses an empty dict and ``hnsw:`` changes)."""
    clean = {k: v for k, v in meta.items() if not k.startswith("hnsw:")}
    if not clean:
        raise RemapError(f"集合 {col.name} 的 metadata 不能为空")
    await conn.run(col.modify, metadata=clean)


async def drop_collection(conn: ChromaConnection, name: str) -> bool:
    if name in await conn.list_collections():
        await conn.delete_collection(name)
        return True
    return False


async def count_of(conn: ChromaConnection, col: Collection) -> int:
    return await conn.run(col.count)


@dataclass(slots=True)
class Maintenance:
    """Everything re-embedding, backups, status and the start-up check work on."""

    connection: ChromaConnection
    store: MemoryStore
    embedder: EmbeddingClient
    env: EnvConfig
    backup_dir: Path
    knowledge_collection: str
    """Name of the L3 knowledge collection (covered whether or not L3 is on)."""

    @property
    def covered(self) -> tuple[Covered, Covered, Covered]:
        """(knowledge, archive, memory): the swap order (memory last, see :mod:`.remap`)."""
        return (
            Covered(self.knowledge_collection, "knowledge"),
            Covered(self.store.archive.name, "archive"),
            Covered(self.store.name, "memory"),
        )


async def apply_live_changes(maint: Maintenance, live: Collection, temp: Collection) -> int:
    """Make ``temp`` hold what ``live`` holds now; the number of changes applied.

    Used while a remap's temporary is being built: items added or changed in
    ``live`` meanwhile are (re-)embedded with the current model into
    ``temp``, items deleted from ``live`` are deleted from ``temp``. An
    embedding-free comparison page by page when nothing changed.
    """
    conn = maint.connection
    seen: set[str] = set()
    changed = 0
    async for page in iter_pages(conn, live):
        seen.update(item.id for item in page)
        res = await conn.run(
            functools.partial(
                temp.get, ids=[item.id for item in page], include=["documents", "metadatas"]
            )
        )
        docs = res.get("documents") or [None] * len(res["ids"])
        metas = res.get("metadatas") or [None] * len(res["ids"])
        # The temporary's rows have their real vectors: a live row's pending flag is no change.
        copied = {
            i: (d, without_pending(m) if m is not None else None)
            for i, d, m in zip(res["ids"], docs, metas, strict=False)
        }
        stale: list[Item] = [
            item
            for item in page
            if copied.get(item.id, ("\0", None))
            != (
                item.document,
                without_pending(item.metadata) if item.metadata is not None else None,
            )
        ]
        batch = maint.env.reembed_batch_size
        for start in range(0, len(stale), batch):
            chunk = stale[start : start + batch]
            vectors = await maint.embedder.embed([item.document or "" for item in chunk])
            await conn.run(
                functools.partial(
                    temp.upsert,
                    ids=[item.id for item in chunk],
                    documents=[item.document for item in chunk],  # type: ignore[arg-type]
                    embeddings=vectors,  # type: ignore[arg-type]
                    metadatas=[without_pending(item.metadata or {}) or None for item in chunk],  # type: ignore[arg-type]
                )
            )
        changed += len(stale)
    extra = [
        i for i in (await conn.run(functools.partial(temp.get, include=[])))["ids"] if i not in seen
    ]
    if extra:
        await conn.run(functools.partial(temp.delete, ids=extra))
    return changed + len(extra)
