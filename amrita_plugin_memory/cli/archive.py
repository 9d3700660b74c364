"""``ambot memory archive list | restore | sweep`` (the work: :mod:`..upkeep.archive.view`).

While the project's bot runs (:func:`.plumbing.bot_of`: in local mode it
holds the embedded ChromaDB; in remote mode a sweep or restore here would
have none of its partition locks) the command asks the bot through its admin
API (``/api/memory/archive...``, the console's :mod:`..console.archive`),
which builds the same lines with the same functions: the output does not
depend on which process did the work.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import click

from ..infra.bot_link import BotEndpoint
from ..upkeep.archive.restore import ArchiveRestoreError, parse_row_id
from ..upkeep.archive.view import archive_command
from .plumbing import ask, bot_of, fail, run, runtime

__all__ = ["SWEEP_TIMEOUT", "archive_cmd"]

SWEEP_TIMEOUT = 6 * 3600.0
"""How long the command waits for a sweep inside the bot (a first sweep of a large
store rests between its chunks so the chats keep flowing: it may take a while)."""


def archive_cmd(action: str, **options: Any) -> None:
    """``ambot memory archive list|restore|sweep`` (``options``: partition, limit, row_id)."""
    rt = runtime()
    bot = bot_of(rt, writes=action != "list")
    if bot is not None:
        click.echo("\n".join(_in_bot(bot, action, **options)))
        return
    lines = run(
        rt, lambda: archive_command(rt.store, rt.config.file, rt.calendar, action, **options)
    )
    click.echo("\n".join(lines))


def _in_bot(
    bot: BotEndpoint,
    action: str,
    *,
    partition: str | None = None,
    limit: int = 20,
    row_id: str | None = None,
) -> list[str]:
    """The same lines as :func:`~..upkeep.archive.view.archive_command`, from the bot."""
    if action == "sweep":
        return [ask(bot, "POST", "/archive/sweep", {}, timeout=SWEEP_TIMEOUT)["message"]]
    if action == "restore":
        try:
            checked = parse_row_id(row_id)
        except ArchiveRestoreError as exc:
            fail(str(exc))
        return [ask(bot, "POST", f"/archive/{quote(checked, safe='')}/restore", {})["message"]]
    query: dict[str, Any] = {"limit": limit}
    if partition is not None:
        query["partition"] = partition
    return list(ask(bot, "GET", f"/archive?{urlencode(query)}")["lines"])
