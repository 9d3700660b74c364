"""what the plugin's background work costs: the per-day usage ledger

Revision ID: c5e2b8d41f07
Revises: e4b2d9c61f07
Create Date: 2026-12-03 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from amrita_plugin_memory.storage.models import migrates_on
from amrita_plugin_memory.storage.published.tables import require_known_tables

revision: str = "c5e2b8d41f07"
down_revision: str | Sequence[str] | None = "e4b2d9c61f07"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INFO = {"bind_key": "amrita_plugin_memory"}


def upgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    require_known_tables(op.get_bind())  # a database of neither plugin: refused untouched
    op.create_table(
        "amrita_plugin_memory_usage",
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("feature", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.Column("estimated", sa.BigInteger(), nullable=False),
        sa.Column("chars", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "day", "feature", "user_id", name=op.f("pk_amrita_plugin_memory_usage")
        ),
        info=_INFO,
    )


def downgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    op.drop_table("amrita_plugin_memory_usage")
