"""The terminal and the command line: shared by the plugin entry, the startup check and the CLI."""

from __future__ import annotations

import sys

__all__ = ["ask_yes_no", "cli_subcommand", "stdin_is_tty"]


def stdin_is_tty() -> bool:
    """Whether a person can answer a question on stdin (not systemd, Docker or a pipe)."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):
        return False


def ask_yes_no(question: str) -> bool:
    """Ask ``question`` (default no); Ctrl-C / EOF count as no."""
    import click

    try:
        return click.confirm(question, default=False)
    except click.Abort:
        return False


def cli_subcommand() -> str | None:
    """The top-level subcommand of the click program running this process, if any.

    ``ambot run`` and ``ambot orm …`` (like ``nb orm …``) load the bot's plugins
    inside their subcommand, so while the plugin is imported click's current
    context is that subcommand's (or one below it): ``"run"``, ``"orm"``. ``None``
    outside a click program (``python bot.py``, the tests' in-process bot) or
    before a subcommand runs.
    """
    import click

    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.parent is None:
        return None
    while ctx.parent is not None and ctx.parent.parent is not None:
        ctx = ctx.parent
    return ctx.info_name or ctx.command.name
