"""The plugin's migrations on a database the published ``amrita-plugin-memory`` wrote, on
SQLite and PostgreSQL 15: adopted without losing a row; a database of neither plugin refused
before anything changes; a database at any of this plugin's own revisions upgraded as before.

The published plugin's two tables are created here from their description
(``storage/published/tables``: its revisions ``21f55abc2b90`` / ``6004d221a7de`` create these
columns), with the loop state text the published plugin 0.8.1 really wrote (read from the
committed fixture ``tests/published/bot-0.8.1``, see its README). The plugin's migration
scripts run through alembic's operations, as ``ambot orm upgrade`` runs them
(``tests/orm_engines.migration_chain``); the whole bot is driven by
``tests/test_published_bot.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.lazy import lazy_import
from tests.orm_engines import migration_chain
from tests.published_data import published_payload
from tests.servers.postgres import PostgresServer

T = lazy_import("amrita_plugin_memory.storage.published.tables")
LS = lazy_import("amrita_plugin_memory.storage.published.loop_state")

MEMO = "amrita_plugin_memory_user_memo"
STATE = "amrita_plugin_memory_subconscious_state"
SHARED = ("21f55abc2b90", "6004d221a7de")  # the revisions both packages claim
WHEN = datetime(2026, 11, 2, 8, 30, 15)
WHEN_TEXT = "2026-11-02 08:30:15"  # as either engine returns it to raw SQL, to the second
WHEN_UTC = "2026-11-02 00:30:15"  # the published plugin's local time (UTC+8) in UTC


@pytest.fixture(params=["sqlite", "postgresql"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """A fresh, empty database of either engine."""
    from sqlalchemy.ext.asyncio import create_async_engine

    if request.param == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres")
        url = server.url(server.create_database("pub"))
    else:
        url = f"sqlite+aiosqlite:///{tmp_path / 'bot.sqlite3'}"
    eng = create_async_engine(url)
    yield eng
    await eng.dispose()


async def run(engine: Any, work: Callable[[Any], Any]) -> Any:
    async with engine.begin() as connection:
        return await connection.run_sync(work)


def upgrade(modules: list[ModuleType]) -> Callable[[Any], None]:
    """Run the ``upgrade()`` of ``modules`` in order, as alembic does."""

    def work(connection: Any) -> None:
        from alembic.migration import MigrationContext
        from alembic.operations import Operations

        with Operations.context(MigrationContext.configure(connection)):
            for module in modules:
                module.upgrade("")

    return work


def after(revision: str) -> list[ModuleType]:
    chain = migration_chain()
    at = [m.revision for m in chain].index(revision)
    return chain[at + 1 :]


def published_tables(*, extra_memo_column: str | None = None) -> Callable[[Any], None]:
    """What the published plugin's two revisions create (and Amrita's user table they name)."""

    def work(connection: Any) -> None:
        import sqlalchemy as sa

        meta = sa.MetaData()
        sa.Table(
            "amrita_user_metadata", meta, sa.Column("user_id", sa.String(64), primary_key=True)
        )
        memo_columns = [
            sa.Column(
                "user_id",
                sa.String(64),
                sa.ForeignKey(
                    "amrita_user_metadata.user_id",
                    ondelete="CASCADE",
                    name="fk_amrita_plugin_memory_user_memo_user_id_amrita_user_metadata",
                ),
                primary_key=True,
            ),
            sa.Column("content", sa.Text, nullable=False),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("updated_at", sa.DateTime, nullable=False),
        ]
        if extra_memo_column:
            memo_columns.append(sa.Column(extra_memo_column, sa.Text, nullable=True))
        sa.Table(MEMO, meta, *memo_columns)
        sa.Table(
            STATE,
            meta,
            sa.Column("uid", sa.String(64), primary_key=True),
            sa.Column("payload", sa.Text, nullable=False),
            sa.Column("updated_at", sa.DateTime, nullable=False),
        )
        meta.create_all(connection)
        users = ["QQPlatform_Private_10001", "QQPlatform_Group_20001"]
        connection.execute(
            meta.tables["amrita_user_metadata"].insert(), [{"user_id": u} for u in users]
        )
        connection.execute(
            meta.tables[MEMO].insert(),
            [
                {
                    "user_id": users[0],
                    "content": "用户是程序员，住在杭州",
                    "version": 3,
                    "updated_at": WHEN,
                },
                {
                    "user_id": users[1],
                    "content": "本群是读书会群",
                    "version": 1,
                    "updated_at": WHEN,
                },
            ],
        )
        connection.execute(
            meta.tables[STATE].insert(),
            [{"uid": "amrita_memory", "payload": published_payload(), "updated_at": WHEN}],
        )
        connection.execute(
            sa.text("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        )
        connection.execute(sa.text(f"INSERT INTO alembic_version VALUES ('{SHARED[1]}')"))

    return work


def snapshot(connection: Any) -> dict[str, Any]:
    """Every table with its columns and rows (what "nothing altered" compares)."""
    import sqlalchemy as sa

    inspector = sa.inspect(connection)
    out: dict[str, Any] = {}
    for table in sorted(inspector.get_table_names()):
        columns = [c["name"] for c in inspector.get_columns(table)]
        rows = connection.execute(sa.text(f'SELECT * FROM "{table}"')).all()
        out[table] = (columns, sorted(tuple(map(str, r)) for r in rows))
    return out


def columns(connection: Any, table: str) -> set[str]:
    import sqlalchemy as sa

    return {c["name"] for c in sa.inspect(connection).get_columns(table)}


def foreign_keys(connection: Any, table: str) -> list[Any]:
    import sqlalchemy as sa

    return sa.inspect(connection).get_foreign_keys(table)


def read_rows(connection: Any, table: str, *cols: str) -> list[tuple[Any, ...]]:
    import sqlalchemy as sa

    names = ", ".join(cols)
    return [tuple(r) for r in connection.execute(sa.text(f'SELECT {names} FROM "{table}"')).all()]


@pytest.fixture
def beijing_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's local time zone is UTC+8 (the published plugin wrote local times)."""
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("beijing_time")
async def test_a_published_database_is_adopted_row_for_row(engine: Any) -> None:
    await run(engine, published_tables())
    await run(engine, upgrade(after(SHARED[1])))

    def check(connection: Any) -> None:
        assert columns(connection, MEMO) == {"user_id", "content", "updated_at"}
        assert foreign_keys(connection, MEMO) == []
        memos = sorted(read_rows(connection, MEMO, "user_id", "content", "updated_at"))
        assert [(u, c, str(t)[:19]) for u, c, t in memos] == [
            ("QQPlatform_Group_20001", "本群是读书会群", WHEN_UTC),
            ("QQPlatform_Private_10001", "用户是程序员，住在杭州", WHEN_UTC),
        ]
        assert columns(connection, STATE) == {"uid", "data", "updated_at"}
        ((uid, _, stamp),) = read_rows(connection, STATE, "uid", "data", "updated_at")
        data = loop_document(connection, uid)
        assert (uid, str(stamp)[:19]) == ("amrita_memory", WHEN_UTC)
        expected = LS.convert_loop_state(published_payload())[0]
        # A cycle's abstract had no id; as a row of the loop's items it has one of its own.
        assert all(a.pop("id") for a in data["last_abstracts"])
        assert data == expected
        assert data["total_runs"] == 1
        (pending,) = data["pending_messages"]  # what its loop sent, for the next turn
        assert pending["intent"] == "周五晚上八点有读书会，别忘了带书。" and pending["id"]
        assert [a["summary"] for a in data["last_abstracts"]] == [
            "新建了年糕的饮食知识，整理了用户画像"
        ]
        (suggestion,) = data["knowledge_suggestions"]
        assert suggestion["title"] == "读书会签到规则" and suggestion["action"] == "create"
        # The later revisions' tables are there too.
        assert "amrita_plugin_memory_partition_change" in sa_tables(connection)

    await run(engine, check)
    # The adoption again (as a second `ambot orm upgrade` would not) changes nothing.
    before = await run(engine, snapshot)
    adoption = [m for m in migration_chain() if m.revision == "c4e82b7d5f13"]
    await run(engine, upgrade(adoption))
    assert await run(engine, snapshot) == before


