"""The plugin's first two tables in the published plugin's shape, recognised before any change.

Both packages claim revisions ``21f55abc2b90`` (``amrita_plugin_memory_user_memo``) and
``6004d221a7de`` (``amrita_plugin_memory_subconscious_state``), so alembic takes a database
written by the published plugin for one of ours. The columns tell them apart:

* ``amrita_plugin_memory_user_memo``: here ``user_id``, ``content``, ``updated_at``; the
  published plugin (0.4.0–0.8.1) adds ``version`` (an edit counter) and a foreign key to
  ``amrita_user_metadata.user_id``;
* ``amrita_plugin_memory_subconscious_state``: here ``uid``, ``data`` (JSON),
  ``updated_at``; the published plugin has ``payload`` (text) instead of ``data``.

:func:`table_shapes` reads the shapes (and drops what an interrupted batch migration of
SQLite left behind); anything else is :class:`ForeignSchema`, raised before a migration
changes anything. Every migration after ``6004d221a7de`` calls :func:`require_known_tables`
first, so an unknown database is refused untouched at whichever revision it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import sqlalchemy as sa
from nonebot.log import logger

from ...core.errors import ErrorKind, PluginError

__all__ = [
    "MEMO_TABLE",
    "OURS",
    "PUBLISHED",
    "PUBLISHED_MEMO_FK_TARGET",
    "STATE_TABLE",
    "ForeignSchema",
    "Shape",
    "require_known_tables",
    "table_shapes",
]

MEMO_TABLE = "amrita_plugin_memory_user_memo"
STATE_TABLE = "amrita_plugin_memory_subconscious_state"
PUBLISHED_MEMO_FK_TARGET = ("amrita_user_metadata", ("user_id",))
"""The one foreign key of the published memo table: ``user_id`` → Amrita's user metadata."""

Shape = Literal["ours", "published"]

OURS: Mapping[str, frozenset[str]] = {
    MEMO_TABLE: frozenset({"user_id", "content", "updated_at"}),
    STATE_TABLE: frozenset({"uid", "data", "updated_at"}),
}
PUBLISHED: Mapping[str, frozenset[str]] = {
    MEMO_TABLE: OURS[MEMO_TABLE] | {"version"},
    STATE_TABLE: frozenset({"uid", "payload", "updated_at"}),
}
_STATE_HALFWAY = PUBLISHED[STATE_TABLE] | {"data"}
"""The published loop state table after the adoption added ``data`` on SQLite (that step
commits by itself): an interrupted adoption, finished by the next one."""
_BATCH_TEMP = "_alembic_tmp_"
"""Prefix of the copy alembic's batch mode builds on SQLite (a kill can leave it behind)."""


class ForeignSchema(PluginError, RuntimeError):
    """The plugin's tables are neither this plugin's nor the published plugin's (Chinese
    message naming what was found); nothing was changed."""

    kind = ErrorKind.INVALID


def _names(columns: frozenset[str]) -> str:
    return "、".join(sorted(columns))


def _foreign(table: str, found: str) -> ForeignSchema:
    return ForeignSchema(
        f"[Memory] 数据库中的表 {table} {found}，既不是本插件的（{_names(OURS[table])}），"
        f"也不是已发布的 amrita-plugin-memory 0.4.0–0.8.1 的（{_names(PUBLISHED[table])}）。"
        "为免损坏数据，没有做任何修改；请确认这个数据库是哪个插件写的，"
        "见 README「从已发布的 amrita-plugin-memory 切换」"
    )


def _fk_targets(inspector: Any, table: str) -> list[tuple[str, tuple[str, ...]]]:
    return [
        (str(fk.get("referred_table")), tuple(fk.get("referred_columns") or ()))
        for fk in inspector.get_foreign_keys(table)
    ]


def _shape(inspector: Any, table: str) -> Shape:
    if not inspector.has_table(table):
        raise _foreign(table, "不存在（数据库记录的迁移版本却说它已建好）")
    columns = frozenset(str(c["name"]) for c in inspector.get_columns(table))
    if columns == OURS[table]:
        if _fk_targets(inspector, table):
            raise _foreign(table, f"带有外键 {_fk_targets(inspector, table)}")
        return "ours"
    if columns == PUBLISHED[table] or (table == STATE_TABLE and columns == _STATE_HALFWAY):
        fks = _fk_targets(inspector, table)
        unnamed = any(not fk.get("name") for fk in inspector.get_foreign_keys(table))
        if (
            unnamed
            or any(fk != PUBLISHED_MEMO_FK_TARGET for fk in fks)
            or (fks and table != MEMO_TABLE)
        ):
            raise _foreign(table, f"带有未知的外键 {fks}")
        return "published"
    raise _foreign(table, f"的列为 {_names(columns)}")


def _drop_stale_batch_copies(connection: sa.Connection) -> None:
    """Drop the copies an interrupted SQLite batch migration left beside intact tables.

    Alembic's batch mode creates ``_alembic_tmp_<table>`` (outside the transaction that
    then fills it, renames it and drops the original), so a kill can leave an empty copy
    that would make the next attempt fail with "table already exists".
    """
    inspector = sa.inspect(connection)
    for table in (MEMO_TABLE, STATE_TABLE):
        temp = _BATCH_TEMP + table
        if inspector.has_table(temp) and inspector.has_table(table):
            connection.execute(sa.text(f'DROP TABLE "{temp}"'))


def table_shapes(connection: sa.Connection) -> dict[str, Shape]:
    """The shape of each of the two tables; :class:`ForeignSchema` for anything else
    (then nothing is changed; otherwise a stale batch copy is dropped)."""
    inspector = sa.inspect(connection)
    try:
        shapes: dict[str, Shape] = {t: _shape(inspector, t) for t in (MEMO_TABLE, STATE_TABLE)}
    except ForeignSchema as exc:  # said once plainly, before alembic's traceback
        logger.error(str(exc))
        raise
    _drop_stale_batch_copies(connection)
    return shapes


def require_known_tables(connection: sa.Connection) -> None:
    """Refuse (:class:`ForeignSchema`) a database whose tables are neither plugin's.

    Called first by every migration after ``6004d221a7de``: on SQLite each migration
    commits by itself, so the refusal must come before the first of them changes anything.
    """
    table_shapes(connection)
