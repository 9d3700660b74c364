"""``ambot memory``: the implementation of the maintenance commands.

The command line itself (names, options, help) is declared in the launcher
:mod:`amrita_plugin_memory_ctl` (the ``ambot.commands`` entry point), so
``--help`` answers without loading the bot. When a command really runs, the
launcher checks for a bot project, sets ``AMBOT_COMMAND_CONTEXT=1`` (the
plugin then skips its startup check), runs ``amrita.init()`` +
``amrita.load_plugins()`` and calls the matching ``*_cmd`` function here
(inside the click context). The bot's startup hooks have not run (no
AmritaConfig, no scheduler), so every
command builds its own event loop with :func:`asyncio.run` and uses only the
plugin's :class:`~.services.MemoryRuntime`.

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

from amrita_plugin_memory_ctl import fail as _fail

from .core.console import ask_yes_no as _confirm
from .core.console import stdin_is_tty as _is_tty
from .core.errors import EmbeddingError, VectorStoreError
from .embedding import (
    BackupError,
    FingerprintInfo,
    RemapError,
    StatusReport,
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
from .services import MemoryRuntime
from .storage.keys import migrate_partition_keys

__all__ = [
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


def _print_backups(backups: list[Any], backup_dir: Path) -> None:
    click.echo(f"备份（{backup_dir}）：")
    if not backups:
        click.echo("  （无）")
        return
    for b in backups:
        counts = "，".join(f"{name} {n} 条" for name, n in b.counts.items()) or "内容未知"
        click.echo(f"  {b.path.name}  {_when(b.created_at)}  {counts}  {_size(b.size)}")


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------


def status_cmd() -> None:
    """显示嵌入指纹、记忆分布、分区键版本与备份列表。"""
    rt = _runtime()

    async def work() -> StatusReport | VectorStoreError:
        try:
            return await collect_status(rt.maintenance)
        except VectorStoreError as exc:
            return exc

    report = _run(rt, work)
    if isinstance(report, VectorStoreError):
        # Still show what needs no vector store (e.g. a running bot holds it).
        click.echo(f"向量库：{rt.connection.describe()}（不可用）")
        _print_backups(list_backups(rt.config.backup_dir), rt.config.backup_dir)
        _fail(str(report))
    click.echo(f"向量库：{report.vector_db}")
    click.echo("嵌入指纹：")
    click.echo(f"  已存储：{_fp(report.stored)}")
    if report.current is None:
        click.echo(f"  当前：  无法计算（{report.current_error}）")
        click.echo("  状态：  未知 —— 嵌入服务恢复后重新运行本命令")
    else:
        click.echo(f"  当前：  {_fp(report.current)}")
        if report.match:
            click.secho("  状态：  一致", fg="green")
        elif report.stored is None and report.memory_total == 0:
            click.echo("  状态：  记忆库为空，下次启动 Bot 时自动写入指纹")
        else:
            click.secho(
                "  状态：  不一致 —— 检索结果会劣化；运行 `ambot memory reindex` 重映射，"
                "确认模型未变时可运行 `ambot memory reset-fingerprint`",
                fg="yellow",
            )
    click.echo(f"记忆：共 {report.memory_total} 条")
    if report.distribution:
        width = max(_width(p) for p, _ in report.distribution)
        click.echo(f"  {_pad('分区', width)}  {_pad('范围', 5)}  条数")
        for (partition, scope), n in sorted(report.distribution.items()):
            click.echo(f"  {_pad(partition, width)}  {_pad(scope, 5)}  {n}")
    knowledge = f"{report.knowledge_count} 条" if report.knowledge_count is not None else "不存在"
    click.echo(f"知识库 {report.knowledge_name}：{knowledge}")
    click.echo("分区键格式：")
    click.echo(f"  已存储：{report.key_format_stored or '未记录'}")
    click.echo(f"  当前：  {report.key_format_current}")
    if report.key_format_stored == report.key_format_current:
        click.echo("  状态：  一致")
    else:
        click.echo("  状态：  待迁移 —— 运行 `ambot memory migrate-keys`（Bot 启动时也会自动迁移）")
    if report.pending_temps:
        click.secho(
            f"未完成的重映射：{', '.join(report.pending_temps)}（下次启动 Bot 或运行 reindex 时自动处理）",
            fg="yellow",
        )
    _print_backups(report.backups, rt.config.backup_dir)


def reindex_cmd(yes: bool) -> None:
    """用当前嵌入模型强制全量重映射（先自动备份），并写入新指纹。"""
    _require_confirmation(yes)
    rt = _runtime()
    progress = _Progress("重映射")

    async def work() -> None:
        await recover_interrupted_remap(rt.maintenance)
        current = await current_fingerprint(rt.embedder)
        stored = await stored_fingerprint(rt.store)
        total = await rt.store.count()
        click.echo(f"已存储指纹：{_fp(stored)}")
        click.echo(f"当前配置：  {_fp(current)}")
        click.echo(f"将用当前模型重新嵌入 {total} 条记忆（以及已有的知识库条目），开始前自动备份。")
        if not yes and not _confirm("确定继续吗？"):
            click.echo("已取消。")
            raise click.exceptions.Exit(1)
        try:
            report = await remap(rt.maintenance, progress=progress)
        finally:
            progress.close()
        if report.backup is None:
            click.echo(f"集合为空，已写入指纹：{_fp(report.fingerprint)}")
            return
        counts = "，".join(f"{name} {n} 条" for name, n in report.counts.items())
        click.secho(f"重映射完成：{counts}", fg="green")
        click.echo(f"新指纹：{_fp(report.fingerprint)}")
        click.echo(f"备份：{report.backup}")

    _run(rt, work)


def migrate_keys_cmd(dry_run: bool) -> None:
    """把记忆的分区键迁移到当前 Amrita 的 uni_id 格式。"""
    rt = _runtime()

    async def work() -> None:
        await recover_interrupted_remap(rt.maintenance)
        report = await migrate_partition_keys(rt.store, dry_run=dry_run)
        click.echo(f"已存储格式：{report.stored_format or '未记录'}")
        click.echo(f"当前格式：  {report.current_format}")
        if report.skipped:
            click.echo("分区键已是当前格式，无需迁移。")
            return
        verb = "需要改写" if dry_run else "已改写"
        click.echo(f"扫描 {report.scanned} 条，{verb} {report.rewritten} 条。")
        if report.unparsable:
            click.secho(
                f"{report.unparsable} 条记忆的分区键无法识别，保持原样（不会丢失）。", fg="yellow"
            )
        if dry_run:
            click.echo("（试运行，未做任何修改）")

    _run(rt, work)


def reset_fingerprint_cmd() -> None:
    """只写入当前配置的指纹、不重新嵌入（逃生舱：确认模型实际未变时使用）。"""
    rt = _runtime()

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
    _print_backups(list_backups(rt.config.backup_dir), rt.config.backup_dir)


def backup_create_cmd() -> None:
    """立即创建一份备份（不需要嵌入服务）。"""
    rt = _runtime()
    info = _run(rt, lambda: create_backup(rt.maintenance))
    counts = "，".join(f"{name} {n} 条" for name, n in info.counts.items())
    click.echo(f"已创建备份：{info.path}")
    click.echo(f"内容：{counts}（{_size(info.size)}）")
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
    progress = _Progress("恢复")

    async def work() -> None:
        current = await current_fingerprint(rt.embedder)
        click.echo(f"备份：{path}（创建于 {_when(str(header.get('created_at', '')))}）")
        for name, saved in contents.items():
            click.echo(f"  {name}：{len(saved.items)} 条")
        click.echo(f"将用当前模型 {_fp(current)} 重新嵌入并替换当前内容（当前内容会先备份）。")
        if not yes and not _confirm("确定继续吗？"):
            click.echo("已取消。")
            raise click.exceptions.Exit(1)
        try:
            report = await restore_backup(rt.maintenance, path, progress=progress)
        finally:
            progress.close()
        counts = "，".join(f"{name} {n} 条" for name, n in report.counts.items())
        click.secho(f"恢复完成：{counts}", fg="green")
        click.echo(f"恢复前的内容已备份到：{report.backup}")

    _run(rt, work)
