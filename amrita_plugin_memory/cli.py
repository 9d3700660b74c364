"""``ambot memory``: the implementation of the maintenance commands.

The command line itself (names, options, help) is declared in the launcher
:mod:`amrita_plugin_memory_ctl` (the ``ambot.commands`` entry point), so
``--help`` answers without loading the bot. When a command really runs, the
launcher checks for a bot project, sets ``AMBOT_COMMAND_CONTEXT=1`` (the
plugin then skips its startup check), runs ``amrita.init()`` +
``amrita.load_plugins()`` and calls the matching ``*_cmd`` function here
(inside the click context). The bot's startup hooks have not run (no AmritaConfig, no
scheduler): every command runs on its own loop with the plugin's :class:`~.services.MemoryRuntime`.

Every expected failure (embedding service or Chroma unreachable, local data
dir held by a running bot, bad backup file, no TTY for a confirmation) ends
with one Chinese line on stderr and exit code 1, never a traceback.
"""

from __future__ import annotations

import asyncio
import unicodedata
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from amrita_plugin_memory_ctl import fail as _fail

from .core.bot_link import BotEndpoint, BotLinkError, follow_job, running_bot
from .core.console import ask_yes_no as _confirm
from .core.console import stdin_is_tty as _is_tty
from .core.errors import EmbeddingError, VectorStoreError
from .core.text import short_error
from .embedding import (
    BackupError,
    FingerprintInfo,
    RemapError,
    collect_status,
    create_backup,
    current_fingerprint,
    list_backups,
    load_backup,
    recover_interrupted_remap,
    remap,
    reset_fingerprint,
    restore_backup,
    stored_fingerprint,
)
from .embedding.report_json import backup_json, status_json
from .services import MemoryRuntime
from .storage.archive_view import archive_command
from .storage.chroma import LOCK_FILE_NAME
from .storage.keys import migrate_partition_keys
from .storage.memo_store import dispose_memo_engine

__all__ = [
    "archive_cmd",
    "backup_create_cmd",
    "backup_list_cmd",
    "backup_restore_cmd",
    "migrate_keys_cmd",
    "reindex_cmd",
    "reset_fingerprint_cmd",
    "status_cmd",
]

T = TypeVar("T")

_EXPECTED_ERRORS = (EmbeddingError, VectorStoreError, RemapError, BackupError, OSError)
_API = "/api/memory"


# ---------------------------------------------------------------------------
# Plumbing
# ---------------------------------------------------------------------------


def _runtime() -> MemoryRuntime:
    """The plugin's runtime; the local data dir lock is released when the command ends.

    Looked up through NoneBot's plugin registry (the launcher has loaded the
    plugin), so this module never imports the plugin entry module.
    """
    import nonebot

    plugin = nonebot.get_plugin("amrita_plugin_memory")
    rt = getattr(plugin.module, "runtime", None) if plugin is not None else None
    if not isinstance(rt, MemoryRuntime):
        _fail("插件配置无效，未能初始化（详见上方 [Memory] 日志），请修正配置后重试")
    click.get_current_context().call_on_close(rt.connection.close)
    return rt


