"""several processes on one store: the change feed, the leases, the tombstones

Revision ID: a7c31e5d9b42
Revises: 5d2f8a61c0b7
Create Date: 2026-12-02 01:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from amrita_plugin_memory.storage.models import migrates_on
from amrita_plugin_memory.storage.published.tables import require_known_tables

revision: str = "a7c31e5d9b42"
down_revision: str | Sequence[str] | None = "5d2f8a61c0b7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INFO = {"bind_key": "amrita_plugin_memory"}


def upgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    require_known_tables(op.get_bind())  # a database of neither plugin: refused untouched
    op.create_table(
        "amrita_plugin_memory_partition_change",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("collection", sa.String(length=128), nullable=False),
        sa.Column("partition", sa.String(length=255), nullable=False),
        sa.Column("origin", sa.String(length=64), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_amrita_plugin_memory_partition_change")),
        info=_INFO,
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("amrita_plugin_memory_partition_change", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_amrita_plugin_memory_partition_change_at_ms"), ["at_ms"], unique=False
        )
    op.create_table(
        "amrita_plugin_memory_lease",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("expires_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_amrita_plugin_memory_lease")),
        info=_INFO,
    )
    # The entries of the tombstone file (``<data dir>/forgotten_users.json``) are copied
    # in by the first process that reads them (``ForgottenUsers``): only it knows the dir.
    op.create_table(
        "amrita_plugin_memory_forgotten_user",
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("partition", sa.String(length=255), nullable=False),
        sa.Column("at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_amrita_plugin_memory_forgotten_user")),
        info=_INFO,
    )


def downgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    op.drop_table("amrita_plugin_memory_forgotten_user")
    op.drop_table("amrita_plugin_memory_lease")
    with op.batch_alter_table("amrita_plugin_memory_partition_change", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_amrita_plugin_memory_partition_change_at_ms"))
    op.drop_table("amrita_plugin_memory_partition_change")
