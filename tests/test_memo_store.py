"""The L1 memo store on the real SQLite (and PostgreSQL): cache coherence and key migration.

The in-process tests run on SQLite and on PostgreSQL 15 (``orm_db``).

* A read that is still in flight when a newer write commits must not put its
  older text into the cache (the read is held inside SQLAlchemy's own ORM
  loading, through the ``load`` event, while the write commits).
* Rows keyed ``user_{qq}`` / ``group_{gid}`` move to Amrita's current uni_id:
  in-process through the ORM, at a real bot start (after nonebot_plugin_orm
  is ready, before the bot serves), and from ``ambot memory migrate-keys``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import BotProject
from tests.conftest import captured_logs
from tests.helpers import partition, view_of
from tests.reliability_stats import STATS
from tests.servers import EmbeddingServer
from tests.servers.postgres import PostgresServer
from tests.test_bot_startup import run_bot_until_started

OLDER = datetime(2023, 1, 1, 8, 0, 0)
OLD = datetime(2024, 1, 1, 8, 0, 0)
NEW = datetime(2025, 6, 1, 8, 0, 0)


@pytest.fixture
def info_logs() -> Iterator[list[str]]:
    with captured_logs("INFO") as lines:
        yield lines


# ---------------------------------------------------------------------------
# Cache coherence
# ---------------------------------------------------------------------------


@pytest.mark.usefixtures("orm_db")
async def test_a_read_in_flight_cannot_put_an_older_text_into_the_cache() -> None:
    from sqlalchemy import event
    from sqlalchemy.util import await_only

    from amrita_plugin_memory.storage.memo_store import MemoService
    from amrita_plugin_memory.storage.models import UserMemo

    key = partition(15001)
    assert (await MemoService(1000).update(key, "旧文本")).ok
    service = MemoService(1000)  # empty cache: its first get reads SQLite
    loaded = asyncio.Event()
    release = asyncio.Event()
    held: list[str] = []

    def hold_first_load(target: Any, context: Any) -> None:
        # Runs inside the ORM's loading of the row (greenlet of the AsyncSession):
        # the row has been read, the service has not seen it yet.
        if target.user_id == key and not held:
            held.append(target.content)
            loaded.set()
            await_only(release.wait())

    event.listen(UserMemo, "load", hold_first_load)
    try:
        reader = asyncio.create_task(service.get(view_of(key)))
        async with asyncio.timeout(20):  # hang guard
            await loaded.wait()
            assert (await service.update(key, "新文本")).ok  # commits while the read waits
            release.set()
            assert await reader == "旧文本"  # what that read saw, correctly
    finally:
        release.set()
        event.remove(UserMemo, "load", hold_first_load)
    STATS.faults_injected += 1
    assert held == ["旧文本"]
    assert (
        await service.get(view_of(key)) == "新文本"
    )  # the cache was not refilled with the old text
    assert await MemoService(1000).get(view_of(key)) == "新文本"


@pytest.mark.usefixtures("orm_db")
async def test_reads_without_writes_still_fill_the_cache() -> None:
    from amrita_plugin_memory.storage.memo_store import MemoService

    key = partition(15002)
    assert (await MemoService(1000).update(key, "内容")).ok
    service = MemoService(1000)
    assert key not in service._cache
    assert await service.get(view_of(key)) == "内容"
    assert service._cache.get(key) == "内容"


# ---------------------------------------------------------------------------
# Key migration, in process
# ---------------------------------------------------------------------------


async def _rows(*keys: str) -> dict[str, tuple[str, datetime]]:
    from nonebot_plugin_orm import get_session
    from sqlalchemy import select

    from amrita_plugin_memory.storage.models import UserMemo

    async with get_session() as session:
        rows = (await session.scalars(select(UserMemo).where(UserMemo.user_id.in_(keys)))).all()
        return {r.user_id: (r.content, r.updated_at) for r in rows}


@pytest.mark.usefixtures("orm_db")
async def test_legacy_memo_rows_move_to_the_current_keys(info_logs: list[str]) -> None:
    from nonebot_plugin_orm import get_session

    from amrita_plugin_memory.storage.memo_store import MemoService
    from amrita_plugin_memory.storage.models import UserMemo

    memo = MemoService(1000)  # a fresh cache: the test runs on each engine
    rows = [
        ("user_15101", "旧格式的个人备忘录甲", OLD),
        ("group_25101", "旧格式的群备忘录乙", OLD),
        ("user_15102", "旧键上较新的备忘录丙", NEW),
        ("QQPlatform_Private_15102", "新键上较旧的备忘录丁", OLD),
        ("user_15103", "旧键上较旧的备忘录戊", OLD),
        ("QQPlatform_Private_15103", "新键上较新的备忘录己", NEW),
        ("not-a-uni-id-15104", "无法识别的键庚", OLD),
    ]
    async with get_session() as session:
        session.add_all(UserMemo(user_id=k, content=c, updated_at=t) for k, c, t in rows)
        await session.commit()
    keys = [k for k, _, _ in rows] + ["QQPlatform_Private_15101", "QQPlatform_Group_25101"]
    # Cached before the migration: an empty memo and the older conflicting text.
    assert await memo.get(view_of("QQPlatform_Private_15101")) == ""
    assert await memo.get(view_of("QQPlatform_Private_15102")) == "新键上较旧的备忘录丁"

    dry = await memo.migrate_keys(dry_run=True)
    assert dry.moved >= 4 and dry.unparsable >= 1 and dry.conflicts == []
    assert set(await _rows(*keys)) == {k for k, _, _ in rows}  # untouched

    report = await memo.migrate_keys()
    assert report.moved == dry.moved and report.unparsable == dry.unparsable
    assert sorted(report.conflicts) == [
        ("user_15102", "QQPlatform_Private_15102", "user_15102"),
        ("user_15103", "QQPlatform_Private_15103", "QQPlatform_Private_15103"),
    ]
    assert await _rows(*keys) == {
        "QQPlatform_Private_15101": ("旧格式的个人备忘录甲", OLD),
        "QQPlatform_Group_25101": ("旧格式的群备忘录乙", OLD),
        "QQPlatform_Private_15102": ("旧键上较新的备忘录丙", NEW),
        "QQPlatform_Private_15103": ("新键上较新的备忘录己", NEW),
        "not-a-uni-id-15104": ("无法识别的键庚", OLD),
    }
    # The cache follows the migration.
    assert await memo.get(view_of("QQPlatform_Private_15101")) == "旧格式的个人备忘录甲"
    assert await memo.get(view_of("QQPlatform_Private_15102")) == "旧键上较新的备忘录丙"
    assert await memo.get(view_of("QQPlatform_Group_25101")) == "旧格式的群备忘录乙"
    # Conflicts are logged at INFO, never with a memo's text.
    conflicts = [line for line in info_logs if line.startswith("INFO [Memory] 备忘录键迁移")]
    assert len(conflicts) == 2 and "保留较新的 user_15102" in conflicts[0] + conflicts[1]
    texts = [c for _, c, _ in rows]
    assert not any(text in line for text in texts for line in info_logs)

    migrated = await _rows(*keys)
    again = await memo.migrate_keys()
    assert again.moved == 0 and again.conflicts == []
    assert await _rows(*keys) == migrated
    assert await memo.get(view_of("QQPlatform_Private_15103")) == "新键上较新的备忘录己"


# ---------------------------------------------------------------------------
# Key migration, real processes
# ---------------------------------------------------------------------------


class MemoTable:
    """The memo table of a bot project, read and written past the plugin: in the project's
    SQLite file, or (``SQLALCHEMY_BINDS``) in a database of the PostgreSQL test cluster."""

    def __init__(self, project: BotProject, postgres: PostgresServer | None) -> None:
        self.project = project
        self.postgres = postgres
        self.database = ""
        if postgres is not None:
            self.database = postgres.create_database("memo")
            binds = json.dumps({"amrita_plugin_memory": postgres.url(self.database)})
            project.write_env(SQLALCHEMY_BINDS=f"'{binds}'")

    async def _pg(self, query: str, *args: Any) -> list[tuple[Any, ...]]:
        import asyncpg

        assert self.postgres is not None
        conn = await asyncpg.connect(
            host=self.postgres.host,
            port=self.postgres.port,
            user="postgres",
            database=self.database,
        )
        try:
            return [tuple(r) for r in await conn.fetch(query, *args)]
        finally:
            await conn.close()

    def _sqlite(self) -> Path:
        return self.project.root / "data" / "nonebot_plugin_orm" / "db.sqlite3"

    async def insert(self, *rows: tuple[str, str, datetime]) -> None:
        if self.postgres is None:
            with sqlite3.connect(self._sqlite()) as conn:
                conn.executemany(
                    "insert into amrita_plugin_memory_user_memo (user_id, content, updated_at) values (?, ?, ?)",
                    [(k, c, t.strftime("%Y-%m-%d %H:%M:%S.%f")) for k, c, t in rows],
                )
            return
        for row in rows:
            await self._pg(
                "insert into amrita_plugin_memory_user_memo (user_id, content, updated_at) values ($1, $2, $3)",
                *row,
            )

    async def contents(self) -> dict[str, str]:
        query = "select user_id, content from amrita_plugin_memory_user_memo"
        if self.postgres is None:
            with contextlib.closing(sqlite3.connect(self._sqlite())) as conn:
                return dict(conn.execute(query))
        return {str(k): str(c) for k, c in await self._pg(query)}


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_bot_start_and_cli_migrate_legacy_memo_rows(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path, embed_server: EmbeddingServer
) -> None:
    project = BotProject(tmp_path / "bot")
    table = MemoTable(
        project, request.getfixturevalue("postgres") if engine == "postgresql" else None
    )
    upgrade = project.command("orm", "upgrade")
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    with contextlib.closing(sqlite3.connect(table._sqlite())) as conn:
        local = {name for (name,) in conn.execute("select name from sqlite_master")}
    assert ("amrita_plugin_memory_user_memo" in local) is (engine == "sqlite")
    await table.insert(("user_10001", "启动前写下的旧备忘录", OLD))

    # A real bot start: migrated after the ORM is ready, before the server is up.
    log = run_bot_until_started(project)
    line = "[Memory] 已把 1 条旧格式键的备忘录迁移到当前格式"
    assert line in log and log.index(line) < log.index("Application startup complete")
    assert await table.contents() == {"QQPlatform_Private_10001": "启动前写下的旧备忘录"}

    # The CLI, on rows that appeared later (an older copy of user_10001 conflicts).
    await table.insert(("group_20001", "群的旧备忘录", OLD), ("user_10001", "更早的旧行", OLDER))
    dry = project.ambot("migrate-keys", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "备忘录：共 3 条，需要迁移 2 条" in dry.stdout and "试运行" in dry.stdout
    assert len(await table.contents()) == 3
    run = project.ambot("migrate-keys")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "备忘录：共 3 条，已迁移 2 条" in run.stdout
    assert "user_10001 与 QQPlatform_Private_10001 同时存在" in run.stdout
    assert await table.contents() == {
        "QQPlatform_Private_10001": "启动前写下的旧备忘录",  # the newer of the two
        "QQPlatform_Group_20001": "群的旧备忘录",
    }
    again = project.ambot("migrate-keys")
    assert again.returncode == 0 and "备忘录：共 2 条，已迁移 0 条" in again.stdout
