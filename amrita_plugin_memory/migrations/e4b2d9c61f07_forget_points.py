"""a forget or an opt-out is a point in time every process honours; one label per member

* ``amrita_plugin_memory_user_void``: when a user last switched active memory or
  persona learning off (background work on what they said before is void);
* ``amrita_plugin_memory_loop_item``: the L3 loop's state one row per item (the
  state row keeps ``total_runs``); the items of every existing state row are
  converted;
* a unique index on (group, label) of ``amrita_plugin_memory_group_label``; where two
  members of a group share a label already (two bots gave it), the member whose label
  row sorts last by user id loses it and gets a new one when next named.

Revision ID: e4b2d9c61f07
Revises: c4e82b7d5f13
Create Date: 2026-12-03 10:00:00
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

from amrita_plugin_memory.storage.models import migrates_on
from amrita_plugin_memory.storage.published.tables import require_known_tables

revision: str = "e4b2d9c61f07"
down_revision: str | Sequence[str] | None = "c4e82b7d5f13"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INFO = {"bind_key": "amrita_plugin_memory"}
_ITEMS = "amrita_plugin_memory_loop_item"
_STATE = "amrita_plugin_memory_subconscious_state"
_LABELS = "amrita_plugin_memory_group_label"
_LISTS = (
    ("last_abstracts", "abstract"),
    ("pending_messages", "pending"),
    ("knowledge_suggestions", "suggestion"),
)

_state = sa.table(_STATE, sa.column("uid", sa.String), sa.column("data", sa.JSON))
_items = sa.table(
    _ITEMS,
    sa.column("seq", sa.Integer),
    sa.column("loop", sa.String),
    sa.column("kind", sa.String),
    sa.column("item_id", sa.String),
    sa.column("user_id", sa.String),
    sa.column("since_us", sa.BigInteger),
    sa.column("data", sa.JSON),
)
_labels = sa.table(
    _LABELS, sa.column("group_id", sa.String), sa.column("user_id", sa.String), sa.column("label")
)


def _since_us(value: Any) -> int:
    """An item's own time as microseconds (0, "older than any forget", when unusable)."""
    try:
        at = datetime.fromisoformat(str(value))
    except ValueError:
        return 0
    at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return int(at.timestamp() * 1_000_000)


def _convert_states() -> None:
    bind = op.get_bind()
    for uid, data in bind.execute(sa.select(_state.c.uid, _state.c.data)).all():
        document = data if isinstance(data, dict) else {}
        rows: list[dict[str, Any]] = []
        for key, kind in _LISTS:
            seen: set[str] = set()
            for item in document.get(key) or []:
                if not isinstance(item, dict):
                    continue
                item_id = str(item.get("id") or "") or uuid.uuid4().hex[:12]
                if item_id in seen:
                    continue
                seen.add(item_id)
                owner = str(item.get("user_id") or "") if kind == "suggestion" else ""
                body = {k: v for k, v in item.items() if k != "id"}
                rows.append(
                    {
                        "loop": uid,
                        "kind": kind,
                        "item_id": item_id[:64],
                        "user_id": owner[:64],
                        "since_us": _since_us(item.get("time")),
                        "data": body,
                    }
                )
        if rows:
            bind.execute(_items.insert(), rows)
        runs = document.get("total_runs")
        runs = runs if isinstance(runs, int) and not isinstance(runs, bool) and runs > 0 else 0
        bind.execute(_state.update().where(_state.c.uid == uid).values(data={"total_runs": runs}))


def _fold_states() -> None:
    """The items back into their state rows (the downgrade)."""
    bind = op.get_bind()
    documents: dict[str, dict[str, Any]] = {}
    for uid, data in bind.execute(sa.select(_state.c.uid, _state.c.data)).all():
        documents[uid] = dict(data) if isinstance(data, dict) else {}
    kinds = {kind: key for key, kind in _LISTS}
    stmt = sa.select(_items.c.loop, _items.c.kind, _items.c.item_id, _items.c.data).order_by(
        _items.c.seq
    )
    for loop, kind, item_id, data in bind.execute(stmt).all():
        document = documents.setdefault(loop, {"total_runs": 0})
        item = {**(data if isinstance(data, dict) else {}), "id": item_id}
        document.setdefault(kinds[kind], []).append(item)
    for uid, document in documents.items():
        exists = bind.execute(sa.select(_state.c.uid).where(_state.c.uid == uid)).first()
        if exists:
            bind.execute(_state.update().where(_state.c.uid == uid).values(data=document))


def _drop_shared_labels() -> None:
    """Where two members of a group hold one label, keep the first (by user id)."""
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(_labels.c.group_id, _labels.c.user_id, _labels.c.label).order_by(
            _labels.c.group_id, _labels.c.user_id
        )
    ).all()
    taken: set[tuple[str, str]] = set()
    for group_id, user_id, label in rows:
        if (group_id, label) in taken:
            bind.execute(
                _labels.delete().where(_labels.c.group_id == group_id, _labels.c.user_id == user_id)
            )
        taken.add((group_id, label))


def upgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    require_known_tables(op.get_bind())  # a database of neither plugin: refused untouched
    op.create_table(
        "amrita_plugin_memory_user_void",
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "kind", name=op.f("pk_amrita_plugin_memory_user_void")),
        info=_INFO,
    )
    op.create_table(
        _ITEMS,
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("loop", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("item_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("since_us", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_amrita_plugin_memory_loop_item")),
        info=_INFO,
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table(_ITEMS, schema=None) as batch_op:
        batch_op.create_index(
            "ix_amrita_plugin_memory_loop_item_unique", ["loop", "kind", "item_id"], unique=True
        )
    _convert_states()
    _drop_shared_labels()
    with op.batch_alter_table(_LABELS, schema=None) as batch_op:
        batch_op.create_index(
            "ix_amrita_plugin_memory_group_label_unique", ["group_id", "label"], unique=True
        )


def downgrade(name: str = "") -> None:
    if not migrates_on(name):
        return
    with op.batch_alter_table(_LABELS, schema=None) as batch_op:
        batch_op.drop_index("ix_amrita_plugin_memory_group_label_unique")
    _fold_states()
    with op.batch_alter_table(_ITEMS, schema=None) as batch_op:
        batch_op.drop_index("ix_amrita_plugin_memory_loop_item_unique")
    op.drop_table(_ITEMS)
    op.drop_table("amrita_plugin_memory_user_void")
