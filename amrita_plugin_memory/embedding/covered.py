"""The collections the fingerprint covers, and what maintenance needs to work on them.

:class:`Maintenance` is handed to every re-embedding, backup, status and
start-up function: the connection, the memory store, the embedding client,
the settings, and the names of the covered collections (the memory
collection and the L3 knowledge collection, passed in by whoever builds it:
this layer never reads the L3 configuration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..core.config import EnvConfig
from ..storage.chroma import ChromaConnection
from ..storage.memory_store import MemoryStore
from .client import EmbeddingClient
from .errors import RemapError
from .fingerprint import FINGERPRINT_KEYS

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = [
    "MARKER_KEYS",
    "TEMP_SUFFIX",
    "Covered",
    "Maintenance",
    "count_of",
    "drop_collection",
    "meta_of",
    "open_collection",
    "replace_meta",
    "space_of",
    "user_meta",
]

# Markers of an in-progress remap (on temporary collections and, between the
# swap and the final fingerprint write, on the swapped-in collections).
META_REEMBED_COMPLETE = "reembed_complete"
META_REEMBED_TARGET = "reembed_target"
META_REEMBED_SOURCE = "reembed_source"
MARKER_KEYS = (META_REEMBED_COMPLETE, META_REEMBED_TARGET, META_REEMBED_SOURCE)

TEMP_SUFFIX = "__reembed"


@dataclass(frozen=True, slots=True)
class Covered:
    """A collection covered by the fingerprint."""

    name: str
    role: Literal["memory", "knowledge"]

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
    """Metadata without fingerprint, remap markers and Chroma's ``hnsw:`` settings."""
    drop = set(FINGERPRINT_KEYS) | set(MARKER_KEYS)
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
    def covered(self) -> tuple[Covered, Covered]:
        """(knowledge, memory): the swap order (memory last, see :mod:`.remap`)."""
        return Covered(self.knowledge_collection, "knowledge"), Covered(self.store.name, "memory")
