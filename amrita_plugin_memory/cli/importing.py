"""``ambot memory import FILE``: memories from a JSON Lines file (or an export) into the store.

The whole file is read and checked here first (:func:`~..upkeep.import_lines.parse_lines`):
a bad line ends the command with every bad line named, before anything is written. Then,
while a bot of this project runs (either mode), the checked lines go to it through the
admin API (``POST /api/memory/import``) in chunks of :data:`CHUNK` lines (its partition
locks, caches and fences stay its own; the bar moves per chunk); otherwise this process
writes them itself (:func:`~..upkeep.importing.import_lines`, the bar moves per batch).
Both print the same report.
"""

from __future__ import annotations

from pathlib import Path

import click
from sqlalchemy.exc import SQLAlchemyError

from ..core.text import short_error
from ..infra.bot_link import BotLinkError
from ..services import MemoryRuntime
from ..storage.memo_store import dispose_memo_engine
from ..storage.models import missing_table
from ..upkeep.import_lines import (
    FILE_BYTES,
    ImportFileError,
    ImportLine,
    is_export_document,
    parse_lines,
)
from ..upkeep.importing import ImportReport, import_lines
from .plumbing import API, Progress, bot_of, fail, run, runtime

__all__ = ["CHUNK", "IMPORT_TIMEOUT", "import_cmd"]

CHUNK = 32
"""Lines per request to a running bot (a request body stays far below the API's 1 MB)."""
IMPORT_TIMEOUT = 600.0
"""How long one chunk may take inside the bot (an embedding request, a few writes)."""


def _read(file: Path) -> bytes:
    try:
        size = file.stat().st_size
        if size > FILE_BYTES:
            fail(f"导入文件过大（{size} 字节，上限 {FILE_BYTES} 字节），未写入任何记忆")
        return file.read_bytes()
    except OSError as exc:
        fail(f"无法读取 {file}：{exc.strerror or exc}")


async def _here(rt: MemoryRuntime, lines: list[ImportLine]) -> ImportReport:
    """The import in this process (no bot runs); database errors end the command."""
    progress = Progress("导入记忆")
    try:
        return await import_lines(
            rt.store,
            lines,
            limit=rt.config.file.per_session_memory_limit,
            fences=rt.fences,
            batch_size=rt.config.env.reembed_batch_size,
            progress=progress,
        )
    except SQLAlchemyError as exc:
        if missing_table(exc):
            fail("数据库中还没有本插件的表（Bot 尚未在此项目中启动过）：请先启动一次 Bot 再重试")
        fail(f"读写数据库失败：{short_error(exc)}")
    finally:
        progress.close()
        await dispose_memo_engine()


def import_cmd(file: Path) -> None:
    """从 JSON Lines 文件（或 ambot memory export 的导出文件）导入记忆。"""
    raw = _read(file)
    rt = runtime()
    try:
        lines = parse_lines(raw, rt.calendar)
    except ImportFileError as exc:
        fail(str(exc))
    bot = bot_of(rt)
    if bot is None:
        report = run(rt, lambda: _here(rt, lines))
    else:
        click.echo(f"（由运行中的 Bot 执行，PID {bot.pid}）")
        report = ImportReport()
        progress = Progress("导入记忆")
        try:
            progress(0, len(lines))
            for start in range(0, len(lines), CHUNK):
                chunk = [line.to_json() for line in lines[start : start + CHUNK]]
                try:
                    answer = bot.request(
                        "POST", f"{API}/import", {"lines": chunk}, timeout=IMPORT_TIMEOUT
                    )
                except BotLinkError as exc:
                    fail(f"{exc}（前 {start} 条已处理；重新执行同一命令会跳过已导入的记忆）")
                report.absorb(ImportReport.from_json(answer))
                progress(min(start + CHUNK, len(lines)), len(lines))
        finally:
            progress.close()
    click.echo(f"已导入 {file}：")
    for line in report.lines("条" if is_export_document(raw) else "行"):
        click.echo(f"  {line}")
