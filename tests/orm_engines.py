"""The plugin's tables on another database, in the test session's own process.

:func:`bound_to` is what ``SQLALCHEMY_BINDS={"amrita_plugin_memory": url}`` does at start-up
(nonebot_plugin_orm's ``_init_table``: the plugin's models get that engine, everything else
keeps the default one), applied for the length of one test: the session's
``get_session()`` then opens sessions in which the plugin's models live on ``url`` while
Amrita's stay on the session's SQLite file. :func:`migrate` creates the tables with the
plugin's shipped migration scripts (the same ``upgrade()`` functions ``ambot orm upgrade``
runs), not from the models.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MIGRATIONS = ROOT / "amrita_plugin_memory" / "migrations"
PLUGIN = "amrita_plugin_memory"


def migration_chain() -> list[ModuleType]:
    """The plugin's migration modules, oldest first (following ``down_revision``)."""
    modules: dict[str | None, ModuleType] = {}
    for path in sorted(MIGRATIONS.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_apm_migration_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[module.down_revision] = module
    chain: list[ModuleType] = []
    parent: str | None = None
    while parent in modules:
        chain.append(modules[parent])
        parent = chain[-1].revision
    assert len(chain) == len(modules), "the plugin's migrations are not one linear chain"
    return chain


async def migrate(engine: Any) -> None:
    """Run every plugin migration's ``upgrade()`` on ``engine``."""
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    chain = migration_chain()

    def upgrade(connection: Any) -> None:
        context = MigrationContext.configure(connection)
        with Operations.context(context):
            for module in chain:
                # The session has no SQLALCHEMY_BINDS: the tables belong to "" here.
                module.upgrade("")

    async with engine.begin() as connection:
        await connection.run_sync(upgrade)


@contextlib.asynccontextmanager
async def bound_to(url: str) -> AsyncIterator[Any]:
    """The plugin's models on ``url`` (migrated first) until the block ends; yields the engine."""
    import nonebot_plugin_orm as orm
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    engine = create_async_engine(url)
    await migrate(engine)
    saved = orm._session_factory
    binds = {
        model: (engine if model.__table__.info.get("bind_key") == PLUGIN else bind)
        for model, bind in orm._binds.items()
    }
    assert any(bind is engine for bind in binds.values()), "no model of the plugin found"
    orm._session_factory = async_sessionmaker(
        orm._engines[""], binds=binds, **orm.plugin_config.sqlalchemy_session_options
    )
    try:
        yield engine
    finally:
        orm._session_factory = saved
        await engine.dispose()
