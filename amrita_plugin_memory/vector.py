"""The single ChromaDB wrapper used by every layer.

:class:`ChromaConnection` owns the one Chroma client of the process (embedded
``PersistentClient`` under the plugin data dir, or ``HttpClient`` for a remote
server). :class:`MemoryStore` wraps one collection of memories and confines
every read and write to one partition, so an id of another partition behaves
exactly like an id that does not exist: searches, listings and counts filter
inside the database query (``where user_id == partition``); operations on one
id fetch that id alone and check the stored partition before anything is
returned or changed (a ``where`` next to ``ids`` makes Chroma evaluate the
filter over the whole partition, which made by-id cost grow with its size).

Every Chroma call runs in a worker thread (``asyncio.to_thread``): the Rust
bindings and the HTTP client are blocking and must never stall the bot's
event loop. Only explicit embeddings are stored; Chroma's default embedding
function is never used (it would try to download a model).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .config import EnvConfig

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

    from .embed import EmbeddingClient

__all__ = [
    "IMPORTANCE_LEVELS",
    "MEMORY_COLLECTION",
    "SCOPES",
    "ChromaConnection",
    "DataDirLocked",
    "DimensionMismatch",
    "MemoryRecord",
    "MemoryStore",
    "PartitionCounts",
    "PartitionLocks",
    "VectorStoreError",
]

MEMORY_COLLECTION = "amrita_user_memory"
IMPORTANCE_LEVELS: tuple[str, ...] = ("low", "medium", "high")
SCOPES: tuple[str, ...] = ("user", "group")
Scope = Literal["user", "group"]
LOCK_FILE_NAME = ".amrita_memory.lock"

T = TypeVar("T")


class VectorStoreError(RuntimeError):
    """ChromaDB failed or is unreachable; the message is meant for humans."""


class DataDirLocked(VectorStoreError):
    """Another process holds the embedded ChromaDB directory."""


class DimensionMismatch(VectorStoreError):
    """The embedding service returned vectors of another size than the collection's."""


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------
# Per-partition locks
# ---------------------------------------------------------------------------


