"""one user's rows are keyed reads: indexes on the user id of the per-user tables

A user's export and forget read and delete their rows of the usage ledger, of the group
windows and of the group labels by user id; without an index each is a scan of every
other user's rows too. Each index is created only where it is missing, so a run killed
half-way (SQLite commits each statement of a schema change by itself) completes when run
again, on SQLite and PostgreSQL alike.

Revision ID: d7a4c2e9b153
Revises: c4e8a1f2d6b3
Create Date: 2026-12-04 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from amrita_plugin_memory.storage.models import migrates_on
from amrita_plugin_memory.storage.published.tables import require_known_tables

revision: str = "d7a4c2e9b153"
down_revision: str | Sequence[str] | None = "c4e8a1f2d6b3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = (
    ("amrita_plugin_memory_usage", "user_id"),
    ("amrita_plugin_memory_group_message", "user_id"),
    ("amrita_plugin_memory_group_label", "user_id"),
)
"""``(table, column)``: the index ``ix_<table>_<column>`` (the models' ``index=True``)."""


def _existing(bind: sa.Connection, table: str) -> set[str]:
    return {str(i["name"]) for i in sa.inspect(bind).get_indexes(table)}


def upgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    bind = op.get_bind()
    require_known_tables(bind)  # a database of neither plugin: refused untouched
    for table, column in INDEXES:
        index = f"ix_{table}_{column}"
        if index not in _existing(bind, table):
            op.create_index(index, table, [column], unique=False)


def downgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    bind = op.get_bind()
    for table, column in INDEXES:
        index = f"ix_{table}_{column}"
        if index in _existing(bind, table):
            op.drop_index(index, table_name=table)
