"""The process-wide ChromaDB client (embedded or remote), used by every layer.

Every Chroma call runs in a worker thread (``asyncio.to_thread``): the Rust
bindings and the HTTP client are blocking and must never stall the bot's
event loop. Only explicit embeddings are stored; Chroma's default embedding
function is never used (it would try to download a model). How each mode's client
is made is :mod:`.clients`; this module is the client's life (connect, lock, close).

Closing matters (issue 12, item 1). chromadb keeps one "System" per data
directory for the whole process (``SharedSystemClient``) and stops it only
when the last client is ``close()``-d. The embedded System caches each
collection's vector index and remembers which collections it has already
replayed from Chroma's write-ahead log. A connection that merely dropped its
client reference kept that System alive; reopening the directory in the same
process then reused it, and records another process had written meanwhile
were visible to ``get``/``count`` (SQLite) but not to vector queries (the
stale in-memory index): "listed but not found". :meth:`ChromaConnection.close`
therefore really closes the client before it releases the data-dir lock, and
:meth:`ChromaConnection.refresh` gives re-embedding a fresh view to verify.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nonebot.log import logger

from ...core.config import EnvConfig
from ...core.errors import DataDirLocked, DimensionMismatch, VectorStoreError
from ...core.text import short_error
from .clients import embedded_client, remote_client, served_client
from .local_server import LocalChromaServer, can_supervise

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

__all__ = ["CLOSE_WAIT_SECONDS", "LOCK_FILE_NAME", "ChromaConnection", "is_missing_collection"]

LOCK_FILE_NAME = ".amrita_memory.lock"

CLOSE_WAIT_SECONDS = 10.0
"""How long :meth:`ChromaConnection.close` waits for Chroma calls still running."""

T = TypeVar("T")


_BEING_DROPPED = re.compile(r"Missing (?:metadata|vector|record) segment")
"""Chroma's answer to a request that reaches a collection while it is being deleted
(chromadb 1.5: HTTP 412, ``ChromaError: Missing field: [Missing metadata segment]``)."""


def is_missing_collection(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause) says the collection does not exist, or is being
    deleted right now (a remap's swap drops the original: see :data:`_BEING_DROPPED`)."""
    text = f"{exc} {exc.__cause__ or ''}"
    return (
        "does not exist" in text
        or "NotFound" in text
        or "not found" in text.lower()
        or _BEING_DROPPED.search(text) is not None
    )