class PartitionLocks:
    """Async locks keyed by partition, bounded by use.

    Locks live in a ``WeakValueDictionary``: a lock exists only while some
    coroutine holds or waits for it, so the pool never grows with the number
    of partitions ever seen.
    """

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def get(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock = self.get(key)  # strong reference for the duration
        async with lock:
            yield

    def __len__(self) -> int:
        return len(self._locks)


class PartitionCounts:
    """Memory counts per partition for the limit check, so a write does not list its partition.

    Owned by :class:`MemoryStore` and changed only under the partition's lock.
    An entry is an exact count taken from Chroma, then kept by the store's own
    adds and deletes; it expires after ``ttl`` seconds so that writes of another
    process (a second bot or a CLI on a remote Chroma) are seen again, and the
    store re-counts before it refuses a write, so a refusal is always exact.
    At most ``max_entries`` partitions are remembered (least recently used go).
    """

    def __init__(self, *, ttl: float = 60.0, max_entries: int = 4096) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def get(self, partition: str) -> int | None:
        entry = self._entries.get(partition)
        if entry is None:
            return None
        count, taken = entry
        if time.monotonic() - taken > self.ttl:
            del self._entries[partition]
            return None
        self._entries.move_to_end(partition)
        return count

    def set(self, partition: str, count: int) -> None:
        self._entries[partition] = (count, time.monotonic())
        self._entries.move_to_end(partition)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def adjust(self, partition: str, delta: int) -> None:
        """Apply a write of ours to a known count (unknown partitions stay unknown)."""
        entry = self._entries.get(partition)
        if entry is not None:
            self._entries[partition] = (max(entry[0] + delta, 0), entry[1])

    def drop(self, partition: str) -> None:
        self._entries.pop(partition, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


# ---------------------------------------------------------------------------
# Connection
# ---------------------------------------------------------------------------


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
                        f"无法连接向量数据库（{self.describe()}）：{_short(exc)}"
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
                    f"嵌入向量维度与向量库不一致（{_short(exc)}）：嵌入模型可能已更换，"
                    "请运行 `ambot memory reindex` 重映射"
                ) from exc
            raise VectorStoreError(
                f"向量数据库操作失败（{self.describe()}）：{_short(exc)}"
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


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{exc.__class__.__name__}: {first[:300]}" if first else exc.__class__.__name__


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class MemoryRecord:
    """One memory as the plugin sees it (not a raw Chroma structure)."""

    id: str
    content: str
    partition: str
    scope: str
    tags: list[str] = field(default_factory=list)
    importance: str = "medium"
    created_at: str = ""
    updated_at: str = ""
    distance: float | None = None

    @classmethod
    def from_chroma(
        cls,
        memory_id: str,
        document: str | None,
        meta: Mapping[str, Any] | None,
        distance: float | None = None,
    ) -> MemoryRecord:
        meta = meta or {}
        return cls(
            id=memory_id,
            content=document or "",
            partition=str(meta.get("user_id", "")),
            scope=str(meta.get("scope", "user")),
            tags=decode_tags(meta.get("tags")),
            importance=str(meta.get("importance", "medium")),
            created_at=str(meta.get("created_at", "")),
            updated_at=str(meta.get("updated_at", meta.get("created_at", ""))),
            distance=None if distance is None else round(float(distance), 4),
        )

    def to_metadata(self) -> dict[str, Any]:
        return {
            "user_id": self.partition,
            "scope": self.scope,
            "tags": encode_tags(self.tags),
            "importance": self.importance,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    def compact(self) -> dict[str, Any]:
        """The short form an LLM reads cheaply."""
        out: dict[str, Any] = {
            "id": self.id,
            "content": self.content,
            "tags": self.tags,
            "importance": self.importance,
            "created_at": self.created_at,
        }
        if self.distance is not None:
            out["distance"] = self.distance
        return out


def encode_tags(tags: Iterable[str]) -> str:
    # Stored as a JSON string: list-valued metadata is not portable across
    # Chroma versions and servers.
    return json.dumps(list(tags), ensure_ascii=False)


def decode_tags(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    if not isinstance(value, str) or not value:
        return []
    try:
        parsed = json.loads(value)
    except ValueError:
        return [t.strip() for t in value.split(",") if t.strip()]
    return [str(v) for v in parsed] if isinstance(parsed, list) else []


def _where(partition: str, **filters: str | None) -> dict[str, Any]:
    clauses: list[dict[str, Any]] = [{"user_id": partition}]
    clauses += [{k: v} for k, v in filters.items() if v is not None]
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


# ---------------------------------------------------------------------------
# Store
# ---------------------------------------------------------------------------


class MemoryLimitReached(VectorStoreError):
    """The partition already holds ``limit`` memories."""

    def __init__(self, limit: int, count: int) -> None:
        super().__init__(f"该分区的记忆已达上限（{count}/{limit} 条），请先合并或删除旧记忆")
        self.limit = limit
        self.count = count


class MemoryStore:
    """Memories in one Chroma collection, every operation confined to a partition."""

    def __init__(
        self,
        connection: ChromaConnection,
        embedder: EmbeddingClient,
        name: str = MEMORY_COLLECTION,
    ) -> None:
        self.connection = connection
        self.embedder = embedder
        self.name = name
        self.locks = PartitionLocks()
        self.counts = PartitionCounts()
        self._collection: Collection | None = None

    # -- collection handle --------------------------------------------------

    async def collection(self) -> Collection:
        if self._collection is None:
            col = await self.connection.get_collection(self.name)
            assert col is not None
            self._collection = col
        return self._collection

    def invalidate(self) -> None:
        """Forget the cached handle and counts (after the collection was replaced)."""
        self._collection = None
        self.counts.clear()

    async def _run(self, fn: Callable[[Collection], T]) -> T:
        col = await self.collection()
        try:
            return await self.connection.run(fn, col)
        except VectorStoreError as exc:
            # A replaced or deleted collection: refetch once.
            if "does not exist" in str(exc) or "NotFound" in str(exc):
                self.invalidate()
                col = await self.collection()
                return await self.connection.run(fn, col)
            raise

    # -- collection metadata --------------------------------------------------

    async def get_metadata(self) -> dict[str, Any]:
        """The collection metadata, read fresh (another process may have changed it)."""
        col = await self.connection.get_collection(self.name)
        assert col is not None
        self._collection = col
        return dict(col.metadata or {})

    async def get_meta(self, key: str) -> Any:
        return (await self.get_metadata()).get(key)

    async def set_meta(self, values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the collection metadata (Chroma replaces it whole)."""
        merged = await self.get_metadata()
        merged.update(values)
        merged = {k: v for k, v in merged.items() if not k.startswith("hnsw:")}
        await self._run(lambda c: c.modify(metadata=merged))

    # -- embedding --------------------------------------------------------------

    async def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.embedder.embed(list(texts))

    # -- writes ---------------------------------------------------------------------

    async def add(
        self,
        partition: str,
        scope: str,
        content: str,
        *,
        tags: Sequence[str] = (),
        importance: str = "medium",
        limit: int | None = None,
    ) -> MemoryRecord:
        """Embed and store one memory; with ``limit``, refuse when the partition is full.

        The count check and the add happen under the partition's lock, so
        concurrent writers cannot exceed the limit. The text is embedded before
        anything is written: an embedding failure leaves nothing behind.
        """
        vector = (await self._embed([content]))[0]
        now = utc_now()
        record = MemoryRecord(
            id=uuid.uuid4().hex,
            content=content,
            partition=partition,
            scope=scope,
            tags=list(tags),
            importance=importance,
            created_at=now,
            updated_at=now,
        )
        async with self.locks.hold(partition):
            if limit is not None:
                count = self.counts.get(partition)
                if count is None or count >= limit:  # unknown, or about to refuse: exact
                    count = await self.count(partition)
                    self.counts.set(partition, count)
                if count >= limit:
                    raise MemoryLimitReached(limit, count)
            try:
                await self._run(
                    lambda c: c.add(
                        ids=[record.id],
                        documents=[record.content],
                        embeddings=[vector],  # type: ignore[arg-type]
                        metadatas=[record.to_metadata()],
                    )
                )
            except BaseException:
                self.counts.drop(partition)  # the add may or may not have landed
                raise
            self.counts.adjust(partition, +1)
        return record

    async def update(
        self,
        partition: str,
        memory_id: str,
        *,
        content: str | None = None,
        tags: Sequence[str] | None = None,
        importance: str | None = None,
    ) -> MemoryRecord | None:
        """Change a memory of ``partition``; ``None`` if it is not there."""
        vector = (await self._embed([content]))[0] if content is not None else None
        async with self.locks.hold(partition):
            current = await self.get(partition, memory_id)
            if current is None:
                return None
            if content is not None:
                current.content = content
            if tags is not None:
                current.tags = list(tags)
            if importance is not None:
                current.importance = importance
            current.updated_at = utc_now()
            kwargs: dict[str, Any] = {"ids": [memory_id], "metadatas": [current.to_metadata()]}
            if vector is not None:
                kwargs.update(documents=[current.content], embeddings=[vector])
            await self._run(lambda c: c.update(**kwargs))
        return current

    async def delete(self, partition: str, memory_id: str) -> bool:
        """Delete a memory of ``partition``; ``False`` if it is not there."""
        async with self.locks.hold(partition):
            # Ownership is checked under the partition's lock; only key
            # migration moves a memory between partitions, and it runs before
            # the bot serves anyone.
            if await self.get(partition, memory_id) is None:
                return False
            try:
                await self._run(lambda c: c.delete(ids=[memory_id]))
            except BaseException:
                self.counts.drop(partition)
                raise
            self.counts.adjust(partition, -1)
        return True

    # -- reads ------------------------------------------------------------------------

    async def get(self, partition: str, memory_id: str) -> MemoryRecord | None:
        """The memory ``memory_id`` if it belongs to ``partition``, else ``None``.

        Fetches by id alone and compares the stored partition: as cheap in a
        10,000-memory partition as in an empty one. A memory of another
        partition is never returned, and callers mutate only what this returned.
        """
        res = await self._run(lambda c: c.get(ids=[memory_id], include=["documents", "metadatas"]))
        if not res["ids"]:
            return None
        meta = (res.get("metadatas") or [None])[0]
        if meta is None or meta.get("user_id") != partition:
            return None
        docs = res.get("documents") or [None]
        return MemoryRecord.from_chroma(res["ids"][0], docs[0], meta)

    async def query(
        self,
        partition: str,
        text: str,
        *,
        top_k: int = 5,
        importance: str | None = None,
    ) -> list[MemoryRecord]:
        """Nearest memories of ``partition`` (smaller distance = closer)."""
        vector = (await self._embed([text]))[0]
        return await self.query_vector(partition, vector, top_k=top_k, importance=importance)

    async def query_vector(
        self,
        partition: str,
        vector: Sequence[float],
        *,
        top_k: int = 5,
        importance: str | None = None,
    ) -> list[MemoryRecord]:
        res = await self._run(
            lambda c: c.query(
                query_embeddings=[list(vector)],
                n_results=top_k,
                where=_where(partition, importance=importance),
                include=["documents", "metadatas", "distances"],
            )
        )
        ids = res["ids"][0] if res["ids"] else []
        docs = (res.get("documents") or [[]])[0]
        metas = (res.get("metadatas") or [[]])[0]
        dists = (res.get("distances") or [[]])[0]
        return [
            MemoryRecord.from_chroma(i, d, m, dist)
            for i, d, m, dist in zip(ids, docs, metas, dists, strict=False)
        ]

    async def list(self, partition: str, *, limit: int = 20, offset: int = 0) -> list[MemoryRecord]:
        """Memories of ``partition``, oldest first."""
        res = await self._run(
            lambda c: c.get(
                where=_where(partition),
                limit=limit,
                offset=offset,
                include=["documents", "metadatas"],
            )
        )
        docs = res.get("documents") or [None] * len(res["ids"])
        metas = res.get("metadatas") or [None] * len(res["ids"])
        return [
            MemoryRecord.from_chroma(i, d, m)
            for i, d, m in zip(res["ids"], docs, metas, strict=False)
        ]

    async def count(self, partition: str | None = None) -> int:
        """Memories in ``partition``, or in the whole collection."""
        if partition is None:
            return await self._run(lambda c: c.count())
        res = await self._run(lambda c: c.get(where=_where(partition), include=[]))
        return len(res["ids"])

    # -- maintenance (key migration, statistics, backups) ------------------------------

    async def page(
        self, *, offset: int, limit: int, with_documents: bool = False
    ) -> list[MemoryRecord]:
        """One page of the whole collection (all partitions), in storage order."""
        include: list[Any] = ["metadatas", "documents"] if with_documents else ["metadatas"]
        res = await self._run(lambda c: c.get(limit=limit, offset=offset, include=include))
        n = len(res["ids"])
        docs = res.get("documents") or [None] * n
        metas = res.get("metadatas") or [None] * n
        return [
            MemoryRecord.from_chroma(i, d, m)
            for i, d, m in zip(res["ids"], docs, metas, strict=False)
        ]

    async def rewrite_partition_keys(self, updates: Mapping[str, str]) -> None:
        """Set ``user_id`` of the given memories (used by key migration only)."""
        ids = list(updates)
        res = await self._run(lambda c: c.get(ids=ids, include=["metadatas"]))
        new_metas = []
        for memory_id, meta in zip(res["ids"], res.get("metadatas") or [], strict=False):
            meta = dict(meta or {})
            meta["user_id"] = updates[memory_id]
            new_metas.append(meta)
        try:
            if res["ids"]:
                await self._run(lambda c: c.update(ids=list(res["ids"]), metadatas=new_metas))
        finally:
            self.counts.clear()  # memories moved between partitions

    async def distribution(self, page_size: int = 1000) -> dict[tuple[str, str], int]:
        """Memory count per ``(partition, scope)``, paging through the collection."""
        counts: dict[tuple[str, str], int] = {}
        offset = 0
        while page := await self.page(offset=offset, limit=page_size):
            offset += len(page)
            for record in page:
                key = (record.partition, record.scope)
                counts[key] = counts.get(key, 0) + 1
        return counts
