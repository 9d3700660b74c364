"""adopt a database written by the published amrita-plugin-memory (0.4.0 – 0.8.1)

Revision ID: c4e82b7d5f13
Revises: a7c31e5d9b42
Create Date: 2026-12-03 10:00:00

The published package claims revisions 21f55abc2b90 and 6004d221a7de too, with other
columns (``storage/published/tables``); alembic therefore ran only this plugin's later
revisions on such a database. This one brings the two tables to this plugin's shape,
keeping every row: the memo table loses the foreign key to Amrita's user metadata and the
edit counter ``version`` (see docs/spec-differences.md), the loop state's ``payload`` text
becomes the ``data`` document (``storage/published/loop_state``; what cannot mean the same
here is logged), and ``updated_at`` goes from the local time the published plugin wrote to
this plugin's UTC. On this plugin's own tables it changes nothing. A table of neither shape
is refused (``ForeignSchema``) before anything is changed.

Restartable: every step of the adoption is one transaction, on SQLite too (whose driver
starts one only at the first data change, so one is started before anything else, and
DDL then joins it), and ``updated_at`` is converted before the tables are reshaped. A run
killed at any statement leaves the published shape as it was, adopted again in full by the
next run; it never leaves a reshaped table whose times were not converted.

Downgrading does not restore the published shape (a database of this plugin's own goes
through here too): see README「从已发布的 amrita-plugin-memory 切换」.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op
from nonebot.log import logger

from amrita_plugin_memory.storage.models import migrates_on
from amrita_plugin_memory.storage.published.loop_state import convert_loop_state
from amrita_plugin_memory.storage.published.tables import MEMO_TABLE, STATE_TABLE, table_shapes

revision: str = "c4e82b7d5f13"
down_revision: str | Sequence[str] | None = "a7c31e5d9b42"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _count(bind: sa.Connection, table: str) -> int:
    return int(bind.execute(sa.text(f'SELECT COUNT(*) FROM "{table}"')).scalar_one())


def _local_times_to_utc(bind: sa.Connection, name: str, key: str) -> None:
    """``updated_at`` as this plugin stores it: the published plugin wrote the local time
    (``datetime.now()``), this plugin naive UTC. Converted with this machine's time zone,
    the one the published bot ran in when the bot is switched in place."""
    table = sa.table(name, sa.column(key, sa.String()), sa.column("updated_at", sa.DateTime()))
    for row_key, stamp in bind.execute(sa.select(table.c[key], table.c.updated_at)).all():
        if isinstance(stamp, datetime) and stamp.tzinfo is None:
            utc = stamp.astimezone(UTC).replace(tzinfo=None)  # naive = local time here
            if utc != stamp:
                bind.execute(table.update().where(table.c[key] == row_key).values(updated_at=utc))


def _one_transaction(bind: sa.Connection) -> None:
    """Start the driver's transaction now: SQLite's driver starts one only before a data
    change, and a schema change run before that would be committed by itself (a kill in
    between would leave half an adoption). Every later statement of the run joins it."""
    if bind.dialect.name == "sqlite":
        bind.execute(sa.text(f'DELETE FROM "{STATE_TABLE}" WHERE 1 = 0'))


def _adopt_memo(bind: sa.Connection) -> None:
    before = _count(bind, MEMO_TABLE)
    # First the times (the shape still says "published"), then the shape, in one transaction.
    _local_times_to_utc(bind, MEMO_TABLE, "user_id")
    fks = [str(fk["name"]) for fk in sa.inspect(bind).get_foreign_keys(MEMO_TABLE)]  # named
    with op.batch_alter_table(MEMO_TABLE, recreate="auto") as batch:
        for name in fks:
            batch.drop_constraint(name, type_="foreignkey")
        batch.drop_column("version")
    after = _count(bind, MEMO_TABLE)
    if after != before:  # never expected; the transaction is not committed then
        raise RuntimeError(f"备忘录表转换前有 {before} 行，转换后 {after} 行")
    logger.info(
        f"[Memory] 已接管已发布插件的备忘录表 {MEMO_TABLE}：{after} 条备忘录原样保留，"
        "去掉了指向 amrita_user_metadata 的外键和只计修改次数的列 version"
    )


def _adopt_state(bind: sa.Connection) -> None:
    _local_times_to_utc(bind, STATE_TABLE, "uid")  # first, as for the memo table
    rows = bind.execute(sa.text(f'SELECT uid, payload FROM "{STATE_TABLE}"')).all()
    if "data" not in {c["name"] for c in sa.inspect(bind).get_columns(STATE_TABLE)}:
        op.add_column(STATE_TABLE, sa.Column("data", sa.JSON(), nullable=True))
    state = sa.table(STATE_TABLE, sa.column("uid", sa.String()), sa.column("data", sa.JSON()))
    for uid, payload in rows:
        data, notes = convert_loop_state(payload)
        bind.execute(state.update().where(state.c.uid == uid).values(data=data))
        kept = (
            f"运行次数 {data['total_runs']}、摘要 {len(data['last_abstracts'])} 条、"
            f"待转达消息 {len(data['pending_messages'])} 条、"
            f"知识建议 {len(data['knowledge_suggestions'])} 条"
        )
        logger.info(f"[Subconscious] 已转换已发布插件的循环状态 {uid}：保留{kept}")
        for note in notes:
            logger.warning(f"[Subconscious] 循环状态 {uid}：{note}")
    with op.batch_alter_table(STATE_TABLE) as batch:
        batch.drop_column("payload")
        batch.alter_column("data", existing_type=sa.JSON(), nullable=False)


def upgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    bind = op.get_bind()
    shapes = table_shapes(bind)  # ForeignSchema: refused, nothing changed
    if "published" in shapes.values():
        _one_transaction(bind)
    if shapes[MEMO_TABLE] == "published":
        _adopt_memo(bind)
    if shapes[STATE_TABLE] == "published":
        _adopt_state(bind)


def downgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    # Nothing to undo: the tables are this plugin's before and after this revision.
