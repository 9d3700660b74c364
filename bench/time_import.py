"""Dated memories into a runtime, as ``ambot memory import`` will bring them, and the runtime's clock.

The time benchmark writes every memory as one JSON Lines row of the import's format
(``{"user_id", "content", "created_at"}`` + optional ``event_time``, ``tags``,
``importance``, ``scope``: issue 45 item 6) into a file, then brings the file in with
:func:`import_file`. The import itself (``upkeep/importing.py``) is being built in
parallel; until it lands :func:`import_file` is a small adapter of its own over the
store's one write path (``NewMemory(created_at=...)`` + ``MemoryStore.write``: a plain
add, no merge, as an import of an export must be). Switching to the real import is the
one marked line in :func:`import_file`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amrita_plugin_memory.services import MemoryRuntime

__all__ = ["EMBED_BATCH", "import_file", "row", "set_now", "write_jsonl"]

EMBED_BATCH = 64
"""Memories embedded per request while importing."""


def row(user_id: str, content: str, said_at: datetime, **extra: Any) -> dict[str, Any]:
    """One line of the import's format (``created_at``: the local stamp with its offset)."""
    return {"user_id": user_id, "content": content, "created_at": said_at.isoformat(), **extra}


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for r in rows:
            out.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


async def _adapter(rt: MemoryRuntime, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The import's stand-in: every row a memory at its own ``created_at`` (ids in row order)."""
    from amrita_plugin_memory.core.writes import NewMemory
    from amrita_plugin_memory.storage.keys import target_from_ids

    ids: list[str] = []
    for start in range(0, len(rows), EMBED_BATCH):
        batch = rows[start : start + EMBED_BATCH]
        vectors = await rt.embedder.embed([str(r["content"]) for r in batch], "document")
        for r, vector in zip(batch, vectors, strict=True):
            said = datetime.fromisoformat(str(r["created_at"])).astimezone(UTC)
            memory = NewMemory(
                partition=target_from_ids(str(r["user_id"])).user,
                scope=str(r.get("scope") or "user"),
                content=str(r["content"]),
                tags=tuple(r.get("tags") or ()),
                importance=str(r.get("importance") or "medium"),
                event_time=str(r.get("event_time") or ""),
                created_at=said.isoformat(timespec="seconds"),
            )
            ids.append((await rt.store.write(memory, vector=vector)).record.id)
    return ids


async def import_file(rt: MemoryRuntime, path: Path) -> list[str]:
    """Bring ``path`` (JSON Lines, the import's format) into ``rt``; the new ids in line order."""
    text = await asyncio.to_thread(path.read_text, encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line]
    return await _adapter(rt, rows)  # the real import replaces this line once it lands


def set_now(rt: MemoryRuntime, moment: datetime) -> None:
    """Make ``moment`` (aware) the runtime's now: the store's clock and the owner's calendar.

    The calendar is a frozen dataclass the runtime hands to whoever needs a day; its one
    instance gets the new clock in place, so every holder sees it (a replaced copy would
    leave them on the real clock).
    """
    stamp = moment.astimezone(UTC)
    rt.store.clock = lambda: stamp.isoformat(timespec="seconds")
    object.__setattr__(rt.calendar, "clock", lambda: stamp)
