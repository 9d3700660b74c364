"""The migration ``e4b2d9c61f07`` on SQLite and PostgreSQL: data written before it survives.

* The L3 loop's old single-document state row becomes one row per item (its order, ids
  and owners kept; an abstract gets an id), the row keeps ``total_runs``; the
  downgrade folds the items back.
* Two members of one group that share a label (two bots gave it before the unique
  index) keep one holder: the other loses the label and is given a new one when next
  named; the index then refuses a second holder.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.orm_engines import migration_chain

pytestmark = pytest.mark.parametrize("engine", ["sqlite", "postgresql"])

STATE = {
    "total_runs": 7,
    "last_abstracts": [
        {"time": "2026-01-02T03:04:05+08:00", "cycle": 6, "outcome": "success", "summary": "六"},
        {"time": "bad", "cycle": 7, "outcome": "failed", "summary": "七"},
    ],
    "pending_messages": [{"id": "p1", "time": "2026-01-02T04:00:00+08:00", "intent": "提醒"}],
    "knowledge_suggestions": [
        {"id": "s1", "time": "", "action": "create", "title": "茶", "user_id": "555"},
        {"id": "s2", "time": "", "action": "delete", "title": "旧", "kid": "k1"},
    ],
}


def _url(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if engine == "postgresql":
        server = request.getfixturevalue("postgres")
        return server.url(server.create_database())
    return f"sqlite+aiosqlite:///{tmp_path / 'plugin.sqlite3'}"


async def _run(engine: Any, step: str, module: Any) -> None:
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    def run(connection: Any) -> None:
        with Operations.context(MigrationContext.configure(connection)):
            getattr(module, step)("")

    async with engine.begin() as connection:
        await connection.run_sync(run)


async def _query(engine: Any, sql: str) -> list[Any]:
    from sqlalchemy import text

    async with engine.connect() as connection:
        return list((await connection.execute(text(sql))).all())


async def test_the_loop_state_and_shared_labels_are_converted(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    import sqlalchemy as sa
    from sqlalchemy.exc import IntegrityError
    from sqlalchemy.ext.asyncio import create_async_engine

    chain = migration_chain()
    names = [m.revision for m in chain]
    new = chain[names.index("e4b2d9c61f07")]
    db = create_async_engine(_url(engine, request, tmp_path))
    try:
        for module in chain[: names.index("e4b2d9c61f07")]:
            await _run(db, "upgrade", module)
        state = sa.table("amrita_plugin_memory_subconscious_state", sa.column("uid"),
                         sa.column("data", sa.JSON), sa.column("updated_at", sa.DateTime))  # fmt: skip
        labels = sa.table("amrita_plugin_memory_group_label", sa.column("group_id"),
                          sa.column("user_id"), sa.column("label"))  # fmt: skip
        async with db.begin() as connection:
            await connection.execute(
                state.insert().values(
                    uid="amrita_memory", data=STATE, updated_at=datetime(2026, 1, 1)
                )
            )
            await connection.execute(
                labels.insert(),
                [
                    {"group_id": "g1", "user_id": "20001234", "label": "用户_1234"},
                    {"group_id": "g1", "user_id": "30001234", "label": "用户_1234"},
                    {"group_id": "g2", "user_id": "30001234", "label": "用户_1234"},
                ],
            )
        await _run(db, "upgrade", new)

        items = await _query(
            db,
            "SELECT kind, item_id, user_id, since_us FROM amrita_plugin_memory_loop_item "
            "ORDER BY seq",
        )
        kinds = [(k, i, u) for k, i, u, _ in items]
        assert kinds[0][0] == kinds[1][0] == "abstract" and kinds[0][1] != kinds[1][1]
        assert kinds[2:] == [
            ("pending", "p1", ""),
            ("suggestion", "s1", "555"),
            ("suggestion", "s2", ""),
        ]
        since = [s for *_, s in items]
        assert since[0] == 1767294245 * 1_000_000 and since[1] == 0  # a bad time: oldest
        (data,) = await _query(db, "SELECT data FROM amrita_plugin_memory_subconscious_state")
        stored = data[0] if isinstance(data[0], dict) else json.loads(data[0])
        assert stored == {"total_runs": 7}
        kept = await _query(
            db, "SELECT group_id, user_id FROM amrita_plugin_memory_group_label ORDER BY 1, 2"
        )
        assert kept == [("g1", "20001234"), ("g2", "30001234")]
        with pytest.raises(IntegrityError):
            async with db.begin() as connection:
                await connection.execute(
                    labels.insert().values(group_id="g1", user_id="4", label="用户_1234")
                )

        await _run(db, "downgrade", new)  # the items go back into the document
        (data,) = await _query(db, "SELECT data FROM amrita_plugin_memory_subconscious_state")
        folded = data[0] if isinstance(data[0], dict) else json.loads(data[0])
        assert folded["total_runs"] == 7
        assert folded["pending_messages"] == STATE["pending_messages"]
        assert folded["knowledge_suggestions"] == STATE["knowledge_suggestions"]
        assert [a["summary"] for a in folded["last_abstracts"]] == ["六", "七"]
    finally:
        await db.dispose()
