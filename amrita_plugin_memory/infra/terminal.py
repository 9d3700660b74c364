"""Terminal interaction shared by the startup check and the CLI."""

from __future__ import annotations

import sys

__all__ = ["ask_yes_no", "stdin_is_tty"]


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
