"""Memories written by the published ``amrita-plugin-memory``, rewritten into this plugin's form.

Built on the store like the key migration (:mod:`.rekey`): it pages through every memory
and rewrites the metadata of the rows still in the published form
(``storage/published/memories``), leaving text, vector and id alone. Idempotent and
resumable: a row once rewritten has ``updated_at`` and is never touched again, so a run
killed half-way is finished by the next one and nothing is done twice. The backup before
the first rewrite and the start-up order are ``embedding/adoption``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..storage.memory_store import MemoryStore
from ..storage.published.memories import adopted_metadata, needs_adoption

__all__ = ["RowAdoption", "adopt_rows", "rows_to_adopt"]

ADOPT_PAGE_SIZE = 200
"""Rows rewritten per Chroma ``update`` (one page of the scan)."""


@dataclass(slots=True)
class RowAdoption:
    """What :func:`adopt_rows` did: rows scanned, rows rewritten."""

    scanned: int = 0
    adopted: int = 0


async def rows_to_adopt(store: MemoryStore) -> int:
    """How many memories are still in the published form (metadata only is read)."""
    found = 0
    async for page in store.iter_stored_form():
        found += sum(1 for item in page if needs_adoption(item.metadata))
    return found


async def adopt_rows(store: MemoryStore, *, page_size: int = ADOPT_PAGE_SIZE) -> RowAdoption:
    """Rewrite every memory still in the published form, a page at a time."""
    report = RowAdoption()
    async for page in store.iter_stored_form(page_size=page_size):
        report.scanned += len(page)
        updates = {
            item.id: adopted_metadata(item.metadata or {})
            for item in page
            if needs_adoption(item.metadata)
        }
        await store.rewrite_metadata(updates)
        report.adopted += len(updates)
    return report
