"""Dated memories into a runtime, as ``ambot memory import`` brings them, and the runtime's clock.

The time benchmark writes every memory as one JSON Lines row of the import's format
(``{"user_id", "content", "created_at"}`` + optional ``event_time``, ``tags``,
``importance``, ``scope``: issue 45 item 6) into a file, then brings the file in with
:func:`import_file`: the plugin's own import (``upkeep/importing.py``), the one
``ambot memory import`` runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
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


async def import_file(rt: MemoryRuntime, path: Path) -> list[str]:
    """Bring ``path`` (JSON Lines, the import's format) into ``rt`` through the plugin's own
    import (``upkeep/importing``: every line checked first, fixed ids); the ids in line order."""
    from amrita_plugin_memory.upkeep.importing import import_lines, parse_lines

    text = await asyncio.to_thread(path.read_bytes)
    lines = parse_lines(text, rt.calendar)
    report = await import_lines(rt.store, lines, limit=10**6, batch_size=EMBED_BATCH)
    if report.left_out:
        raise RuntimeError(f"import left lines out: {report.left_out}")
    return [line.memory.memory_id for line in lines]


def set_now(rt: MemoryRuntime, moment: datetime) -> None:
    """Make ``moment`` (aware) the runtime's now: the store's clock and the owner's calendar.

    The calendar is a frozen dataclass the runtime hands to whoever needs a day; its one
    instance gets the new clock in place, so every holder sees it (a replaced copy would
    leave them on the real clock).
    """
    stamp = moment.astimezone(UTC)
    rt.store.clock = lambda: stamp.isoformat(timespec="seconds")
    object.__setattr__(rt.calendar, "clock", lambda: stamp)
