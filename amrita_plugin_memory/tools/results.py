"""The chat tools' answers, built in one place from records and outcomes.

What the model (and the ``/memory`` commands, the L3 loop) reads back is
decided here only: a memory always appears as :meth:`MemoryRecord.compact`
(its stamp in the owner's zone: the calendar is handed in, never looked up),
every answer carries ``ok``, and a refused memo write names its numbers so
the model can shorten and retry. The tool logic (:mod:`.memory_tools`, and a
new tool there) returns these and never builds a dict itself: an answer that
shows memories has its function here (a new kind of answer: a new function),
any other answer is :func:`ok` with its fields; an error is
``args.tool_error`` (or an exception ``args.guard_tool_call`` words).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.calendar import OwnerCalendar
from ..core.records import MemoryRecord
from ..storage.memo_store import MemoWriteResult
from ..storage.memory_store import WriteResult

__all__ = [
    "MERGED_NOTE",
    "PENDING_NOTE",
    "deleted",
    "found",
    "listed",
    "memo_written",
    "ok",
    "updated",
    "written",
]

MERGED_NOTE = "与已有记忆重复，已合并到该条（更新时间、合并标签、取较高重要性）"
PENDING_NOTE = "已保存（嵌入服务暂不可用，先按关键词检索，恢复后自动补全语义索引）"
"""Said when a memory was kept without its vector during an outage (issue #47): the
model must not retry nor tell the user it was lost. Never in keyword-only mode, where
every memory is stored so and nothing is wrong."""


def ok(**fields: Any) -> dict[str, Any]:
    """An answer that shows no memory (a count, a confirmation): ``ok`` and ``fields``."""
    return {"ok": True, **fields}


def written(
    result: WriteResult, calendar: OwnerCalendar, *, embeddings: bool = True
) -> dict[str, Any]:
    """``write_memory``: the new memory, or the one it was merged into; ``embeddings``:
    whether the store embeds at all (``store.vectors.enabled``: a pending memory in
    keyword-only mode is the normal state, not worth a note)."""
    memory = result.record.compact(calendar)
    if result.merged:
        return {"ok": True, "merged": True, "memory": memory, "note": MERGED_NOTE}
    return _noted({"ok": True, "memory": memory}, result.pending and embeddings)


def found(kind: str, hits: Sequence[MemoryRecord], calendar: OwnerCalendar) -> dict[str, Any]:
    """``read_memory``: the best memories of the partition of ``kind``."""
    return {"ok": True, "scope": kind, "memories": [h.compact(calendar) for h in hits]}


def listed(
    kind: str, total: int, offset: int, records: Sequence[MemoryRecord], calendar: OwnerCalendar
) -> dict[str, Any]:
    """``list_memory``: one page of the partition of ``kind`` (``total`` readable memories)."""
    return {
        "ok": True,
        "scope": kind,
        "total": total,
        "offset": offset,
        "memories": [r.compact(calendar) for r in records],
    }


def updated(
    record: MemoryRecord, calendar: OwnerCalendar, *, embeddings: bool = True
) -> dict[str, Any]:
    """``update_memory``: the changed memory (a new text left pending: :data:`PENDING_NOTE`)."""
    return _noted({"ok": True, "memory": record.compact(calendar)}, record.pending and embeddings)


def _noted(answer: dict[str, Any], pending: bool) -> dict[str, Any]:
    if pending:
        answer["note"] = PENDING_NOTE
    return answer


def deleted(memory_id: str) -> dict[str, Any]:
    return {"ok": True, "deleted": memory_id}


def memo_written(result: MemoWriteResult) -> dict[str, Any]:
    """``update_memo``: the new length, or why nothing was written."""
    if result.ok:
        return {"ok": True, "chars": result.current_chars, "limit": result.limit}
    return {
        "ok": False,
        "error": (
            f"备忘录超出上限，未写入：本次 {result.attempted_chars} 字，上限 {result.limit} 字"
            f"（当前已存 {result.current_chars} 字）。请压缩（细节可用 write_memory 下放到 L2）后整篇重写"
        ),
        "current_chars": result.current_chars,
        "attempted_chars": result.attempted_chars,
        "limit": result.limit,
    }
