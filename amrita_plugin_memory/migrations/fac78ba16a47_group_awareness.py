"""group awareness: group window, member labels, group settings, personas, self memory

Revision ID: fac78ba16a47
Revises: 6004d221a7de
Create Date: 2026-11-30 14:58:16
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from amrita_plugin_memory.storage.models import migrates_on
from amrita_plugin_memory.storage.published.tables import require_known_tables

revision: str = "fac78ba16a47"
down_revision: str | Sequence[str] | None = "6004d221a7de"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INFO = {"bind_key": "amrita_plugin_memory"}


def upgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    require_known_tables(op.get_bind())  # a database of neither plugin: refused untouched
    op.create_table(
        "amrita_plugin_memory_group_label",
        sa.Column("group_id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("label", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint(
            "group_id", "user_id", name=op.f("pk_amrita_plugin_memory_group_label")
        ),
        info=_INFO,
    )
    op.create_table(
        "amrita_plugin_memory_group_message",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("group_id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("nickname", sa.String(length=64), nullable=False),
        sa.Column("is_bot", sa.Boolean(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_amrita_plugin_memory_group_message")),
        info=_INFO,
    )
    with op.batch_alter_table("amrita_plugin_memory_group_message", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_amrita_plugin_memory_group_message_group_id"), ["group_id"], unique=False
        )
    op.create_table(
        "amrita_plugin_memory_group_setting",
        sa.Column("group_id", sa.String(length=32), nullable=False),
        sa.Column("anonymize", sa.Boolean(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", name=op.f("pk_amrita_plugin_memory_group_setting")),
        info=_INFO,
    )
    op.create_table(
        "amrita_plugin_memory_persona",
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("fields", sa.JSON(), nullable=False),
        sa.Column("learning_off", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_amrita_plugin_memory_persona")),
        info=_INFO,
    )
    op.create_table(
        "amrita_plugin_memory_self_memory",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_amrita_plugin_memory_self_memory")),
        info=_INFO,
    )


def downgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    op.drop_table("amrita_plugin_memory_self_memory")
    op.drop_table("amrita_plugin_memory_persona")
    op.drop_table("amrita_plugin_memory_group_setting")
    with op.batch_alter_table("amrita_plugin_memory_group_message", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_amrita_plugin_memory_group_message_group_id"))
    op.drop_table("amrita_plugin_memory_group_message")
    op.drop_table("amrita_plugin_memory_group_label")
