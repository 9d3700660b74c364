"""Launcher behind the ``ambot memory`` entry point.

The spec declares ``memory = "amrita_plugin_memory.cli:memory [full_load]"``.
With that declaration ambot-inlinectl 0.2.2 runs ``amrita.init()`` and
``amrita.load_plugins()`` before any code of ours, so run outside a bot
project the operator gets a ``PyprojectNotFoundError`` (or ``ValueError: Cannot
find '[tool.nonebot]'``) traceback, and ``amrita.init()`` has already created
``logs/`` and ``plugins/`` in whatever directory they were in.

This module declares the whole command line (names, options, help) with
click, importing nothing but click and amrita's pyproject helpers, so
``ambot --help`` and ``ambot memory … --help`` answer at once. Only when a
command really runs does it do what ``[full_load]`` does, in the same order,
with one check in front:

1. find the bot project's ``pyproject.toml`` (with a ``[tool.nonebot]`` table)
   and stop with one clear line if there is none;
2. set ``AMBOT_COMMAND_CONTEXT=1`` so the plugin skips its startup check;
3. ``amrita.init()`` + ``amrita.load_plugins()``;
4. stop with one clear line if the project does not enable this plugin;
5. call the command's body in :mod:`amrita_plugin_memory.cli`.

Without ``-v`` the bot's start-up log is not shown (warnings and errors are).

It lives outside the ``amrita_plugin_memory`` package because importing any
module of the package runs the plugin's ``__init__``, which needs the plugin
loader. Imports go one way: the launcher imports :mod:`amrita_plugin_memory.cli`
(once the plugin is loaded), never the reverse.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import click

__all__ = ["fail", "find_bot_project", "memory"]

PLUGIN_NAME = "amrita_plugin_memory"
COMMAND_CONTEXT_ENV = "AMBOT_COMMAND_CONTEXT"


def fail(message: str) -> NoReturn:
    """One red ``错误：…`` line on stderr and exit code 1 (no traceback), before the plugin loads.

    (Once it has loaded, the command bodies end with ``cli.plumbing.fail``, the same line.)
    """
    click.secho(f"错误：{message}", fg="red", err=True)
    raise click.exceptions.Exit(1)


def find_bot_project(start: Path | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` at or above ``start`` that configures NoneBot.

    Amrita's own lookup stops at the first ``pyproject.toml``; a bot project is
    one whose file has a ``[tool.nonebot]`` table, as ``nonebot.load_from_toml``
    requires. An unreadable or malformed file is "not a bot project".
    """
    from amrita.utils.pyproject_io import find_pyproject

    found = find_pyproject(start)
    if found is None:
        return None
    try:
        with found.open("rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return None
    tool = data.get("tool")
    if not isinstance(tool, dict) or not isinstance(tool.get("nonebot"), dict):
        return None
    return found


def _bootstrap(verbose: bool) -> ModuleType:
    """Load the bot project's plugins and return the module with the command bodies.

    Unless ``verbose``, NoneBot's console log is limited to warnings (its
    ``LOG_LEVEL``; an environment variable wins over ``.env``), so a command
    prints its own output and not the bot's start-up log; Amrita's log file
    still receives everything.
    """
    project = find_bot_project()
    if project is None:
        fail(
            "当前目录不在 AmritaBot 项目中（向上未找到含 [tool.nonebot] 的 pyproject.toml），"
            "请在 Bot 项目根目录运行 ambot memory …"
        )
    os.environ[COMMAND_CONTEXT_ENV] = "1"

    import amrita
    import nonebot

    if not verbose:
        os.environ["LOG_LEVEL"] = "WARNING"
        # What amrita.init() logs before nonebot.init() reads LOG_LEVEL.
        nonebot.logger.configure(extra={"nonebot_log_level": "WARNING"})

    amrita.init()
    amrita.load_plugins()
    if nonebot.get_plugin(PLUGIN_NAME) is None:
        fail(
            f"项目 {project} 没有加载 {PLUGIN_NAME} 插件"
            f"（请在 [tool.amrita] plugins 中启用它，或用 -v 查看加载错误）"
        )

    from amrita_plugin_memory import cli

    return cli


def _run(name: str, **kwargs: Any) -> None:
    """Bootstrap the bot (once) and run ``<name>_cmd`` of :mod:`amrita_plugin_memory.cli`."""
    verbose = click.get_current_context().find_object(_Verbose) is not None
    getattr(_bootstrap(verbose), f"{name}_cmd")(**kwargs)


class _Verbose:
    """Marker object: ``-v`` was given on the ``memory`` group."""


@click.group(name="memory")
@click.option("-v", "--verbose", is_flag=True, help="显示 Bot 启动日志（默认只显示警告与错误）")
@click.pass_context
def memory(ctx: click.Context, verbose: bool) -> None:
    """长期记忆插件运维：嵌入指纹、重映射、备份、分区键迁移、用户数据导出与遗忘、导入记忆。"""
    if verbose:
        ctx.obj = _Verbose()


@memory.command("status")
@click.option("--json", "as_json", is_flag=True, help="以 JSON 输出（字段同管理 API /status）")
def status(as_json: bool) -> None:
    """显示嵌入指纹、记忆分布、分区键版本、维护标记与备份列表。"""
    _run("status", as_json=as_json)


@memory.command("reindex")
@click.option("--yes", "-y", is_flag=True, help="不询问，直接执行")
def reindex(yes: bool) -> None:
    """用当前嵌入模型强制全量重映射（先自动备份），并写入新指纹。"""
    _run("reindex", yes=yes)


@memory.command("migrate-keys")
@click.option("--dry-run", is_flag=True, help="只统计，不改写")
def migrate_keys(dry_run: bool) -> None:
    """把记忆的分区键迁移到当前 Amrita 的 uni_id 格式。"""
    _run("migrate_keys", dry_run=dry_run)


@memory.command("reset-fingerprint")
def reset_fingerprint() -> None:
    """只写入当前配置的指纹、不重新嵌入（逃生舱：确认模型实际未变时使用）。"""
    _run("reset_fingerprint")


@memory.group("archive")
def archive() -> None:
    """归档：超过寿命的记忆与更新前的旧版本（可恢复，从不删除）。"""


@archive.command("list")
@click.option("--partition", "-p", default=None, help="只列出该分区（如 QQPlatform_Private_10001）")
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(1, 10_000),
    default=20,
    show_default=True,
    help="最多列出多少条",
)
def archive_list(partition: str | None, limit: int) -> None:
    """列出归档（最新的在前，含内容与归档原因）。"""
    _run("archive", action="list", partition=partition, limit=limit)


