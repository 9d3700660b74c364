"""``ambot memory backup list | create | restore`` (also while the bot runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..embedding import (
    BackupError,
    create_backup,
    current_fingerprint,
    list_backups,
    load_backup,
    restore_backup,
)
from ..embedding.report_json import backup_json
from ..infra.terminal import ask_yes_no
from .output import counts_text, fp, fpj, print_backups, size, when
from .plumbing import Progress, ask, bot_of, fail, follow, require_confirmation, run, runtime

__all__ = ["backup_create_cmd", "backup_list_cmd", "backup_restore_cmd"]


def backup_list_cmd() -> None:
    """列出备份。"""
    rt = runtime()
    bot = bot_of(rt, writes=False)
    if bot is not None:
        listing = ask(bot, "GET", "/backups")
        print_backups(listing["backups"], listing["backup_dir"], rt.calendar)
        return
    backups = [backup_json(b) for b in list_backups(rt.config.backup_dir)]
    print_backups(backups, rt.config.backup_dir, rt.calendar)


def backup_create_cmd() -> None:
    """立即创建一份备份（不需要嵌入服务）。"""
    rt = runtime()
    bot = bot_of(rt)
    if bot is not None:
        made = ask(bot, "POST", "/backups", {})
        click.echo(f"（由运行中的 Bot 创建，PID {bot.pid}）")
        click.echo(f"已创建备份：{made['path']}")
        click.echo(f"内容：{counts_text(made['counts'])}（{size(made['size'])}）")
        click.echo(f"保留最近 {made['keep']} 份备份（REEMBED_BACKUP_KEEP）。")
        return
    info = run(rt, lambda: create_backup(rt.maintenance))
    click.echo(f"已创建备份：{info.path}")
    click.echo(f"内容：{counts_text(info.counts)}（{size(info.size)}）")
    click.echo(f"保留最近 {rt.config.env.reembed_backup_keep} 份备份（REEMBED_BACKUP_KEEP）。")


def backup_restore_cmd(file: Path, yes: bool) -> None:
    """从备份 FILE 恢复（用当前模型重新嵌入，替换当前内容；恢复前自动备份当前内容）。"""
    rt = runtime()
    path = file
    if not path.exists() and not path.is_absolute() and (rt.config.backup_dir / file).exists():
        path = rt.config.backup_dir / file
    try:
        header, contents = load_backup(path)
    except BackupError as exc:
        fail(str(exc))
    require_confirmation(yes)

    def confirm(current: str) -> None:
        click.echo(f"备份：{path}（创建于 {when(str(header.get('created_at', '')), rt.calendar)}）")
        for name, saved in contents.items():
            click.echo(f"  {name}：{len(saved.items)} 条")
        click.echo(f"将用当前模型 {current} 重新嵌入并替换当前内容（当前内容会先备份）。")
        if not yes and not ask_yes_no("确定继续吗？"):
            click.echo("已取消。")
            raise click.exceptions.Exit(1)

    def done(counts: dict[str, Any], backup: Any) -> None:
        click.secho(f"恢复完成：{counts_text(counts)}", fg="green")
        click.echo(f"恢复前的内容已备份到：{backup}")

    bot = bot_of(rt)
    if bot is not None:  # only a backup of the bot's own backup directory, by name
        if path.resolve().parent != rt.config.backup_dir.resolve():
            fail(
                f"Bot 正在运行（PID {bot.pid}）：只能恢复备份目录 {rt.config.backup_dir} 中的备份；"
                "请先把文件复制到该目录再按文件名恢复，或先停止 Bot"
            )
        confirm(fpj(ask(bot, "GET", "/status")["fingerprint"]["current"]))
        job = follow(bot, ask(bot, "POST", f"/backups/{path.name}/restore", {}), "恢复")
        result = job.get("result") or {}
        done(result.get("counts") or {}, result.get("backup_path"))
        return
    progress = Progress("恢复")

    async def work() -> None:
        confirm(fp(await current_fingerprint(rt.embedder)))
        try:
            report = await restore_backup(rt.maintenance, path, progress=progress)
        finally:
            progress.close()
        done(report.counts, report.backup)

    run(rt, work)