def _run(rt: MemoryRuntime, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` on a fresh event loop; expected errors become one line and exit 1."""

    async def main() -> T:
        try:
            return await work()
        finally:
            await rt.embedder.close()

    try:
        return asyncio.run(main())
    except _EXPECTED_ERRORS as exc:
        _fail(str(exc))


def _bot(rt: MemoryRuntime) -> BotEndpoint | None:
    """The running bot that holds the local data dir (``None``: open the store here).

    In local mode only one process may open the embedded ChromaDB; while the
    bot runs, the commands that support it ask the bot through its admin API
    (local token, see :mod:`.core.bot_link`). Remote mode needs no detour.
    """
    if rt.config.env.vector_db_type != "local":
        return None
    return running_bot(rt.config.data_dir, rt.config.chroma_dir / LOCK_FILE_NAME)


def _ask(bot: BotEndpoint, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    try:
        return bot.request(method, _API + path, body)
    except BotLinkError as exc:
        _fail(str(exc))


def _follow(bot: BotEndpoint, job: dict[str, Any], label: str) -> dict[str, Any]:
    """Show the progress of a job running inside the bot; its final state (exit 1 if it failed)."""
    click.echo(f"（在运行中的 Bot 内执行，PID {bot.pid}；进度：）")
    progress = _Progress(label)
    try:
        final = follow_job(bot, job, progress)
    except BotLinkError as exc:
        _fail(str(exc))
    finally:
        progress.close()
    if final.get("state") != "done":
        _fail(str(final.get("message") or f"{label}失败"))
    return final


def _bot_only_stopped(rt: MemoryRuntime, what: str) -> None:
    bot = _bot(rt)
    if bot is not None:
        _fail(
            f"Bot 正在运行（PID {bot.pid}），{what}需要先停止 Bot（本地向量库同一时间只能由一个进程打开）"
        )


def _require_confirmation(yes: bool) -> None:
    if not yes and not _is_tty():
        _fail("该操作需要确认，但当前不是交互终端；确认无误后加 --yes 重新运行")


class _Progress:
    """A click progress bar created on the first report (when the total is known)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._bar: Any = None
        self._shown = 0

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            self._bar = click.progressbar(length=total, label=self.label, show_pos=True)
            self._bar.__enter__()
        self._bar.update(done - self._shown)
        self._shown = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024 or unit == "GB":
            break
    return f"{value:.1f} {unit}"


def _width(text: str) -> int:
    """Display width in a terminal (CJK characters take two columns)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * max(0, width - _width(text))


def _when(iso: str) -> str:
    try:
        return datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso or "?"


def _fp(info: FingerprintInfo | None) -> str:
    return info.describe() if info is not None else "未记录"


def _fpj(info: dict[str, Any] | None) -> str:
    return str(info["describe"]) if info else "未记录"


def _counts(counts: dict[str, Any]) -> str:
    return "，".join(f"{name} {n} 条" for name, n in counts.items())


def _print_backups(backups: list[dict[str, Any]], backup_dir: Any) -> None:
    """Backups in their JSON form (:func:`.embedding.report_json.backup_json`)."""
    click.echo(f"备份（{backup_dir}）：")
    if not backups:
        click.echo("  （无）")
        return
    for b in backups:
        counts = _counts(b["counts"]) or "内容未知"
        click.echo(f"  {b['name']}  {_when(b['created_at'])}  {counts}  {_size(b['size'])}")


def _print_status(report: dict[str, Any]) -> None:
    """The status report in its JSON form (:func:`.embedding.report_json.status_json`)."""
    fp = report["fingerprint"]
    click.echo(f"向量库：{report['vector_db']}")
    click.echo("嵌入指纹：")
    click.echo(f"  已存储：{_fpj(fp['stored'])}")
    if fp["current"] is None:
        click.echo(f"  当前：  无法计算（{fp['current_error']}）")
    else:
        click.echo(f"  当前：  {_fpj(fp['current'])}")
    click.secho(f"  状态：  {fp['state']}", fg=fp["colour"])
    click.echo(f"记忆：共 {report['memory_total']} 条")
    rows = report["distribution"]
    if rows:
        width = max(_width(r["partition"]) for r in rows)
        click.echo(f"  {_pad('分区', width)}  {_pad('范围', 5)}  条数")
        for r in rows:
            click.echo(f"  {_pad(r['partition'], width)}  {_pad(r['scope'], 5)}  {r['count']}")
    kb = report["knowledge"]
    knowledge = f"{kb['count']} 条" if kb["count"] is not None else "不存在"
    click.echo(f"知识库 {kb['name']}：{knowledge}")
    click.echo(f"归档：{report.get('archive_total', 0)} 条（ambot memory archive list）")
    keys = report["key_format"]
    click.echo("分区键格式：")
    click.echo(f"  已存储：{keys['stored'] or '未记录'}")
    click.echo(f"  当前：  {keys['current']}")
    if keys["stored"] == keys["current"]:
        click.echo("  状态：  一致")
    else:
        click.echo("  状态：  待迁移 —— 运行 `ambot memory migrate-keys`（Bot 启动时也会自动迁移）")
    if report["pending_temps"]:
        click.secho(
            f"未完成的重映射：{', '.join(report['pending_temps'])}（下次启动 Bot 或运行 reindex 时自动处理）",
            fg="yellow",
        )
    _print_backups(report["backups"], report["backup_dir"])


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------


def status_cmd() -> None:
    """显示嵌入指纹、记忆分布、分区键版本与备份列表。"""
    rt = _runtime()
    bot = _bot(rt)
    if bot is not None:
        report = _ask(bot, "GET", "/status?fresh=1")
        click.echo(f"（Bot 正在运行，PID {bot.pid}：以下内容由运行中的 Bot 提供）")
        _print_status(report)
        return

    async def work() -> dict[str, Any] | VectorStoreError:
        try:
            return status_json(await collect_status(rt.maintenance), rt.config.backup_dir)
        except VectorStoreError as exc:
            return exc

    result = _run(rt, work)
    if isinstance(result, VectorStoreError):
        # Still show what needs no vector store (e.g. another process holds it).
        click.echo(f"向量库：{rt.connection.describe()}（不可用）")
        backups = [backup_json(b) for b in list_backups(rt.config.backup_dir)]
        _print_backups(backups, rt.config.backup_dir)
        _fail(str(result))
    _print_status(result)


def reindex_cmd(yes: bool) -> None:
    """用当前嵌入模型强制全量重映射（先自动备份），并写入新指纹。"""
    _require_confirmation(yes)
    rt = _runtime()
    bot = _bot(rt)
    if bot is not None:
        _reindex_in_bot(bot, yes)
        return
    progress = _Progress("重映射")

    async def work() -> None:
        await recover_interrupted_remap(rt.maintenance)
        current = await current_fingerprint(rt.embedder)
        stored = await stored_fingerprint(rt.store)
        _ask_reindex(_fp(stored), _fp(current), await rt.store.count(), yes)
        try:
            report = await remap(rt.maintenance, progress=progress)
        finally:
            progress.close()
        backup = str(report.backup) if report.backup else None
        _print_reindexed(backup, report.counts, _fp(report.fingerprint))

    _run(rt, work)


def _ask_reindex(stored: str, current: str, total: int, yes: bool) -> None:
    click.echo(f"已存储指纹：{stored}")
    click.echo(f"当前配置：  {current}")
    click.echo(f"将用当前模型重新嵌入 {total} 条记忆（以及已有的知识库条目），开始前自动备份。")
    if not yes and not _confirm("确定继续吗？"):
        click.echo("已取消。")
        raise click.exceptions.Exit(1)


def _print_reindexed(backup: str | None, counts: dict[str, Any], fingerprint: str) -> None:
    if backup is None:
        click.echo(f"集合为空，已写入指纹：{fingerprint}")
        return
    click.secho(f"重映射完成：{_counts(counts)}", fg="green")
    click.echo(f"新指纹：{fingerprint}")
    click.echo(f"备份：{backup}")


def _reindex_in_bot(bot: BotEndpoint, yes: bool) -> None:
    fp = _ask(bot, "GET", "/status")["fingerprint"]
    total = _ask(bot, "GET", "/partitions?fresh=1&limit=1")["memories"]
    click.echo(f"Bot 正在运行（PID {bot.pid}）：重映射在 Bot 内执行，期间写入记忆会被拒绝。")
    _ask_reindex(_fpj(fp["stored"]), _fpj(fp["current"]), total, yes)
    result = _follow(bot, _ask(bot, "POST", "/reindex", {}), "重映射").get("result") or {}
    _print_reindexed(result.get("backup_path"), result.get("counts") or {}, result["fingerprint"])


def migrate_keys_cmd(dry_run: bool) -> None:
    """把记忆与备忘录的分区键迁移到当前 Amrita 的 uni_id 格式。"""
    rt = _runtime()
    _bot_only_stopped(rt, "迁移分区键（Bot 启动时会自动迁移）")

    async def memories() -> None:
        await recover_interrupted_remap(rt.maintenance)
        report = await migrate_partition_keys(rt.store, dry_run=dry_run)
        click.echo(f"已存储格式：{report.stored_format or '未记录'}")
        click.echo(f"当前格式：  {report.current_format}")
        if report.skipped:
            click.echo("记忆：分区键已是当前格式，无需迁移。")
            return
        verb = "需要改写" if dry_run else "已改写"
        click.echo(f"记忆：扫描 {report.scanned} 条，{verb} {report.rewritten} 条。")
        if report.unparsable:
            click.secho(
                f"{report.unparsable} 条记忆的分区键无法识别，保持原样（不会丢失）。", fg="yellow"
            )

    async def memos() -> None:
        # The ORM engine is created on first use (nonebot_plugin_orm's
        # get_session); the schema is the bot's: a fresh project has no table.
        try:
            report = await rt.memo.migrate_keys(dry_run=dry_run)
        except SQLAlchemyError as exc:
            if isinstance(exc, OperationalError) and "no such table" in str(exc):
                click.echo("备忘录：数据库中还没有备忘录表（Bot 尚未在此项目中启动过），无需迁移。")
                return
            _fail(f"读写备忘录表失败：{short_error(exc)}")
        finally:
            await dispose_memo_engine()
        verb = "需要迁移" if dry_run else "已迁移"
        click.echo(f"备忘录：共 {report.scanned} 条，{verb} {report.moved} 条。")
        for old, new, kept in report.conflicts:
            click.secho(
                f"  {old} 与 {new} 同时存在：保留较新的 {kept} 的内容（写入 {new}），另一条已丢弃。",
                fg="yellow",
            )

    async def work() -> None:
        await memories()
        await memos()
        if dry_run:
            click.echo("（试运行，未做任何修改）")

    _run(rt, work)


def reset_fingerprint_cmd() -> None:
    """只写入当前配置的指纹、不重新嵌入（逃生舱：确认模型实际未变时使用）。"""
    rt = _runtime()
    _bot_only_stopped(rt, "重置指纹")

    async def work() -> None:
        before = await stored_fingerprint(rt.store)
        after = await reset_fingerprint(rt.maintenance)
        click.echo(f"原指纹：{_fp(before)}")
        click.echo(f"新指纹：{_fp(after)}")
        click.secho(
            "注意：向量没有重新计算；若模型实际已变更，请改用 `ambot memory reindex`。", fg="yellow"
        )

    _run(rt, work)


def backup_list_cmd() -> None:
    """列出备份。"""
    rt = _runtime()
    bot = _bot(rt)
    if bot is not None:
        listing = _ask(bot, "GET", "/backups")
        _print_backups(listing["backups"], listing["backup_dir"])
        return
    backups = [backup_json(b) for b in list_backups(rt.config.backup_dir)]
    _print_backups(backups, rt.config.backup_dir)


def backup_create_cmd() -> None:
    """立即创建一份备份（不需要嵌入服务）。"""
    rt = _runtime()
    bot = _bot(rt)
    if bot is not None:
        made = _ask(bot, "POST", "/backups", {})
        click.echo(f"（由运行中的 Bot 创建，PID {bot.pid}）")
        click.echo(f"已创建备份：{made['path']}")
        click.echo(f"内容：{_counts(made['counts'])}（{_size(made['size'])}）")
        click.echo(f"保留最近 {made['keep']} 份备份（REEMBED_BACKUP_KEEP）。")
        return
    info = _run(rt, lambda: create_backup(rt.maintenance))
    click.echo(f"已创建备份：{info.path}")
    click.echo(f"内容：{_counts(info.counts)}（{_size(info.size)}）")
    click.echo(f"保留最近 {rt.config.env.reembed_backup_keep} 份备份（REEMBED_BACKUP_KEEP）。")


def backup_restore_cmd(file: Path, yes: bool) -> None:
    """从备份 FILE 恢复（用当前模型重新嵌入，替换当前内容；恢复前自动备份当前内容）。"""
    rt = _runtime()
    path = file
    if not path.exists() and not path.is_absolute() and (rt.config.backup_dir / file).exists():
        path = rt.config.backup_dir / file
    try:
        header, contents = load_backup(path)
    except BackupError as exc:
        _fail(str(exc))
    _require_confirmation(yes)

    def ask(current: str) -> None:
        click.echo(f"备份：{path}（创建于 {_when(str(header.get('created_at', '')))}）")
        for name, saved in contents.items():
            click.echo(f"  {name}：{len(saved.items)} 条")
        click.echo(f"将用当前模型 {current} 重新嵌入并替换当前内容（当前内容会先备份）。")
        if not yes and not _confirm("确定继续吗？"):
            click.echo("已取消。")
            raise click.exceptions.Exit(1)

    def done(counts: dict[str, Any], backup: Any) -> None:
        click.secho(f"恢复完成：{_counts(counts)}", fg="green")
        click.echo(f"恢复前的内容已备份到：{backup}")

    bot = _bot(rt)
    if bot is not None:  # only a backup of the bot's own backup directory, by name
        if path.resolve().parent != rt.config.backup_dir.resolve():
            _fail(
                f"Bot 正在运行（PID {bot.pid}）：只能恢复备份目录 {rt.config.backup_dir} 中的备份；"
                "请先把文件复制到该目录再按文件名恢复，或先停止 Bot"
            )
        ask(_fpj(_ask(bot, "GET", "/status")["fingerprint"]["current"]))
        job = _follow(bot, _ask(bot, "POST", f"/backups/{path.name}/restore", {}), "恢复")
        result = job.get("result") or {}
        done(result.get("counts") or {}, result.get("backup_path"))
        return
    progress = _Progress("恢复")

    async def work() -> None:
        ask(_fp(await current_fingerprint(rt.embedder)))
        try:
            report = await restore_backup(rt.maintenance, path, progress=progress)
        finally:
            progress.close()
        done(report.counts, report.backup)

    _run(rt, work)


def archive_cmd(action: str, **options: Any) -> None:
    """``ambot memory archive list|restore|sweep`` (the work: :mod:`.storage.archive_view`)."""
    rt = _runtime()
    lines = _run(rt, lambda: archive_command(rt.store, rt.config.file, action, **options))
    click.echo("\n".join(lines))
