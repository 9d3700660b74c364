"""Checked import lines written into the store: plan, embed in batches, write.

The lines come from :func:`.import_lines.parse_lines` (every line of the file checked
before anything is written). Then, per batch of at most ``batch_size`` lines:

1. **already stored**: a line whose fixed id is held, live or archived (an earlier import
   of the same line; one the user deleted since stays deleted), is counted, not written;
   a line repeated in the file likewise;
2. **forgotten users**: a line of a forgotten user's partition dated no later than their
   forget is left out, as an archive or backup restore leaves it out
   (``storage/users/tombstones``); a group memory they wrote from before it keeps the
   group's memory but loses their writer mark, as a restore does;
3. **the partition's limit** (``per_session_memory_limit``): lines that do not fit are
   left out (an import displaces nothing), before their text is embedded;
4. the rest is embedded in one request per batch and written through
   ``MemoryStore.write`` with the partition's limit and a fence: a forget of the user
   while the import runs voids their lines still to come (left out too).

An opt-out of active memory (``/memory auto off``) stops automatic learning only, and the
memories learned before it are kept: an import (an operator's explicit act) is not
refused for it.

:class:`ImportReport` says what was added, what was stored already and each line left
out with the reason; its JSON form is what the admin API answers and what
``ambot memory import`` prints, whichever process did the work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..core.errors import MemoryLimitReached, WriteFenced
from ..core.records import utc_now
from ..core.writes import NewMemory, WriteRules
from ..infra.fences import Ticket
from ..storage.keys import normalize_key
from ..storage.memory_store import MemoryStore, operator_view
from ..storage.users.fences import UserFences
from ..storage.users.tombstones import Tombstones
from .import_lines import ImportLine, parse_items, parse_lines

__all__ = [
    "BATCH_SIZE",
    "FORGOTTEN",
    "FULL",
    "VOIDED",
    "ImportLine",
    "ImportReport",
    "import_lines",
    "parse_items",
    "parse_lines",
]

BATCH_SIZE = 32
"""Lines embedded in one request (and written before the next batch is embedded)."""

FULL = "full"
FORGOTTEN = "forgotten"
VOIDED = "voided"
REASONS = {
    FULL: "分区已满（per_session_memory_limit）",
    FORGOTTEN: "该用户已被遗忘，遗忘之前的记忆不再导入",
    VOIDED: "导入期间该用户被遗忘，未写入",
}
"""Why a line was left out, as the report says it."""

Progress = Callable[[int, int], None]
"""``(lines done, lines in all)``, after every batch."""


@dataclass(slots=True)
class ImportReport:
    """What an import did, line by line (line numbers of the file)."""

    total: int = 0
    added: list[int] = field(default_factory=list)
    existing: list[int] = field(default_factory=list)
    """Stored already (an earlier import), or repeated in the file: nothing added."""
    left_out: dict[str, list[int]] = field(default_factory=dict)
    """Reason (:data:`REASONS`) → the lines left out for it."""
    full: list[str] = field(default_factory=list)
    """The partitions that were full."""

    def leave_out(self, reason: str, line: ImportLine) -> None:
        self.left_out.setdefault(reason, []).append(line.line)
        if reason == FULL and line.memory.partition not in self.full:
            self.full.append(line.memory.partition)

    def absorb(self, other: ImportReport) -> None:
        """Add ``other`` (one chunk sent to a running bot) to this report."""
        self.total += other.total
        self.added += other.added
        self.existing += other.existing
        for reason, lines in other.left_out.items():
            self.left_out.setdefault(reason, []).extend(lines)
        self.full += [p for p in other.full if p not in self.full]

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "added": sorted(self.added),
            "existing": sorted(self.existing),
            "left_out": {k: sorted(v) for k, v in self.left_out.items()},
            "full": list(self.full),
        }

    @classmethod
    def from_json(cls, data: Any) -> ImportReport:
        """A report as the admin API answered it (unusable parts read as empty)."""
        data = data if isinstance(data, dict) else {}

        def numbers(value: Any) -> list[int]:
            return [int(n) for n in value if isinstance(n, int)] if isinstance(value, list) else []

        left = data.get("left_out")
        return cls(
            total=int(data.get("total") or 0),
            added=numbers(data.get("added")),
            existing=numbers(data.get("existing")),
            left_out={str(k): numbers(v) for k, v in left.items()}
            if isinstance(left, dict)
            else {},
            full=[str(p) for p in data.get("full") or [] if isinstance(p, str)],
        )

    def lines(self, unit: str = "行") -> list[str]:
        """The report for people, one Chinese line each (``unit``: 行, or 条 for an export)."""
        out = [
            f"共 {self.total} 条：新增 {len(self.added)} 条，"
            f"已存在 {len(self.existing)} 条（此前导入过，或文件中重复），"
            f"未导入 {sum(len(v) for v in self.left_out.values())} 条"
        ]
        for reason, numbers in sorted(self.left_out.items()):
            shown = "、".join(str(n) for n in sorted(numbers)[:50])
            more = f" 等 {len(numbers)} {unit}" if len(numbers) > 50 else ""
            out.append(
                f"未导入 {len(numbers)} 条（{REASONS.get(reason, reason)}）：第 {shown}{more} {unit}"
            )
        if self.full:
            out.append(f"已满的分区：{'、'.join(self.full)}")
        return out


def _ticket(line: ImportLine, epochs: Callable[[str], Ticket] | None) -> Ticket | None:
    """The fence ticket of a line whose writer may be forgotten meanwhile (``None``: none).

    Its time is when the memory was said (``created_at``): a forget at or after it voids
    the line, as it voids an extraction of what the user said before it.
    """
    if epochs is None or not (line.memory.scope == "user" or line.memory.author):
        return None
    said = datetime.fromisoformat(line.memory.created_at).timestamp()
    return Ticket(line.user_id, epochs(line.user_id).epoch, said)


class _Import:
    """One import's state: the report, the room left per partition, the fences."""

    def __init__(self, store: MemoryStore, limit: int, fences: UserFences | None) -> None:
        self.store = store
        self.limit = limit
        self.fences = fences
        self.epochs = fences.snapshot() if fences is not None else None
        self.report = ImportReport()
        self.room: dict[str, int] = {}

    async def unstored(self, batch: Sequence[ImportLine], seen: set[str]) -> list[ImportLine]:
        """The lines of ``batch`` not stored yet, nor met earlier in the file."""
        ids = list(dict.fromkeys(line.memory.memory_id for line in batch))  # Chroma: unique
        held = {row.record.id for row in await self.store.fetch_anywhere(ids, documents=False)}
        held |= await self.store.archive.ids(ids)
        out: list[ImportLine] = []
        for line in batch:
            if line.memory.memory_id in held or line.memory.memory_id in seen:
                self.report.existing.append(line.line)
            else:
                out.append(line)
            seen.add(line.memory.memory_id)
        return out

    async def fits(self, line: ImportLine) -> bool:
        """Whether the line's partition has room for it (counted once, then kept)."""
        partition = line.memory.partition
        if partition not in self.room:
            self.room[partition] = self.limit - await self.store.count(operator_view(partition))
        if self.room[partition] <= 0:
            self.report.leave_out(FULL, line)
            return False
        self.room[partition] -= 1
        return True

    async def write(self, line: ImportLine, vector: Sequence[float] | None) -> None:
        ticket = _ticket(line, self.epochs)
        fence = None if ticket is None or self.fences is None else self.fences.fence(ticket)
        rules = WriteRules(limit=self.limit, fence=fence)
        try:
            # Its lifetime (the archive sweep) counts from today: an old history brought in
            # is not swept the same night.
            memory = dataclasses.replace(line.memory, imported_at=utc_now())
            written = await self.store.write(memory, rules, vector=vector)
        except MemoryLimitReached:  # filled meanwhile by the bot's own writes
            self.report.leave_out(FULL, line)
            return
        except WriteFenced:
            self.report.leave_out(VOIDED, line)
            return
        (self.report.existing if written.existed else self.report.added).append(line.line)


