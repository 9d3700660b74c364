"""Archive rows as text, and the ``ambot memory archive …`` work.

One line format for the command line and the ``/memory user archive`` chat
command, so both say the same thing: the row id (what ``restore`` takes),
why and when it was archived, and the text. The command bodies in ``cli/``
only print what :func:`archive_command` returns, or (while the bot runs) the
same lines built by the admin API's archive operations (:func:`listing_lines`,
:func:`sweep_message`).
"""

from __future__ import annotations

from ...core.calendar import OwnerCalendar
from ...core.config import ConfigFile
from ...core.text import cut
from ...storage.archive.store import ArchivedMemory
from ...storage.episodes.store import EpisodeStore
from ...storage.memory_store import MemoryStore, operator_view
from .restore import parse_row_id, restore
from .sweep import SweepResult, sweep

__all__ = ["REASON_TEXT", "archive_command", "describe_row", "listing_lines", "sweep_message"]

REASON_TEXT = {
    "expired": "超过寿命",
    "updated": "更新前的旧版本",
    "merged": "合并前的旧版本",
    "deleted": "已删除",
    "outdated": "不再成立（主动记忆）",
    "displaced": "分区已满，让位给新记忆（自动记录）",
}


def describe_row(
    row: ArchivedMemory,
    calendar: OwnerCalendar,
    *,
    chars: int | None = None,
    partition: bool = False,
) -> str:
    """``<id>  [why，归档于 …]  text`` (``chars``: cut the text; ``partition``: show it);
    the time is the owner's (``[memory] timezone``), whoever prints it."""
    why = REASON_TEXT.get(row.reason, row.reason)
    if row.is_version:
        why += f"（记忆 {row.memory_id}）"
    text = cut(row.record.content, chars) if chars is not None else row.record.content
    where = f"  分区 {row.record.partition}" if partition else ""
    when = calendar.show_time(row.archived_at) or row.archived_at or "?"
    return f"{row.id}  [{why}，归档于 {when}]{where}  {text}"


def listing_lines(
    partition: str | None, total: int, rows: list[ArchivedMemory], calendar: OwnerCalendar
) -> list[str]:
    """``ambot memory archive list`` output (the same whether the bot answered or not)."""
    where = f"分区 {partition} " if partition else ""
    lines = [f"{where}归档共 {total} 条（最新的在前，显示 {len(rows)} 条）："]
    lines += [f"  {describe_row(row, calendar, partition=partition is None)}" for row in rows]
    if total:
        lines.append("恢复：ambot memory archive restore <id>")
    return lines


def sweep_message(result: SweepResult) -> str:
    return f"归档清理完成：{result.describe()}"


async def archive_command(
    store: MemoryStore,
    config: ConfigFile,
    calendar: OwnerCalendar,
    action: str,
    *,
    partition: str | None = None,
    limit: int = 20,
    row_id: str | None = None,
    episodes: EpisodeStore | None = None,
) -> list[str]:
    """``list`` / ``restore`` / ``sweep`` for ``ambot memory archive`` (lines to print).

    Raises ``VectorStoreError`` (and its subclasses) for every expected
    failure: the command prints it as one line.
    """
    if action == "sweep":
        result = await sweep(
            store, config.lifetime_days, batch_size=config.archive.batch_size, episodes=episodes
        )
        return [sweep_message(result)]
    if action == "restore":
        checked = parse_row_id(row_id)
        done = await restore(store, checked, limit=config.per_session_memory_limit)
        return [done.describe()]
    if partition is None:  # the operator's whole archive
        total = await store.archive.count_all()
        rows = await store.archive.list_all(limit=limit)
    else:
        total = await store.archive.count(operator_view(partition))
        rows = await store.archive.list(operator_view(partition), limit=limit)
    return listing_lines(partition, total, rows, calendar)
