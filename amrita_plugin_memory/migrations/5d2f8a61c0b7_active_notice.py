"""active memory: who was told once that the bot learns on its own

Revision ID: 5d2f8a61c0b7
Revises: 3b1e7c9d2a40
Create Date: 2026-12-01 23:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from amrita_plugin_memory.storage.models import migrates_on
from amrita_plugin_memory.storage.published.tables import require_known_tables

revision: str = "5d2f8a61c0b7"
down_revision: str | Sequence[str] | None = "3b1e7c9d2a40"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INFO = {"bind_key": "amrita_plugin_memory"}


def upgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    require_known_tables(op.get_bind())  # a database of neither plugin: refused untouched
    op.create_table(
        "amrita_plugin_memory_active_notice",
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_amrita_plugin_memory_active_notice")),
        info=_INFO,
    )


def downgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    op.drop_table("amrita_plugin_memory_active_notice")
