"""``ambot memory export --user <QQ号> [--out FILE]`` and ``ambot memory forget --user <QQ号>``.

The work is :class:`~..upkeep.users.user_data.UserData`. While a bot of this
project runs (either vector store mode: the bot keeps memos, personas, group
windows and the L3 loop's state in memory), the command asks it through the
admin API (``GET /api/memory/users/{id}/export``, ``GET …/forget``,
``DELETE /api/memory/users/{id}``); otherwise it opens the stores itself.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from sqlalchemy.exc import SQLAlchemyError

from ..core.text import short_error
from ..infra.files import atomic_write_text
from ..infra.terminal import ask_yes_no
from ..services import MemoryRuntime
from ..storage.groups.stores import GroupStores
from ..storage.memo_store import dispose_memo_engine
from ..storage.models import missing_table
from ..tools.args import ToolArgError, parse_user_id
from ..upkeep.users.user_data import ForgetBlocked, UserData
from .plumbing import ask, bot_of, fail, require_confirmation, run, runtime

__all__ = ["USER_TIMEOUT", "export_cmd", "forget_cmd"]

USER_TIMEOUT = 1800.0
"""How long the command waits for the bot (a user with many memories and large backups)."""

T = TypeVar("T")


def _user(value: str) -> str:
    try:
        return parse_user_id(value)
    except ToolArgError as exc:
        fail(str(exc))


async def _here(rt: MemoryRuntime, work: Callable[[UserData], Awaitable[T]]) -> T:
    """``work`` on this process's stores (no bot runs); database errors end the command."""
    try:
        return await work(rt.user_data(GroupStores.build(rt.config.file, rt.store.coherence)))
    except ForgetBlocked as exc:
        fail(str(exc))
    except SQLAlchemyError as exc:
        if missing_table(exc):
            fail("数据库中还没有本插件的表（Bot 尚未在此项目中启动过）：请先启动一次 Bot 再重试")
        fail(f"读写数据库失败：{short_error(exc)}")
    finally:
        await dispose_memo_engine()


def export_cmd(user: str, out: Path | None) -> None:
    """导出一个用户的全部数据（JSON）。"""
    user_id = _user(user)
    rt = runtime()
    bot = bot_of(rt, writes=False)
    if bot is not None:
        document = ask(bot, "GET", f"/users/{user_id}/export", timeout=USER_TIMEOUT)
    else:
        document = run(rt, lambda: _here(rt, lambda data: data.export(user_id)))
    text = json.dumps(document, ensure_ascii=False, indent=1) + "\n"
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        atomic_write_text(out, text, mode=0o600)
    except OSError as exc:
        fail(f"无法写入 {out}：{exc}")
    memories, archived = len(document.get("memories") or []), len(document.get("archive") or [])
    click.echo(f"已导出用户 {user_id} 的数据到 {out}（记忆 {memories} 条，归档 {archived} 条）")


def _print(title: str, lines: list[str]) -> None:
    click.echo(title)
    for line in lines:
        click.echo(f"  - {line}")


def _show_done(user_id: str, result: dict[str, Any]) -> None:
    counts = result["counts"]
    _print(f"已遗忘用户 {user_id}：", list(result["lines"]))
    click.echo(
        f"  已改写 {counts.get('backups', 0)} 份备份（删除 {counts.get('backup_rows', 0)} 条）。"
    )
    _print("以下不会删除：", list(result.get("kept") or []))


def _confirm(user_id: str, preview: dict[str, Any], yes: bool) -> None:
    _print(
        f"将永久删除用户 {user_id}（{preview['partition']}）的以下数据：", list(preview["lines"])
    )
    counts = preview["counts"]
    click.echo(f"  另外会改写全部 {counts.get('backups', 0)} 份备份，删除其中该用户的数据。")
    _print("以下不会删除：", list(preview.get("kept") or []))
    if not yes and not ask_yes_no("确定删除吗？此操作不可撤销"):
        click.echo("已取消。")
        raise click.exceptions.Exit(1)


def forget_cmd(user: str, yes: bool) -> None:
    """删除一个用户的全部数据（含备份中的；不可撤销）。"""
    user_id = _user(user)
    rt = runtime()
    require_confirmation(yes)
    bot = bot_of(rt)
    if bot is not None:
        _confirm(user_id, ask(bot, "GET", f"/users/{user_id}/forget"), yes)
        click.echo(f"（由运行中的 Bot 执行，PID {bot.pid}）")
        _show_done(user_id, ask(bot, "DELETE", f"/users/{user_id}", timeout=USER_TIMEOUT))
        return

    async def work(data: UserData) -> dict[str, Any]:
        _confirm(user_id, (await data.preview(user_id)).report(user_id), yes)
        return (await data.forget(user_id)).report(user_id)

    _show_done(user_id, run(rt, lambda: _here(rt, work)))