@archive.command("restore")
@click.argument("row_id", metavar="ID")
def archive_restore(row_id: str) -> None:
    """把归档中的 ID 恢复为记忆（旧版本则替换当前内容，当前内容存入归档）。"""
    _run("archive", action="restore", row_id=row_id)


@archive.command("sweep")
def archive_sweep() -> None:
    """立即执行一次归档清理（把超过寿命的记忆移入归档）。"""
    _run("archive", action="sweep")


@memory.command("export")
@click.option("--user", "user", required=True, metavar="QQ号", help="要导出的用户的 QQ 号")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="写入该文件（权限 0600）；不给则输出到标准输出",
)
def export(user: str, out: Path | None) -> None:
    """导出一个用户的全部数据（记忆、归档、备忘录、画像、群聊消息等，JSON）。"""
    _run("export", user=user, out=out)


@memory.command("forget")
@click.option("--user", "user", required=True, metavar="QQ号", help="要遗忘的用户的 QQ 号")
@click.option("--yes", "-y", is_flag=True, help="不询问，直接执行")
def forget(user: str, yes: bool) -> None:
    """删除一个用户的全部数据（含备份中的；不可撤销），并保证旧备份恢复时不会带回。"""
    _run("forget", user=user, yes=yes)


@memory.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def import_memories(file: Path) -> None:
    """从 JSON Lines 文件 FILE（或 export 的导出文件）导入记忆；重复执行不会重复添加。"""
    _run("import", file=file)


@memory.group("backup")
def backup() -> None:
    """备份管理（备份只含 ids / documents / metadatas，恢复时用当前模型重新嵌入）。"""


@backup.command("list")
def backup_list() -> None:
    """列出备份。"""
    _run("backup_list")


@backup.command("create")
def backup_create() -> None:
    """立即创建一份备份（不需要嵌入服务）。"""
    _run("backup_create")


@backup.command("restore")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--yes", "-y", is_flag=True, help="不询问，直接执行")
def backup_restore(file: Path, yes: bool) -> None:
    """从备份 FILE 恢复（用当前模型重新嵌入，替换当前内容；恢复前自动备份当前内容）。"""
    _run("backup_restore", file=file, yes=yes)
