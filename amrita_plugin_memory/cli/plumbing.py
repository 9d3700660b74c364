"""What every ``ambot memory`` command needs: the runtime, a loop, the running bot.

Commands open the plugin's :class:`~..services.MemoryRuntime` in this process,
unless the project's bot is running (:func:`bot_of`; local or remote mode):
then the commands that support it ask the bot through its admin API (local
token, see :mod:`..infra.bot_link`), and the others refuse. Expected failures
become one ``错误：…`` line (in the words ``core/errors.WORDS`` gives their kind) and
exit 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import click

from ..core.errors import describe
from ..infra.bot_link import BotEndpoint, BotLinkError, follow_job, running_bot, serving_bot
from ..infra.terminal import stdin_is_tty
from ..services import MemoryRuntime
from ..storage.chroma.connection import LOCK_FILE_NAME

__all__ = [
    "API",
    "Progress",
    "ask",
    "bot_of",
    "bot_only_stopped",
    "fail",
    "follow",
    "require_confirmation",
    "run",
    "runtime",
]

T = TypeVar("T")

API = "/api/memory"


def fail(message: str) -> NoReturn:
    """One red ``错误：…`` line on stderr and exit code 1 (no traceback).

    The same line as the launcher's own ``fail`` (for the failures before the
    plugin loads); this package never imports the launcher: it imports us.
    """
    click.secho(f"错误：{message}", fg="red", err=True)
    raise click.exceptions.Exit(1)


def runtime() -> MemoryRuntime:
    """The plugin's runtime; the local data dir lock is released when the command ends.

    Looked up through NoneBot's plugin registry (the launcher has loaded the
    plugin), so this package never imports the plugin entry module.
    """
    import nonebot

    plugin = nonebot.get_plugin("amrita_plugin_memory")
    rt = getattr(plugin.module, "runtime", None) if plugin is not None else None
    if not isinstance(rt, MemoryRuntime):
        fail("插件配置无效，未能初始化（详见上方 [Memory] 日志），请修正配置后重试")
    rt.connection.prefer_in_process()
    click.get_current_context().call_on_close(rt.connection.close)
    return rt


def run(rt: MemoryRuntime, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` on a fresh event loop; expected errors become one line and exit 1."""

    async def main() -> T:
        try:
            return await work()
        finally:
            await rt.leave_loop()

    try:
        return asyncio.run(main())
    except Exception as exc:
        said = describe(exc)
        if said is None:
            raise
        fail(said.cli)


def bot_of(rt: MemoryRuntime, *, writes: bool = True) -> BotEndpoint | None:
    """The running bot of this project (``None``: do the work in this process).

    Local mode: the bot that holds the local data dir (only one process may
    open the embedded ChromaDB). Remote mode: the bot that published its
    token in this project's data dir and listens: a command that writes in
    this process would have none of the bot's partition locks and write
    gate (a sweep here could delete a memory the bot updates at that moment),
    so the commands ask the bot, as in local mode. A remote-mode bot that
    runs but cannot be reached ends a command that ``writes``; one that only
    reads works here, with a note.
    """
    if rt.config.env.vector_db_type == "local":
        return running_bot(rt.config.data_dir, rt.config.chroma_dir / LOCK_FILE_NAME)
    try:
        return serving_bot(rt.config.data_dir)
    except BotLinkError as exc:
        if writes:
            fail(str(exc))
        click.secho(f"注意：{exc}（本命令只读取数据，改为在本进程中读取）", fg="yellow", err=True)
        return None


def ask(
    bot: BotEndpoint,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    timeout: float = 60.0,
) -> Any:
    """``data`` of the bot's answer to ``method API+path``; its error message ends the command."""
    try:
        return bot.request(method, API + path, body, timeout=timeout)
    except BotLinkError as exc:
        fail(str(exc))


def follow(bot: BotEndpoint, job: dict[str, Any], label: str) -> dict[str, Any]:
    """Show the progress of a job running inside the bot; its final state (exit 1 if it failed)."""
    click.echo(f"（在运行中的 Bot 内执行，PID {bot.pid}；进度：）")
    progress = Progress(label)
    try:
        final = follow_job(bot, job, progress)
    except BotLinkError as exc:
        fail(str(exc))
    finally:
        progress.close()
    if final.get("state") != "done":
        fail(str(final.get("message") or f"{label}失败"))
    return final


def bot_only_stopped(rt: MemoryRuntime, what: str) -> None:
    """End the command when the project's bot is running (``what`` needs it stopped)."""
    bot = bot_of(rt)
    if bot is None:
        return
    why = (
        "本地向量库同一时间只能由一个进程打开"
        if rt.config.env.vector_db_type == "local"
        else "它正在读写同一个远程向量库，本命令的修改会与它的写入冲突"
    )
    fail(f"Bot 正在运行（PID {bot.pid}），{what}需要先停止 Bot（{why}）")


def require_confirmation(yes: bool) -> None:
    """A command that asks first needs a terminal, or ``--yes``."""
    if not yes and not stdin_is_tty():
        fail("该操作需要确认，但当前不是交互终端；确认无误后加 --yes 重新运行")


class Progress:
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
