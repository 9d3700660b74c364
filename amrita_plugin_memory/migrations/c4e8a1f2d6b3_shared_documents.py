"""documents shared by several processes: the L3 knowledge base and profile in remote mode

Revision ID: c4e8a1f2d6b3
Revises: c5e2b8d41f07
Create Date: 2026-12-03 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from amrita_plugin_memory.storage.models import migrates_on
from amrita_plugin_memory.storage.published.tables import require_known_tables

revision: str = "c4e8a1f2d6b3"
down_revision: str | Sequence[str] | None = "c5e2b8d41f07"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INFO = {"bind_key": "amrita_plugin_memory"}


def upgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    require_known_tables(op.get_bind())  # a database of neither plugin: refused untouched
    # The files of a data directory (knowledge/KNOWLEDGE_*.md, user_profile.md) are copied
    # in by the first process in remote mode that uses them, and moved to a backup there
    # (storage/shared/documents): only that process knows its data directory.
    op.create_table(
        "amrita_plugin_memory_document",
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "name", name=op.f("pk_amrita_plugin_memory_document")),
        info=_INFO,
    )


def downgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    op.drop_table("amrita_plugin_memory_document")
