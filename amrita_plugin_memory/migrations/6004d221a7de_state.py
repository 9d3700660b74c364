"""state: L3 loop state table

Revision ID: 6004d221a7de
Revises: 21f55abc2b90
Create Date: 2026-11-30 00:00:01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from amrita_plugin_memory.storage.models import migrates_on

revision: str = "6004d221a7de"
down_revision: str | Sequence[str] | None = "21f55abc2b90"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    op.create_table(
        "amrita_plugin_memory_subconscious_state",
        sa.Column("uid", sa.String(length=64), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("uid", name=op.f("pk_amrita_plugin_memory_subconscious_state")),
        info={"bind_key": "amrita_plugin_memory"},
    )


def downgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    op.drop_table("amrita_plugin_memory_subconscious_state")
