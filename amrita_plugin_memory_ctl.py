"""Launcher behind the ``ambot memory`` entry point.

The spec declares ``memory = "amrita_plugin_memory.cli:memory [full_load]"``.
With that declaration ambot-inlinectl 0.2.2 runs ``amrita.init()`` and
``amrita.load_plugins()`` before any code of ours, so run outside a bot
project the operator gets a ``PyprojectNotFoundError`` (or ``ValueError: Cannot
find '[tool.nonebot]'``) traceback, and ``amrita.init()`` has already created
``logs/`` and ``plugins/`` in whatever directory they were in.

This module does what ``[full_load]`` does, in the same order, with one check
in front: it is a plain entry point (imported when ``ambot`` lists its
commands, so it imports nothing but click and amrita's pyproject helpers),
and only when ``ambot memory …`` is really invoked does it

1. find the bot project's ``pyproject.toml`` (with a ``[tool.nonebot]`` table)
   and stop with one clear line if there is none;
2. set ``AMBOT_COMMAND_CONTEXT=1`` so the plugin skips its startup check;
3. ``amrita.init()`` + ``amrita.load_plugins()``;
4. stop with one clear line if the project does not enable this plugin;
5. hand the command line to :data:`amrita_plugin_memory.cli.memory`.

It lives outside the ``amrita_plugin_memory`` package because importing any
module of the package runs the plugin's ``__init__``, which needs the plugin
loader.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, NoReturn

import click

__all__ = ["fail", "find_bot_project", "memory"]

PLUGIN_NAME = "amrita_plugin_memory"
COMMAND_CONTEXT_ENV = "AMBOT_COMMAND_CONTEXT"


def fail(message: str) -> NoReturn:
    """One red ``错误：…`` line on stderr and exit code 1 (no traceback)."""
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


def _bootstrap() -> click.Command:
    """Load the bot project's plugins and return the real ``memory`` group."""
    project = find_bot_project()
    if project is None:
        fail(
            "当前目录不在 AmritaBot 项目中（向上未找到含 [tool.nonebot] 的 pyproject.toml），"
            "请在 Bot 项目根目录运行 ambot memory …"
        )
    os.environ[COMMAND_CONTEXT_ENV] = "1"

    import amrita
    import nonebot

    amrita.init()
    amrita.load_plugins()
    if nonebot.get_plugin(PLUGIN_NAME) is None:
        fail(
            f"项目 {project} 没有加载 {PLUGIN_NAME} 插件"
            f"（请在 [tool.amrita] plugins 中启用它，或查看上方的加载错误）"
        )

    from amrita_plugin_memory.cli import memory as real

    return real


class MemoryLauncher(click.Command):
    """Stands in for the real group until the command is actually run.

    ``ambot --help`` / ``ambot cmds`` only read ``name`` and ``help``; the
    real group is loaded when click builds this command's context, exactly
    the moment ambot-inlinectl's ``[full_load]`` proxy would load it.
    """

    def __init__(self) -> None:
        super().__init__(name="memory", help="长期记忆插件的运维命令（指纹、重映射、备份、分区键）")
        self._real: click.Command | None = None

    def resolve(self) -> click.Command:
        if self._real is None:
            self._real = _bootstrap()
        return self._real

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        # The real group builds the context, so --help, argument parsing and
        # sub-commands behave exactly as if it were registered directly.
        return self.resolve().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        return self.resolve().invoke(ctx)


memory = MemoryLauncher()