def _restorable(line: ImportLine, stones: Tombstones) -> NewMemory | None:
    """The memory as a restore would bring it back (``None``: a forgotten user's, gone)."""
    memory = line.memory
    meta = memory.record(memory.memory_id, memory.created_at).to_metadata()
    if stones.buries(meta):
        return None
    return dataclasses.replace(memory, author="") if stones.unmarks(meta) else memory


async def import_lines(
    store: MemoryStore,
    lines: Sequence[ImportLine],
    *,
    limit: int,
    fences: UserFences | None = None,
    batch_size: int = BATCH_SIZE,
    progress: Progress | None = None,
) -> ImportReport:
    """Write the checked ``lines`` into ``store`` (see the module docstring); the report.

    ``limit`` is ``per_session_memory_limit``; ``fences`` the runtime's
    (``MemoryRuntime.fences``: a forget during the import voids the user's lines still
    to come). ``progress(done, total)`` is called after every batch.
    """
    batch_size = max(1, min(batch_size, 256))
    work = _Import(store, limit, fences)
    work.report.total = len(lines)
    stones = await store.forgotten.load(normalize_key) if store.forgotten else Tombstones()
    seen: set[str] = set()
    if progress is not None:
        progress(0, len(lines))
    for start in range(0, len(lines), batch_size):
        batch = lines[start : start + batch_size]
        ready: list[ImportLine] = []
        for line in await work.unstored(batch, seen):
            memory = _restorable(line, stones)
            if memory is None:
                work.report.leave_out(FORGOTTEN, line)
            elif await work.fits(line):
                ready.append(dataclasses.replace(line, memory=memory))
        if ready:
            # No vectors (no embedding model, or the service failed): each line is stored
            # pending, found by keywords and embedded later (issue #47), never dropped.
            vectors = await store.vectors.documents([line.memory.content for line in ready])
            for line, vector in zip(ready, vectors or [None] * len(ready), strict=True):
                await work.write(line, vector)
        if progress is not None:
            progress(min(start + batch_size, len(lines)), len(lines))
    return work.report
