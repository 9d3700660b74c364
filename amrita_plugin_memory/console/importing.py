"""Memories imported through the admin API: ``POST /api/memory/import``.

``ambot memory import FILE`` checks the whole file itself, then sends a running bot the
checked lines in chunks (``cli/importing``): the bot writes them with its own partition
locks, caches and fences. The body is hostile like any other: ``{"lines": [...]}``, at
most :data:`CHUNK_MOST` lines in the file's form with their line numbers, every line
checked again (``upkeep/import_lines.parse_items``) before anything is written. Every
call leaves an audit line with the counts, never a text.
"""

from __future__ import annotations

from typing import Any

from ..services import MemoryRuntime
from ..upkeep.import_lines import ImportFileError
from ..upkeep.importing import import_lines, parse_items
from .catalog import PartitionCatalog
from .errors import audit, bad_request, guarded

__all__ = ["CHUNK_MOST", "ImportAdmin"]

CHUNK_MOST = 64
"""Lines in one request, at most (a request stays well under the API's body bound)."""


class ImportAdmin:
    """The console's import of memories (one request: one chunk of a file)."""

    def __init__(self, runtime: MemoryRuntime, catalog: PartitionCatalog) -> None:
        self.runtime = runtime
        self.catalog = catalog

    async def run(self, actor: str, body: dict[str, Any]) -> dict[str, Any]:
        rt = self.runtime
        try:
            lines = parse_items(body.get("lines"), rt.calendar, most=CHUNK_MOST)
        except ImportFileError as exc:
            bad_request(str(exc))
        try:
            report = await guarded(
                "console_import",
                lambda: import_lines(
                    rt.store,
                    lines,
                    limit=rt.config.file.per_session_memory_limit,
                    fences=rt.fences,
                    batch_size=rt.config.env.reembed_batch_size,
                ),
            )
        finally:
            self.catalog.invalidate()  # partitions may be new, even after a failure
        audit(
            actor,
            "导入记忆",
            lines=report.total,
            added=len(report.added),
            existing=len(report.existing),
            left_out=sum(len(v) for v in report.left_out.values()),
        )
        return report.to_json()
