"""conversation episodes: the lines of open conversations, the episodes and their members

Revision ID: b8e3f1a9c264
Revises: d7a4c2e9b153
Create Date: 2026-12-05 14:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from amrita_plugin_memory.storage.models import migrates_on
from amrita_plugin_memory.storage.published.tables import require_known_tables

revision: str = "b8e3f1a9c264"
down_revision: str | Sequence[str] | None = "d7a4c2e9b153"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INFO = {"bind_key": "amrita_plugin_memory"}


def upgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    require_known_tables(op.get_bind())  # a database of neither plugin: refused untouched
    op.create_table(
        "amrita_plugin_memory_episode_line",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("chat", sa.String(length=255), nullable=False),
        sa.Column("origin", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("is_bot", sa.Boolean(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_amrita_plugin_memory_episode_line")),
        info=_INFO,
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("amrita_plugin_memory_episode_line", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_amrita_plugin_memory_episode_line_chat"), ["chat"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_amrita_plugin_memory_episode_line_user_id"), ["user_id"], unique=False
        )
    op.create_table(
        "amrita_plugin_memory_episode",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("chat", sa.String(length=255), nullable=False),
        sa.Column("origin", sa.String(length=64), nullable=False),
        sa.Column("start_us", sa.BigInteger(), nullable=False),
        sa.Column("end_us", sa.BigInteger(), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("participants", sa.JSON(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("topics", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("messages", sa.Integer(), nullable=False),
        sa.Column("chars", sa.Integer(), nullable=False),
        sa.Column("archived_us", sa.BigInteger(), nullable=True),
        sa.Column("archive_reason", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_amrita_plugin_memory_episode")),
        info=_INFO,
    )
    with op.batch_alter_table("amrita_plugin_memory_episode", schema=None) as batch_op:
        batch_op.create_index(
            "ix_amrita_plugin_memory_episode_start", ["chat", "start_us"], unique=True
        )
    op.create_table(
        "amrita_plugin_memory_episode_member",
        sa.Column("episode_id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint(
            "episode_id", "user_id", name=op.f("pk_amrita_plugin_memory_episode_member")
        ),
        info=_INFO,
    )
    with op.batch_alter_table("amrita_plugin_memory_episode_member", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_amrita_plugin_memory_episode_member_user_id"), ["user_id"], unique=False
        )


def downgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    with op.batch_alter_table("amrita_plugin_memory_episode_member", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_amrita_plugin_memory_episode_member_user_id"))
    op.drop_table("amrita_plugin_memory_episode_member")
    with op.batch_alter_table("amrita_plugin_memory_episode", schema=None) as batch_op:
        batch_op.drop_index("ix_amrita_plugin_memory_episode_start")
    op.drop_table("amrita_plugin_memory_episode")
    with op.batch_alter_table("amrita_plugin_memory_episode_line", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_amrita_plugin_memory_episode_line_user_id"))
        batch_op.drop_index(batch_op.f("ix_amrita_plugin_memory_episode_line_chat"))
    op.drop_table("amrita_plugin_memory_episode_line")