LOOP_LISTS = {"pending": "pending_messages", "abstract": "last_abstracts"}
LOOP_LISTS["suggestion"] = "knowledge_suggestions"


def loop_document(connection: Any, uid: str) -> dict[str, Any]:
    """The loop's state as the loop reads it: the state row (``total_runs``) and its items,
    one row each in ``amrita_plugin_memory_loop_item`` since the migration ``e4b2d9c61f07``."""
    import sqlalchemy as sa

    ((data,),) = connection.execute(
        sa.text(f'SELECT data FROM "{STATE}" WHERE uid = :u'), {"u": uid}
    ).all()
    document = json.loads(data) if isinstance(data, str) else dict(data)
    items = connection.execute(
        sa.text(
            "SELECT kind, item_id, data FROM amrita_plugin_memory_loop_item "
            "WHERE loop = :u ORDER BY seq"
        ),
        {"u": uid},
    ).all()
    for kind, item_id, body in items:
        body = json.loads(body) if isinstance(body, str) else dict(body)
        document.setdefault(LOOP_LISTS[kind], []).append({"id": item_id, **body})
    return document


def sa_tables(connection: Any) -> set[str]:
    import sqlalchemy as sa

    return set(sa.inspect(connection).get_table_names())


async def test_a_database_of_neither_plugin_is_refused_untouched(engine: Any) -> None:
    await run(engine, published_tables(extra_memo_column="mood"))
    before = await run(engine, snapshot)
    with pytest.raises(T.ForeignSchema) as refused:
        await run(engine, upgrade(after(SHARED[1])))
    message = str(refused.value)
    assert MEMO in message and "mood" in message and "没有做任何修改" in message
    assert await run(engine, snapshot) == before


