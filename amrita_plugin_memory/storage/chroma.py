"""The process-wide ChromaDB client (embedded or remote), used by every layer.

Every Chroma call runs in a worker thread (``asyncio.to_thread``): the Rust
bindings and the HTTP client are blocking and must never stall the bot's
event loop. Only explicit embeddings are stored; Chroma's default embedding
function is never used (it would try to download a model).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.config import EnvConfig
from ..core.errors import DataDirLocked, DimensionMismatch, VectorStoreError
from ..core.text import short_error

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

__all__ = ["LOCK_FILE_NAME", "ChromaConnection"]

LOCK_FILE_NAME = ".amrita_memory.lock"

T = TypeVar("T")


def _remote_name(value: str, default: str) -> str:
    # The spec's default "default" means Chroma's own default tenant/database.
    return default if value in ("", "default") else value


class ChromaConnection:
    """The process-wide ChromaDB client, created lazily off the event loop.

    In local mode the data directory is locked with ``flock`` for the life of
    the connection so that two processes (a running bot and a maintenance
    command) never write the same embedded database at once.
    """

    def __init__(self, env: EnvConfig, chroma_dir: Path) -> None:
        self.env = env
        self.chroma_dir = chroma_dir
        self._client: ClientAPI | None = None
        self._lock_fd: int | None = None
        self._connect_lock = asyncio.Lock()

    @property
    def mode(self) -> str:
        return self.env.vector_db_type

    def describe(self) -> str:
        if self.mode == "local":
            return f"local {self.chroma_dir}"
        scheme = "https" if self.env.vector_db_server_ssl else "http"
        return f"remote {scheme}://{self.env.vector_db_server}:{self.env.vector_db_port}"

    def _lock_data_dir(self) -> None:
        self.chroma_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.chroma_dir / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise DataDirLocked(
                f"本地向量库 {self.chroma_dir} 正被另一个进程（PID {holder}，可能是运行中的 Bot）使用；"
                "请先停止它，或改用远程 ChromaDB（VECTOR_DB_TYPE=remote）"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def _connect_sync(self) -> ClientAPI:
        import chromadb
        from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT, Settings

        if self.mode == "local":
            if self._lock_fd is None:
                self._lock_data_dir()
            return chromadb.PersistentClient(
                path=str(self.chroma_dir), settings=Settings(anonymized_telemetry=False)
            )
        tenant = _remote_name(self.env.vector_db_tenant, DEFAULT_TENANT)
        database = _remote_name(self.env.vector_db_database, DEFAULT_DATABASE)

        def settings() -> Settings:
            # HttpClient mutates its Settings, so every client gets a fresh one.
            return Settings(
                anonymized_telemetry=False,
                chroma_api_impl="chromadb.api.fastapi.FastAPI",
                chroma_server_host=self.env.vector_db_server,
                chroma_server_http_port=self.env.vector_db_port,
                chroma_server_ssl_enabled=self.env.vector_db_server_ssl,
                chroma_server_headers=dict(self.env.vector_db_remote_headers) or None,
            )

        if tenant != DEFAULT_TENANT or database != DEFAULT_DATABASE:
            # A named tenant/database that does not exist yet is created, as a
            # fresh deployment expects rather than a "tenant not found" error.
            from chromadb.errors import NotFoundError

            admin = chromadb.AdminClient(settings())
            try:
                admin.get_tenant(tenant)
            except (NotFoundError, ValueError):
                admin.create_tenant(tenant)
            try:
                admin.get_database(database, tenant=tenant)
            except (NotFoundError, ValueError):
                admin.create_database(database, tenant=tenant)
        return chromadb.HttpClient(
            host=self.env.vector_db_server,
            port=self.env.vector_db_port,
            ssl=self.env.vector_db_server_ssl,
            headers=dict(self.env.vector_db_remote_headers) or None,
            settings=settings(),
            tenant=tenant,
            database=database,
        )

    async def client(self) -> ClientAPI:
        if self._client is not None:
            return self._client
        async with self._connect_lock:
            if self._client is None:
                try:
                    self._client = await asyncio.to_thread(self._connect_sync)
                except VectorStoreError:
                    raise
                except Exception as exc:
                    raise VectorStoreError(
                        f"无法连接向量数据库（{self.describe()}）：{short_error(exc)}"
                    ) from exc
        return self._client

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking Chroma call in a worker thread, mapping its errors."""
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except VectorStoreError:
            raise
        except Exception as exc:
            if "expecting embedding with dimension" in str(exc):
                # Not an outage: the embedding model changed under us.
                raise DimensionMismatch(
                    f"嵌入向量维度与向量库不一致（{short_error(exc)}）：嵌入模型可能已更换，"
                    "请运行 `ambot memory reindex` 重映射"
                ) from exc
            raise VectorStoreError(
                f"向量数据库操作失败（{self.describe()}）：{short_error(exc)}"
            ) from exc

    async def get_collection(self, name: str, *, create: bool = True) -> Collection | None:
        client = await self.client()
        if create:
            return await self.run(client.get_or_create_collection, name, embedding_function=None)
        names = await self.run(lambda: [c.name for c in client.list_collections()])
        if name not in names:
            return None
        return await self.run(client.get_collection, name, embedding_function=None)

    async def delete_collection(self, name: str) -> None:
        client = await self.client()
        await self.run(client.delete_collection, name)

    async def list_collections(self) -> list[str]:
        client = await self.client()
        return await self.run(lambda: [c.name for c in client.list_collections()])

    async def create_collection(self, name: str, metadata: Mapping[str, Any]) -> Collection:
        """Create ``name`` with ``metadata``; fails if it already exists."""
        client = await self.client()
        return await self.run(
            client.create_collection, name, metadata=dict(metadata), embedding_function=None
        )

    async def rename_collection(self, old: str, new: str) -> None:
        """Rename a collection (``new`` must not exist); handles to it stay valid."""
        client = await self.client()

        def rename() -> None:
            client.get_collection(old, embedding_function=None).modify(name=new)

        await self.run(rename)

    def close(self) -> None:
        self._client = None
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = None
