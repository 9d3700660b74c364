"""Writers and re-embedding: the "remap in progress" markers, and a handle that is never re-created.

A remap (``ambot memory reindex`` / ``backup restore``, or the bot's own
start-up remap) replaces a collection by a re-embedded copy. On a remote
Chroma another process (the bot) may keep writing meanwhile; the remap marks
the live collections (metadata, see ``embedding/remap.py``) and writers here
refuse while a marker is present. :class:`CollectionGuard` keeps that check
cheap (one metadata read per ``MARKER_TTL`` at most) and exact (see its
docstring for the guarantee).

The check and the swap are not atomic: a call that passed the check (or a
read, which is never refused) can reach the original while the swap deletes
it, and Chroma then answers with an internal error of its own ("Missing
metadata segment") rather than "does not exist". Every call therefore goes
through the guard (:meth:`CollectionGuard.run`, :meth:`~CollectionGuard.write`,
:meth:`~CollectionGuard.apply`, :meth:`~CollectionGuard.pages`), which turns a
collection replaced or being dropped under it into a retry on the new
collection (reads) or the maintenance refusal (writes), never that error.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from nonebot.log import logger

from ...core.errors import MaintenanceInProgress, VectorStoreError
from .connection import ChromaConnection, is_missing_collection
from .paging import Item, iter_pages

T = TypeVar("T")

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = [
    "MAINTENANCE_KEYS",
    "MARKER_TTL",
    "META_REEMBED_COMPLETE",
    "META_REEMBED_RUNNING",
    "META_REEMBED_SOURCE",
    "META_REEMBED_TARGET",
    "TEMP_SUFFIX",
    "WRITE_WINDOW",
    "CollectionGuard",
    "WriteSlot",
    "maintenance_busy",
]

# Markers of a re-embedding in progress, kept in collection metadata (see
# embedding/remap.py). "running" is set on the live collections while a remap
# or restore builds their replacements; the others mark the temporaries and,
# between the swap and the final fingerprint write, the swapped-in collections.
META_REEMBED_RUNNING = "reembed_running"
META_REEMBED_COMPLETE = "reembed_complete"
META_REEMBED_TARGET = "reembed_target"
META_REEMBED_SOURCE = "reembed_source"
MAINTENANCE_KEYS = (
    META_REEMBED_RUNNING,
    META_REEMBED_COMPLETE,
    META_REEMBED_TARGET,
    META_REEMBED_SOURCE,
)
TEMP_SUFFIX = "__reembed"
"""Suffix of the temporary collection a remap builds (``<name>__reembed``)."""

MARKER_TTL = 1.0
"""Seconds a writer trusts its last read of the maintenance markers (one read per second)."""

WRITE_WINDOW = 4.0
"""A write acknowledged later than this after its marker read is checked again (see :class:`CollectionGuard`).

A remap waits at least this long (plus a margin) after setting its marker
before its final pass, which is what makes every acknowledged write safe.
"""


def maintenance_busy(meta: Mapping[str, Any] | None) -> bool:
    """Whether collection metadata carries a remap marker (a cleared "running" is ``""``)."""
    meta = meta or {}
    return bool(meta.get(META_REEMBED_RUNNING)) or any(
        k in meta for k in MAINTENANCE_KEYS if k != META_REEMBED_RUNNING
    )


@dataclass(frozen=True, slots=True)
class _View:
    name: str
    collection: Collection
    generation: int
    busy: bool
    """A maintenance marker was present."""
    read_at: float
    """Monotonic time at which the read that produced this view started."""


class WriteSlot(NamedTuple):
    """A write's permission from :meth:`CollectionGuard.for_write`."""

    collection: Collection
    read_at: float
    """Monotonic time of the marker read that allowed the write."""
    generation: int
    """The connection's generation the handle belongs to."""


