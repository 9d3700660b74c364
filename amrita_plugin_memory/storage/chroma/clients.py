"""How a ChromaDB client is made in each mode: embedded, a child server, remote.

Its own module because making a client is chromadb's API and settings (tenants,
databases, ``Settings`` that ``HttpClient`` mutates, an admin client released at once),
while :class:`~.connection.ChromaConnection` is about the client's life: when to
connect, the data-dir lock, calls in flight, closing. The connection decides which of
these to call, under its own bookkeeping; every function here blocks (a worker thread).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nonebot.log import logger

from ...core.config import EnvConfig
from ...core.errors import VectorStoreError
from ...core.text import short_error
from .local_server import LocalChromaServer, PortTaken

if TYPE_CHECKING:
    from chromadb.api import AdminAPI, ClientAPI

__all__ = ["embedded_client", "remote_client", "served_client"]


def _remote_name(value: str, default: str) -> str:
    # The spec's default "default" means Chroma's own default tenant/database.
    return default if value in ("", "default") else value


def _release_admin(admin: AdminAPI) -> None:
    """Stop the System behind a chromadb ``AdminClient`` (1.5.x has no ``close()`` for it).

    The one place that reaches into chromadb's internals:
    ``tests/test_remap_live.py::test_remote_admin_client_is_released`` fails
    loudly when they change.
    """
    from chromadb.api.shared_system_client import SharedSystemClient

    SharedSystemClient._release_system(admin._identifier)  # type: ignore[attr-defined]


def embedded_client(chroma_dir: Path) -> ClientAPI:
    """Chroma in this process, on the (already locked) data directory ``chroma_dir``."""
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(
        path=str(chroma_dir), settings=Settings(anonymized_telemetry=False)
    )


def remote_client(env: EnvConfig) -> ClientAPI:
    """A client of the remote server ``env`` names (its tenant and database created first
    when they are named and missing)."""
    import chromadb
    from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT, Settings

    tenant = _remote_name(env.vector_db_tenant, DEFAULT_TENANT)
    database = _remote_name(env.vector_db_database, DEFAULT_DATABASE)

    def settings() -> Settings:
        # HttpClient mutates its Settings, so every client gets a fresh one.
        return Settings(
            anonymized_telemetry=False,
            chroma_api_impl="chromadb.api.fastapi.FastAPI",
            chroma_server_host=env.vector_db_server,
            chroma_server_http_port=env.vector_db_port,
            chroma_server_ssl_enabled=env.vector_db_server_ssl,
            chroma_server_headers=dict(env.vector_db_remote_headers) or None,
        )

    if tenant != DEFAULT_TENANT or database != DEFAULT_DATABASE:
        # A named tenant/database that does not exist yet is created, as a
        # fresh deployment expects rather than a "tenant not found" error.
        # The admin client is needed only for that, so it is released at once.
        from chromadb.errors import NotFoundError

        admin = chromadb.AdminClient(settings())
        try:
            try:
                admin.get_tenant(tenant)
            except (NotFoundError, ValueError):
                admin.create_tenant(tenant)
            try:
                admin.get_database(database, tenant=tenant)
            except (NotFoundError, ValueError):
                admin.create_database(database, tenant=tenant)
        finally:
            _release_admin(admin)
    return chromadb.HttpClient(
        host=env.vector_db_server,
        port=env.vector_db_port,
        ssl=env.vector_db_server_ssl,
        headers=dict(env.vector_db_remote_headers) or None,
        settings=settings(),
        tenant=tenant,
        database=database,
    )


def served_client(server: LocalChromaServer, chroma_dir: Path) -> ClientAPI:
    """A client of the child ``server`` of ``chroma_dir`` (started, or restarted after it
    died, first)."""
    import chromadb
    from chromadb.config import Settings

    if not server.alive():
        try:
            server.start()
        except RuntimeError as exc:
            detail = str(exc) if isinstance(exc, PortTaken) else short_error(exc)
            raise VectorStoreError(
                f"无法启动本地 ChromaDB 子进程（{chroma_dir}）：{detail}；"
                "可设置 VECTOR_DB_LOCAL_SERVER=false 改为进程内运行"
            ) from exc
        logger.info(
            f"[Memory] 本地向量库由子进程提供（chroma run，PID {server.pid}，{server.url}）"
        )
    settings = Settings(
        anonymized_telemetry=False,
        chroma_api_impl="chromadb.api.fastapi.FastAPI",
        chroma_server_host="127.0.0.1",
        chroma_server_http_port=server.port,
    )
    return chromadb.HttpClient(host="127.0.0.1", port=server.port, settings=settings)
