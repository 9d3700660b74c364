"""The migration ``d7a4c2e9b153`` on SQLite and PostgreSQL: one user's rows of the usage
ledger, the group windows and the group labels are found through an index (a keyed read),
and the migration completes when run again after a run killed half-way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.orm_engines import migration_chain
from tests.test_forget_points_migration import _run, _url

pytestmark = pytest.mark.parametrize("engine", ["sqlite", "postgresql"])

REVISION = "d7a4c2e9b153"
LOOKUPS = {
    "amrita_plugin_memory_usage": "SELECT day FROM amrita_plugin_memory_usage WHERE user_id = '7'",
    "amrita_plugin_memory_group_message": (
        "SELECT id FROM amrita_plugin_memory_group_message WHERE user_id = '7'"
    ),
    "amrita_plugin_memory_group_label": (
        "SELECT label FROM amrita_plugin_memory_group_label WHERE user_id = '7'"
    ),
}


async def _plan(db: Any, engine: str, sql: str) -> str:
    from sqlalchemy import text

    await db.dispose()  # a fresh connection: no statement prepared before the schema changed
    async with db.connect() as connection:
        if engine == "postgresql":  # a tiny table: ask whether the index can be used at all
            await connection.execute(text("SET enable_seqscan = off"))
            rows = (await connection.execute(text(f"EXPLAIN {sql}"))).all()
        else:
            rows = (await connection.execute(text(f"EXPLAIN QUERY PLAN {sql}"))).all()
    return " ".join(str(part) for row in rows for part in row)


async def test_one_users_rows_are_found_through_an_index_and_a_rerun_completes(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    chain = migration_chain()
    names = [m.revision for m in chain]
    new = chain[names.index(REVISION)]
    db = create_async_engine(_url(engine, request, tmp_path))
    try:
        for module in chain[: names.index(REVISION)]:
            await _run(db, "upgrade", module)
        for sql in LOOKUPS.values():
            assert "ix_" not in await _plan(db, engine, sql)  # a scan of every user's rows
        # A run killed after its first index: the next run creates the others.
        table = next(iter(LOOKUPS))
        async with db.begin() as connection:
            await connection.execute(text(f"CREATE INDEX ix_{table}_user_id ON {table} (user_id)"))
        await _run(db, "upgrade", new)
        await _run(db, "upgrade", new)  # and again: nothing left to do, nothing fails
        for table, sql in LOOKUPS.items():
            assert f"ix_{table}_user_id" in await _plan(db, engine, sql), table
        await _run(db, "downgrade", new)
        for sql in LOOKUPS.values():
            assert "ix_" not in await _plan(db, engine, sql)
        await _run(db, "upgrade", new)
        for table, sql in LOOKUPS.items():
            assert f"ix_{table}_user_id" in await _plan(db, engine, sql), table
    finally:
        await db.dispose()