class CollectionGuard:
    """How writers see one named collection: a cached handle and the maintenance markers.

    * The handle is fetched on first use and again when the connection was
      closed or refreshed. A collection is created only at first use, and
      never while a remap's temporary exists; once this gate has seen it, a
      collection that vanished is an error, never silently re-created empty.
    * :meth:`for_write` refuses (:class:`MaintenanceInProgress`, nothing
      written) while a marker is present; markers are re-read at most every
      ``ttl`` seconds, so a write usually costs no extra call.
    * :meth:`after_write` makes the guarantee exact: a write that returned
      more than ``window`` seconds after its marker read is checked against a
      fresh read and reported as not acknowledged if a remap started (or the
      collection was replaced) meanwhile. So every acknowledged write landed
      within ``window`` seconds of a read that saw no marker, i.e. before
      ``marker + window``; a remap's final pass starts later than that.
    * A call that meets the collection replaced or being dropped (a remap's
      swap, which no marker check can exclude for a call already past it):
      a read is retried once on the collection the name now has, a write is
      refused as not applied (it cannot have landed in the new collection);
      the same collection still answering its name while it is dropped, or
      the name missing beside a remap's temporary, is the maintenance refusal.
    """

    def __init__(
        self,
        connection: ChromaConnection,
        *,
        ttl: float = MARKER_TTL,
        window: float = WRITE_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connection = connection
        self.ttl = ttl
        self.window = window
        self.clock = clock
        self._view: _View | None = None
        self._seen: set[str] = set()

    def invalidate(self) -> None:
        self._view = None

    def _current(self, name: str) -> _View | None:
        view = self._view
        if view is None or view.name != name or view.generation != self.connection.generation:
            return None
        return view

    async def collection(self, name: str) -> Collection:
        """The handle of ``name`` (cached)."""
        view = self._current(name) or await self.read(name)
        return view.collection

    async def read(self, name: str) -> _View:
        """Look ``name`` up now (one call): a new handle and the markers."""
        started = self.clock()
        generation = self.connection.generation
        col = await self.connection.get_collection(name, create=False)
        if col is None:
            col = await self._missing(name)
        self._seen.add(name)
        view = _View(name, col, generation, maintenance_busy(col.metadata), started)
        self._view = view
        return view

    async def _missing(self, name: str) -> Collection:
        conn = self.connection
        if name + TEMP_SUFFIX in await conn.list_collections():
            raise MaintenanceInProgress()  # between a remap's delete and rename
        if name in self._seen:
            col = await conn.get_collection(name, create=False)  # renamed back meanwhile?
            if col is not None:
                return col
            logger.warning(f"[Memory] 集合 {name} 在运行中消失，不会自动重建")
            raise VectorStoreError(f"集合 {name} 不存在（已被删除？），重启 Bot 后会重新创建")
        col = await conn.get_collection(name, create=True)  # first use
        assert col is not None
        return col

    def _lost(self, exc: VectorStoreError, generation: int) -> bool:
        """Whether a call failed because its handle is stale: the collection was
        replaced or is being dropped, or the client was closed or reopened."""
        return is_missing_collection(exc) or self.connection.generation != generation

    async def _replacement(
        self, name: str, failed: Collection, exc: VectorStoreError
    ) -> Collection:
        """The collection ``name`` has now, after a call on ``failed`` was :meth:`_lost`.

        Raises :class:`MaintenanceInProgress` when the name still answers with
        ``failed`` while it is being dropped, or is missing beside a remap's
        temporary (:meth:`_missing`); a collection gone for good stays an error.
        """
        view = await self.read(name)
        if is_missing_collection(exc) and view.collection.id == failed.id:
            raise MaintenanceInProgress() from exc  # dropped right now: a remap's swap
        return view.collection

    async def run(
        self, name: str, fn: Callable[[Collection], T], on_replaced: Callable[[], None]
    ) -> T:
        """One read on ``name``. A collection replaced or being dropped meanwhile (a
        remote remap's swap) or a client reopened (a remap's check) is looked up again
        and the call retried once on what the name has now, never re-created;
        ``on_replaced`` lets the owner drop what it cached about the old one."""
        generation = self.connection.generation
        col = await self.collection(name)
        try:
            return await self.connection.run(fn, col)
        except VectorStoreError as exc:
            if not self._lost(exc, generation):
                raise
            on_replaced()
            generation = self.connection.generation
            col = await self._replacement(name, col, exc)
        try:
            return await self.connection.run(fn, col)
        except VectorStoreError as exc:
            if self._lost(exc, generation):  # replaced again: a swap in progress
                on_replaced()
                raise MaintenanceInProgress() from exc
            raise

    async def write(
        self, name: str, fn: Callable[[Collection], T], on_replaced: Callable[[], None]
    ) -> T:
        """One write on ``name``: :meth:`for_write`, then :meth:`apply`."""
        return await self.apply(name, await self.for_write(name), fn, on_replaced)

    async def apply(
        self,
        name: str,
        slot: WriteSlot,
        fn: Callable[[Collection], T],
        on_replaced: Callable[[], None] | None = None,
    ) -> T:
        """Run the write ``fn`` on the handle :meth:`for_write` gave, confirmed when
        slow (:meth:`after_write`). Replaced, being dropped or its client closed by a
        remap meanwhile: the write did not land, :class:`MaintenanceInProgress`."""
        try:
            result = await self.connection.run(fn, slot.collection)
        except VectorStoreError as exc:
            if self._lost(exc, slot.generation):
                self.invalidate()
                if on_replaced is not None:
                    on_replaced()
                raise MaintenanceInProgress() from exc
            raise
        await self.after_write(name, slot)
        return result

    async def pages(
        self,
        name: str,
        on_replaced: Callable[[], None],
        *,
        where: dict[str, Any] | None = None,
        with_documents: bool = True,
        page_size: int | None = None,
    ) -> AsyncIterator[list[Item]]:
        """Every item of ``name`` (matching ``where``), page by page (:func:`.paging.iter_pages`).

        A stale handle is replaced as in :meth:`run` before the first page; a
        collection replaced or dropped after it is :class:`MaintenanceInProgress`
        (one scan never mixes two collections).
        """
        for attempt in range(2):
            generation = self.connection.generation
            col = await self.collection(name)
            source = iter_pages(
                self.connection,
                col,
                where=where,
                with_documents=with_documents,
                page_size=page_size,
            )
            started = False
            try:
                async with contextlib.aclosing(source):
                    async for page in source:
                        started = True
                        yield page
                return
            except VectorStoreError as exc:
                if not self._lost(exc, generation):
                    raise
                on_replaced()
                if started or attempt:
                    raise MaintenanceInProgress() from exc
                await self._replacement(name, col, exc)

    async def for_write(self, name: str) -> WriteSlot:
        """A write's :class:`WriteSlot` (handle, read time); raises while a remap runs."""
        self.connection.writers_seen = True
        view = self._current(name)
        if view is None or self.clock() - view.read_at > self.ttl:
            view = await self.read(name)
        if view.busy:
            raise MaintenanceInProgress()
        return WriteSlot(view.collection, view.read_at, view.generation)

    async def after_write(self, name: str, slot: WriteSlot) -> None:
        """Confirm a slow write (see the class docstring); raises if it may be lost."""
        if self.clock() - slot.read_at <= self.window:
            return
        try:
            view = await self.read(name)
        except VectorStoreError as exc:
            raise MaintenanceInProgress(ambiguous=True) from exc
        if view.busy or view.collection.id != slot.collection.id:
            raise MaintenanceInProgress(ambiguous=True)
