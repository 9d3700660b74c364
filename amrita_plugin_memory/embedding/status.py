"""``ambot memory status``: a read-only picture of the store (works with the embedding service down)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import EmbeddingError
from ..storage.keys import KEY_FORMAT_META, current_key_format
from .backup import BackupInfo, list_backups
from .covered import Maintenance, count_of, open_collection
from .fingerprint import FingerprintInfo, current_fingerprint

__all__ = ["StatusReport", "collect_status"]


@dataclass(slots=True)
class StatusReport:
    """Everything ``ambot memory status`` prints."""

    vector_db: str
    stored: FingerprintInfo | None
    current: FingerprintInfo | None
    current_error: str | None
    memory_total: int
    distribution: dict[tuple[str, str], int]
    knowledge_name: str
    knowledge_count: int | None
    key_format_stored: str | None
    key_format_current: str
    pending_temps: list[str]
    backups: list[BackupInfo]

    @property
    def match(self) -> bool | None:
        if self.current is None:
            return None
        return self.stored is not None and self.stored.fingerprint == self.current.fingerprint


async def collect_status(maint: Maintenance) -> StatusReport:
    """Read-only state of the store; works with the embedding service down."""
    conn = maint.connection
    knowledge, memory = maint.covered
    existing = await conn.list_collections()
    meta = await maint.store.get_metadata() if memory.name in existing else {}
    current: FingerprintInfo | None = None
    error: str | None = None
    try:
        current = await current_fingerprint(maint.embedder)
    except EmbeddingError as exc:
        error = str(exc)
    distribution = await maint.store.distribution() if memory.name in existing else {}
    kcol = await open_collection(conn, knowledge.name) if knowledge.name in existing else None
    return StatusReport(
        vector_db=conn.describe(),
        stored=FingerprintInfo.from_meta(meta),
        current=current,
        current_error=error,
        memory_total=sum(distribution.values()),
        distribution=distribution,
        knowledge_name=knowledge.name,
        knowledge_count=await count_of(conn, kcol) if kcol is not None else None,
        key_format_stored=meta.get(KEY_FORMAT_META),
        key_format_current=current_key_format(),
        pending_temps=[c.temp for c in (knowledge, memory) if c.temp in existing],
        backups=list_backups(maint.backup_dir),
    )
