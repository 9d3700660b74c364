"""``ambot memory status | reindex | migrate-keys | reset-fingerprint``.

``status`` and ``reindex`` also work while the bot runs (asked through its
admin API); ``migrate-keys`` and ``reset-fingerprint`` need the bot stopped.
"""

from __future__ import annotations

import json
from typing import Any

import click
from sqlalchemy.exc import SQLAlchemyError

from ..core.errors import VectorStoreError
from ..core.text import short_error
from ..embedding import (
    collect_status,
    current_fingerprint,
    list_backups,
    recover_interrupted_remap,
    remap,
    reset_fingerprint,
    stored_fingerprint,
)
from ..embedding.report_json import backup_json, status_json
from ..infra.bot_link import BotEndpoint
from ..infra.terminal import ask_yes_no
from ..storage.memo_store import dispose_memo_engine
from ..storage.models import missing_table
from ..storage.usage import usage_report
from ..upkeep.rekey import migrate_partition_keys
from .output import counts_text, fp, fpj, print_backups, print_status
from .plumbing import (
    Progress,
    ask,
    bot_of,
    bot_only_stopped,
    fail,
    follow,
    require_confirmation,
    run,
    runtime,
)

__all__ = ["migrate_keys_cmd", "reindex_cmd", "reset_fingerprint_cmd", "status_cmd"]


def status_cmd(as_json: bool = False) -> None:
    """显示嵌入指纹、记忆分布、分区键版本、维护标记与备份列表。"""
    rt = runtime()
    bot = bot_of(rt, writes=False)
    if bot is not None:
        report = ask(bot, "GET", "/status?fresh=1")
        if as_json:
            click.echo(json.dumps(report, ensure_ascii=False, indent=2))
            return
        click.echo(f"（Bot 正在运行，PID {bot.pid}：以下内容由运行中的 Bot 提供）")
        print_status(report, rt.calendar)
        return

    async def work() -> dict[str, Any] | VectorStoreError:
        try:
            report = status_json(await collect_status(rt.maintenance), rt.config.backup_dir)
        except VectorStoreError as exc:
            return exc
        try:
            report["usage"] = await usage_report(rt.budget)
        finally:
            await dispose_memo_engine()
        return report

    result = run(rt, work)
    if isinstance(result, VectorStoreError):
        if as_json:
            fail(str(result))
        # Still show what needs no vector store (e.g. another process holds it).
        click.echo(f"向量库：{rt.connection.describe()}（不可用）")
        backups = [backup_json(b) for b in list_backups(rt.config.backup_dir)]
        print_backups(backups, rt.config.backup_dir, rt.calendar)
        fail(str(result))
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False, indent=2))
        return
    print_status(result, rt.calendar)


def reindex_cmd(yes: bool) -> None:
    """用当前嵌入模型强制全量重映射（先自动备份），并写入新指纹。"""
    require_confirmation(yes)
    rt = runtime()
    bot = bot_of(rt)
    if bot is not None:
        _reindex_in_bot(bot, yes)
        return
    progress = Progress("重映射")

    async def work() -> None:
        await recover_interrupted_remap(rt.maintenance)
        current = await current_fingerprint(rt.embedder)
        stored = await stored_fingerprint(rt.store)
        _ask_reindex(fp(stored), fp(current), await rt.store.count_all(), yes)
        try:
            report = await remap(rt.maintenance, progress=progress)
        finally:
            progress.close()
        backup = str(report.backup) if report.backup else None
        _print_reindexed(backup, report.counts, fp(report.fingerprint))

    run(rt, work)


def _ask_reindex(stored: str, current: str, total: int, yes: bool) -> None:
    click.echo(f"已存储指纹：{stored}")
    click.echo(f"当前配置：  {current}")
    click.echo(f"将用当前模型重新嵌入 {total} 条记忆（以及已有的知识库条目），开始前自动备份。")
    if not yes and not ask_yes_no("确定继续吗？"):
        click.echo("已取消。")
        raise click.exceptions.Exit(1)


def _print_reindexed(backup: str | None, counts: dict[str, Any], fingerprint: str) -> None:
    if backup is None:
        click.echo(f"集合为空，已写入指纹：{fingerprint}")
        return
    click.secho(f"重映射完成：{counts_text(counts)}", fg="green")
    click.echo(f"新指纹：{fingerprint}")
    click.echo(f"备份：{backup}")


def _reindex_in_bot(bot: BotEndpoint, yes: bool) -> None:
    fingerprint = ask(bot, "GET", "/status")["fingerprint"]
    total = ask(bot, "GET", "/partitions?fresh=1&limit=1")["memories"]
    click.echo(f"Bot 正在运行（PID {bot.pid}）：重映射在 Bot 内执行，期间写入记忆会被拒绝。")
    _ask_reindex(fpj(fingerprint["stored"]), fpj(fingerprint["current"]), total, yes)
    result = follow(bot, ask(bot, "POST", "/reindex", {}), "重映射").get("result") or {}
    _print_reindexed(result.get("backup_path"), result.get("counts") or {}, result["fingerprint"])


def migrate_keys_cmd(dry_run: bool) -> None:
    """把记忆与备忘录的分区键迁移到当前 Amrita 的 uni_id 格式。"""
    rt = runtime()
    bot_only_stopped(rt, "迁移分区键（Bot 启动时会自动迁移）")

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
            if missing_table(exc):
                click.echo("备忘录：数据库中还没有备忘录表（Bot 尚未在此项目中启动过），无需迁移。")
                return
            fail(f"读写备忘录表失败：{short_error(exc)}")
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

    run(rt, work)


def reset_fingerprint_cmd() -> None:
    """只写入当前配置的指纹、不重新嵌入（逃生舱：确认模型实际未变时使用）。"""
    rt = runtime()
    bot_only_stopped(rt, "重置指纹")

    async def work() -> None:
        before = await stored_fingerprint(rt.store)
        after = await reset_fingerprint(rt.maintenance)
        click.echo(f"原指纹：{fp(before)}")
        click.echo(f"新指纹：{fp(after)}")
        click.secho(
            "注意：向量没有重新计算；若模型实际已变更，请改用 `ambot memory reindex`。", fg="yellow"
        )

    run(rt, work)
