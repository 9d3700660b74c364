"""Key migration: stored memories and archive rows rewritten into the installed key format.

Built on the store (it pages through every memory and rewrites partition keys), so it
lives above ``storage/``; the key format itself is :mod:`..storage.keys`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..storage.keys import KEY_FORMAT_META, current_key_format, normalize_key
from ..storage.memory_store import MemoryStore

__all__ = ["KeyMigrationReport", "migrate_partition_keys"]


@dataclass(slots=True)
class KeyMigrationReport:
    """What a key migration found or did."""

    stored_format: str | None
    current_format: str
    scanned: int = 0
    rewritten: int = 0
    unparsable: int = 0
    skipped: bool = False


async def migrate_partition_keys(
    store: MemoryStore, *, dry_run: bool = False, page_size: int | None = None
) -> KeyMigrationReport:
    """Rewrite the ``user_id`` of stored memories into the current key format.

    Idempotent. When the collection metadata already records the current
    format this returns after a single metadata read, so it can run on every
    start. On an empty collection the format is simply recorded.
    """
    current = current_key_format()
    stored = await store.get_meta(KEY_FORMAT_META)
    report = KeyMigrationReport(stored_format=stored, current_format=current)
    if stored == current:
        report.skipped = True
        return report
    async for page in store.iter_all_records(page_size=page_size):
        updates: dict[str, str] = {}
        for record in page:
            report.scanned += 1
            new = normalize_key(record.partition)
            if new is None:
                report.unparsable += 1
            elif new != record.partition:
                updates[record.id] = new
        report.rewritten += len(updates)
        if updates and not dry_run:
            await store.rewrite_keys(updates)
    if not dry_run:
        # Archived memories and versions follow their partition (restores find them).
        await store.archive.rewrite_partition_keys(normalize_key)
        await store.set_meta({KEY_FORMAT_META: current})
    return report