@pytest.mark.parametrize("broken", ["drop_state", "foreign_key_on_ours"])
async def test_other_unknown_shapes_are_refused(engine: Any, broken: str) -> None:
    import sqlalchemy as sa

    await run(engine, upgrade(migration_chain()[:2]))  # this plugin's tables at 6004d221a7de

    def damage(connection: Any) -> None:
        if broken == "drop_state":
            connection.execute(sa.text(f'DROP TABLE "{STATE}"'))
        else:
            connection.execute(sa.text("CREATE TABLE other (k VARCHAR(64) PRIMARY KEY)"))
            connection.execute(sa.text(f'DROP TABLE "{MEMO}"'))
            connection.execute(
                sa.text(
                    f'CREATE TABLE "{MEMO}" (user_id VARCHAR(64) PRIMARY KEY REFERENCES other(k), '
                    "content TEXT NOT NULL, updated_at TIMESTAMP NOT NULL)"
                )
            )

    await run(engine, damage)
    before = await run(engine, snapshot)
    with pytest.raises(T.ForeignSchema):
        await run(engine, upgrade(after(SHARED[1])))
    assert await run(engine, snapshot) == before


async def test_every_revision_of_this_plugin_still_upgrades(engine: Any, tmp_path: Path) -> None:
    """A database at each of this plugin's own revisions, with a memo and a loop state row,
    upgraded to the head: the rows are kept and the tables are this plugin's."""
    import sqlalchemy as sa

    chain = migration_chain()
    state = {
        "total_runs": 4,
        "last_abstracts": [],
        "pending_messages": [],
        "knowledge_suggestions": [],
    }
    for stop in range(1, len(chain)):
        # A fresh database per stop: drop everything the previous round made.
        def reset(connection: Any) -> None:
            for table in sa.inspect(connection).get_table_names():
                connection.execute(sa.text(f'DROP TABLE "{table}"'))

        await run(engine, reset)
        await run(engine, upgrade(chain[: stop + 1]))

        def fill(connection: Any, stop: int = stop) -> None:
            connection.execute(
                sa.text(f'INSERT INTO "{MEMO}" (user_id, content, updated_at) VALUES (:u, :c, :t)'),
                {"u": "QQPlatform_Private_1", "c": f"备忘录 {stop}", "t": WHEN},
            )
            table = sa.table(
                STATE, sa.column("uid"), sa.column("data", sa.JSON), sa.column("updated_at")
            )
            connection.execute(
                table.insert().values(uid="amrita_memory", data=state, updated_at=WHEN)
            )

        await run(engine, fill)
        await run(engine, upgrade(chain[stop + 1 :]))

        def check(connection: Any, stop: int = stop) -> None:
            assert columns(connection, MEMO) == T.OURS[MEMO]
            assert columns(connection, STATE) == T.OURS[STATE]
            assert read_rows(connection, MEMO, "content") == [(f"备忘录 {stop}",)]
            document = loop_document(connection, "amrita_memory")
            assert document["total_runs"] == state["total_runs"]
            assert not any(document.get(key) for key in LOOP_LISTS.values())

        await run(engine, check)