def _is_transport_error(exc: BaseException) -> bool:
    """A connection refused/reset (the server is not answering), not an answer."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return isinstance(exc, OSError) or "TransportError" in names


class ChromaConnection:
    """The process-wide ChromaDB client, created lazily off the event loop.

    In local mode the data directory is locked with ``flock`` for the life of
    the connection so that two processes (a running bot and a maintenance
    command) never write the same embedded database at once. :meth:`close`
    closes the client first and only then releases the lock; a closed
    connection reconnects (and re-locks) lazily on its next use, except after
    ``close(final=True)`` (the bot's shutdown): then it stays closed, so no
    late call starts a new child server while the bot exits.
    ``generation`` changes whenever the client is closed or replaced:
    collection handles taken from an older generation must be fetched again.

    Connecting (which may start a child server: up to a minute) happens
    outside ``_state``: the lock guards only quick bookkeeping, so worker
    threads entering and leaving calls never queue behind a start.
    """

    def __init__(self, env: EnvConfig, chroma_dir: Path, *, serve: bool | None = None) -> None:
        self.env = env
        self.chroma_dir = chroma_dir
        wanted = env.vector_db_local_server if serve is None else serve
        self.served = self.mode == "local" and (can_supervise() if wanted == "auto" else wanted)
        """Local mode through a child ``chroma run`` (:mod:`.local_server`), not in-process."""
        self.server: LocalChromaServer | None = None
        self._client: ClientAPI | None = None
        self._lock_fd: int | None = None
        self._state = threading.Condition()
        """Guards the client, the lock fd and the flags below (any thread); never held
        while waiting for Chroma or a child process."""
        self._active = 0
        self._closing = False
        self._connecting = False
        """One thread is connecting (outside the lock); others wait for its client."""
        self._final = False
        """Closed for good (:meth:`close` with ``final``): never reconnects."""
        self.generation = 0
        self.writers_seen = False
        """Set by the first guarded write (``storage.chroma.remap_markers``): this process serves writers,
        so maintenance run in it waits for them like for other processes'."""

    @property
    def mode(self) -> str:
        return self.env.vector_db_type

    def prefer_in_process(self) -> None:
        """Open the local data directory in this process, not through a child server
        (a maintenance command: no event loop to protect, and it starts faster).
        Only before the first connection."""
        if self._client is None and self.server is None:
            self.served = False

    @property
    def in_process(self) -> bool:
        """Whether Chroma runs in this process (its writes then hold the GIL)."""
        return self.mode == "local" and not self.served

    def describe(self) -> str:
        if self.mode == "local":
            return f"local {self.chroma_dir}" + (" (子进程)" if self.served else "")
        scheme = "https" if self.env.vector_db_server_ssl else "http"
        return f"remote {scheme}://{self.env.vector_db_server}:{self.env.vector_db_port}"

    # -- connecting ---------------------------------------------------------------

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
        if self.mode == "local":
            if self._lock_fd is None:
                self._lock_data_dir()
            if self.served:
                return self._served_client()
            return embedded_client(self.chroma_dir)
        return remote_client(self.env)

    def _served_client(self) -> ClientAPI:
        """A client of the child server (started, or restarted after it died, first)."""
        if self.server is None:
            self.server = LocalChromaServer(self.chroma_dir)
        return served_client(self.server, self.chroma_dir)

    def _ensure_client(self) -> ClientAPI:
        with self._state:
            while self._closing or self._connecting:
                self._state.wait()
            if self._final:
                raise VectorStoreError("向量库连接已关闭（Bot 正在停止），不再重新打开")
            if self._client is not None:
                return self._client
            self._connecting = True
        client: ClientAPI | None = None
        try:
            client = self._connect_sync()  # may start a child server: not under the lock
            return client
        finally:
            with self._state:
                self._client = client
                self._connecting = False
                self._state.notify_all()

    async def client(self) -> ClientAPI:
        client = self._client
        if client is not None:
            return client
        try:
            return await asyncio.to_thread(self._ensure_client)
        except VectorStoreError:
            raise
        except Exception as exc:
            raise VectorStoreError(
                f"无法连接向量数据库（{self.describe()}）：{short_error(exc)}"
            ) from exc

    # -- calls ------------------------------------------------------------------------

    def _enter_call(self) -> None:
        with self._state:
            while self._closing:
                self._state.wait()
            self._active += 1

    def _leave_call(self) -> None:
        with self._state:
            self._active -= 1
            if self._active == 0:
                self._state.notify_all()

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking Chroma call in a worker thread, mapping its errors.

        :meth:`close` waits for calls in progress, so a write that started
        before a shutdown finishes before the client goes away.
        """

        def call() -> T:
            self._enter_call()
            try:
                return fn(*args, **kwargs)
            finally:
                self._leave_call()

        server = self.server
        if self.served and server is not None and self._client is not None and not server.alive():
            # The child is gone: its port may be anybody's now, so never send it a request.
            await asyncio.to_thread(self.refresh)
            raise VectorStoreError("本地 ChromaDB 子进程已退出，下次操作时将重新启动")
        try:
            return await asyncio.to_thread(call)
        except VectorStoreError:
            raise
        except Exception as exc:
            server = self.server
            if (
                self.served
                and server is not None
                and _is_transport_error(exc)
                and await asyncio.to_thread(server.died)
            ):
                # The child died (killed, out of memory): the next call starts a new one.
                await asyncio.to_thread(self.refresh)
                raise VectorStoreError(
                    f"本地 ChromaDB 子进程已退出，下次操作时将重新启动：{short_error(exc)}"
                ) from exc
            if "expecting embedding with dimension" in str(exc):
                # Not an outage: the embedding model changed under us.
                raise DimensionMismatch(
                    f"嵌入向量维度与向量库不一致（{short_error(exc)}）：嵌入模型可能已更换，"
                    "请运行 `ambot memory reindex` 重映射"
                ) from exc
            raise VectorStoreError(
                f"向量数据库操作失败（{self.describe()}）：{short_error(exc)}"
            ) from exc

    # -- collections --------------------------------------------------------------------

    async def get_collection(self, name: str, *, create: bool = True) -> Collection | None:
        """The collection ``name``; created if missing with ``create``, else ``None``.

        Looking a collection up costs one call (its metadata comes with it).
        """
        client = await self.client()
        if create:
            return await self.run(client.get_or_create_collection, name, embedding_function=None)
        try:
            return await self.run(client.get_collection, name, embedding_function=None)
        except VectorStoreError as exc:
            if is_missing_collection(exc):
                return None
            raise

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

    # -- closing ----------------------------------------------------------------------------

    def _drop_client(self, *, release_lock: bool, final: bool = False) -> None:
        with self._state:
            if final:
                self._final = True  # from now on no call reconnects
            if self._closing or self._connecting:
                # Another thread is closing or connecting: wait, then see what is left.
                self._state.wait_for(lambda: not self._closing and not self._connecting)
                if self._client is None and (not release_lock or self._lock_fd is None):
                    return
            self._closing = True
            # Let calls in progress finish (a write at shutdown completes first).
            self._state.wait_for(lambda: self._active == 0, timeout=CLOSE_WAIT_SECONDS)
            if self._active:
                logger.warning(
                    f"[Memory] 关闭向量库连接时仍有 {self._active} 个操作未完成，已等待 "
                    f"{CLOSE_WAIT_SECONDS:.0f} 秒"
                )
            client, self._client = self._client, None
            fd = None
            if release_lock:
                fd, self._lock_fd = self._lock_fd, None
        # The slow part (closing the client, stopping the child) outside the lock;
        # ``_closing`` keeps every other caller waiting meanwhile.
        try:
            if client is not None:
                try:
                    # Stops the System: vector indexes, SQLite pool, HTTP session.
                    client.close()  # type: ignore[attr-defined]
                except Exception as exc:  # closing must never take the caller down
                    logger.warning(f"[Memory] 关闭向量库客户端出错：{short_error(exc)}")
        finally:
            if fd is not None and self.server is not None:
                self.server.stop()  # before the lock: nothing writes the directory after
            if fd is not None:  # only after the client is closed
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                with contextlib.suppress(OSError):
                    os.close(fd)
            with self._state:
                self.generation += 1
                self._closing = False
                self._state.notify_all()

    def close(self, *, final: bool = False) -> None:
        """Close the client, then release the local data-dir lock.

        Safe to call twice, from any thread and from a shutdown hook; waits
        (at most ``CLOSE_WAIT_SECONDS``) for Chroma calls still running.
        Blocking (it may stop a child server): call it from a worker thread.
        The connection reopens lazily on its next use, unless ``final``: then
        every later use is a :class:`VectorStoreError` (the bot is stopping).
        """
        self._drop_client(release_lock=True, final=final)

    def refresh(self) -> None:
        """Close the client but keep the data-dir lock: the next call opens a fresh one.

        A fresh client reloads the vector indexes from disk (embedded) or sees
        only what the server has (remote), exactly like the next process would,
        which is what re-embedding verifies its result against.
        """
        self._drop_client(release_lock=False)
