"""Writers and re-embedding: the "remap in progress" markers, and a handle that is never re-created.

A remap (``ambot memory reindex`` / ``backup restore``, or the bot's own
start-up remap) replaces a collection by a re-embedded copy. On a remote
Chroma another process (the bot) may keep writing meanwhile; the remap marks
the live collections (metadata, see ``embedding/remap.py``) and writers here
refuse while a marker is present. :class:`CollectionGuard` keeps that check
cheap (one metadata read per ``MARKER_TTL`` at most) and exact (see its
docstring for the guarantee).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from nonebot.log import logger

from ...core.errors import MaintenanceInProgress, VectorStoreError
from .connection import ChromaConnection, is_missing_collection

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

    async def run(
        self, name: str, fn: Callable[[Collection], T], on_replaced: Callable[[], None]
    ) -> T:
        """One call on ``name``. A replaced collection (remote remap) or a client
        reopened meanwhile (a remap's check) is fetched again once, never re-created;
        ``on_replaced`` lets the owner drop what it cached about the old one."""
        generation = self.connection.generation
        col = await self.collection(name)
        try:
            return await self.connection.run(fn, col)
        except VectorStoreError as exc:
            if is_missing_collection(exc) or self.connection.generation != generation:
                on_replaced()
                return await self.connection.run(fn, await self.collection(name))
            raise

    async def write(
        self, name: str, fn: Callable[[Collection], T], on_replaced: Callable[[], None]
    ) -> T:
        """One write on ``name``: refused while a remap runs (:meth:`for_write`), and
        confirmed when slow (:meth:`after_write`). Replaced or its client closed by a
        remap meanwhile: the write did not land, :class:`MaintenanceInProgress`."""
        generation = self.connection.generation
        col, read_at = await self.for_write(name)
        try:
            result = await self.connection.run(fn, col)
        except VectorStoreError as exc:
            if is_missing_collection(exc) or self.connection.generation != generation:
                on_replaced()
                raise MaintenanceInProgress() from exc
            raise
        await self.after_write(name, col, read_at)
        return result

    async def for_write(self, name: str) -> tuple[Collection, float]:
        """``(handle, read time)`` for one write; raises while a remap runs."""
        self.connection.writers_seen = True
        view = self._current(name)
        if view is None or self.clock() - view.read_at > self.ttl:
            view = await self.read(name)
        if view.busy:
            raise MaintenanceInProgress()
        return view.collection, view.read_at

    async def after_write(self, name: str, col: Collection, read_at: float) -> None:
        """Confirm a slow write (see the class docstring); raises if it may be lost."""
        if self.clock() - read_at <= self.window:
            return
        try:
            view = await self.read(name)
        except VectorStoreError as exc:
            raise MaintenanceInProgress(ambiguous=True) from exc
        if view.busy or view.collection.id != col.id:
            raise MaintenanceInProgress(ambiguous=True)