def test_loop_state_conversion_keeps_what_means_the_same() -> None:
    data, notes = LS.convert_loop_state(published_payload())
    assert data["total_runs"] == 1
    assert [p["intent"] for p in data["pending_messages"]] == ["周五晚上八点有读书会，别忘了带书。"]
    (note_scheduler,) = notes
    assert "penalty" in note_scheduler and "idle_planner" in note_scheduler

    raw = {
        "total_runs": 7,
        "last_run_time": "2026-11-01T10:00:00+00:00",
        "last_abstracts": ["第一轮", "", 3, "第二轮"],
        "last_iter_summary": "第二轮",
        "knowledge_suggestions": [
            {
                "action": "update",
                "title": "猫",
                "summary": "s",
                "body": "b",
                "kid": "ab12cd34",
                "reason": "r",
            },
            {"action": "rename", "title": "x"},
            "junk",
        ],
        "mystery": 1,
        "pending_messages": [{"content": f"第 {n} 条", "timestamp": ""} for n in range(12)]
        + [{"content": ""}, "junk"],
    }
    data, notes = LS.convert_loop_state(json.dumps(raw))
    assert [a["summary"] for a in data["last_abstracts"]] == ["第一轮", "第二轮"]
    assert data["last_abstracts"][-1]["cycle"] == 7
    assert data["last_abstracts"][0]["time"] == "2026-11-01T10:00:00+00:00"
    (kept,) = data["knowledge_suggestions"]
    assert kept["kid"] == "ab12cd34" and kept["action"] == "update" and kept["id"]
    assert any("mystery" in n for n in notes) and any("2 条无法识别" in n for n in notes)
    assert [p["intent"] for p in data["pending_messages"]] == [f"第 {n} 条" for n in range(2, 12)]
    assert len({p["id"] for p in data["pending_messages"]}) == 10
    assert any("丢弃 4 条 pending_messages" in n for n in notes)

    for bad in ("not json", "[1, 2]", None):
        data, notes = LS.convert_loop_state(bad)
        assert data == {
            "total_runs": 0,
            "last_abstracts": [],
            "pending_messages": [],
            "knowledge_suggestions": [],
        }
        assert notes and "重置" in notes[0]


def drop_everything(connection: Any) -> None:
    import sqlalchemy as sa

    meta = sa.MetaData()
    meta.reflect(connection)
    meta.drop_all(connection)


WRITES = ("INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER")


class Killed(Exception):
    """The process died at this statement (its transaction is rolled back, as SQLite's
    journal and PostgreSQL do when a killed process's connection is gone)."""


@pytest.mark.usefixtures("beijing_time")
async def test_an_adoption_killed_at_any_statement_is_completed_by_the_next_run(
    engine: Any,
) -> None:
    """However far a run of ``c4e82b7d5f13`` got, the next run leaves the tables adopted
    with every time converted once: never reshaped with the local times still in them."""
    from sqlalchemy import event

    (adoption,) = [m for m in migration_chain() if m.revision == "c4e82b7d5f13"]

    async def killed_at(step: int) -> bool:
        """A fresh published database, a run killed at statement ``step``, a second run;
        whether the first run got that far."""
        await run(engine, drop_everything)
        await run(engine, published_tables())  # the adoption reads these two tables only
        seen = 0

        def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            nonlocal seen
            if not statement.lstrip().upper().startswith(WRITES):
                return  # a read changes nothing: dying there is dying at the next write
            seen += 1
            if seen == step:
                raise Killed

        event.listen(engine.sync_engine, "before_cursor_execute", count)
        try:
            await run(engine, upgrade([adoption]))
        except Exception as exc:  # the driver may wrap it
            assert "Killed" in repr(exc) or isinstance(exc, Killed), exc
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", count)
        await run(engine, upgrade([adoption]))
        memos = await run(engine, lambda c: read_rows(c, MEMO, "user_id", "updated_at"))
        assert sorted(str(t)[:19] for _, t in memos) == [WHEN_UTC, WHEN_UTC], step
        ((stamp,),) = await run(engine, lambda c: read_rows(c, STATE, "updated_at"))
        assert str(stamp)[:19] == WHEN_UTC, step
        assert await run(engine, lambda c: columns(c, MEMO)) == {"user_id", "content", "updated_at"}
        assert await run(engine, lambda c: columns(c, STATE)) == {"uid", "data", "updated_at"}
        return seen >= step

    step = 1
    while await killed_at(step):
        step += 1
    assert step > 5, step  # the adoption's writes were each a point of death
