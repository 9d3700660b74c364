"""init: L1 memo table

Revision ID: 21f55abc2b90
Revises:
Create Date: 2026-11-30 00:00:00

The branch root of amrita_plugin_memory. It depends on nonebot_plugin_amrita's
initial revision so that the bot's own tables always exist first.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from amrita_plugin_memory.storage.models import migrates_on

revision: str = "21f55abc2b90"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("amrita_plugin_memory",)
depends_on: str | Sequence[str] | None = "072361e8936f"


def upgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    op.create_table(
        "amrita_plugin_memory_user_memo",
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_amrita_plugin_memory_user_memo")),
        info={"bind_key": "amrita_plugin_memory"},
    )


def downgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    op.drop_table("amrita_plugin_memory_user_memo")
