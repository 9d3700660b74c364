"""Documents that are files of one data directory, kept in the shared database instead when
several processes share the store.

The L3 loop keeps its knowledge base as Markdown files (``knowledge/KNOWLEDGE_<kid>.md``)
and its user profile as ``user_profile.md``. A file lives on one machine's disk: a
second bot on another host would neither see nor change it. So in remote mode
(several processes on one Chroma server and one SQL database) each such document
is a row of ``amrita_plugin_memory_document`` (:class:`~..models.SharedDocument`):
its kind, its name and its text, exactly what the file held. Every read goes to
the table (nothing is cached, so a change is seen by every process at its next
read); every read-modify-write holds a lease all processes take
(:meth:`SharedDocuments.exclusive`); every operation is waited for with a bound
(:class:`~.sessions.SharedWork`, the coherence's own unless another is given; past it
a :class:`~.sessions.SharedDatabaseError`).

:func:`move_to_backup` is the one-time move of a file (or a folder) that was
copied in: renamed beside itself with a ``.migrated-<time>`` suffix, so nothing is
read from it again and nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from ..models import SharedDocument, db_now
from .coherence import Coherence
from .sessions import SharedWork, orm_session

__all__ = ["MARKERS", "Migration", "SharedDocuments", "move_to_backup"]


def move_to_backup(path: Path) -> Path | None:
    """Rename ``path`` to ``<path>.migrated-<UTC time>`` (its backup); ``None`` if it is gone
    (another process on this host moved it first)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.name}.migrated-{stamp}")
    try:
        os.rename(path, target)
    except FileNotFoundError:
        return None
    return target


class SharedDocuments:
    """The documents of one ``kind`` in the shared database."""

    def __init__(self, kind: str, coherence: Coherence, *, work: SharedWork | None = None) -> None:
        self.kind = kind
        self.coherence = coherence
        self.work = work or coherence.work
        """Bounds every operation's wait (the process's one instance, ``coherence.work``)."""

    @contextlib.asynccontextmanager
    async def exclusive(self, what: str, *, step: str = "") -> AsyncIterator[None]:
        """Hold the kind's lease (every process) for a read-modify-write; ``step`` names
        another lease of the kind (the one-time migration, which runs inside an edit)."""
        async with self.coherence.exclusive(f"document:{self.kind}:{step}", what):
            yield

    async def get(self, name: str) -> str | None:
        """The text of document ``name`` (``None``: there is none)."""
        return await self.work.run(self._get(name), "读取共享文档")

    async def _get(self, name: str) -> str | None:
        async with orm_session() as session:
            row = await session.get(SharedDocument, (self.kind, name))
            return row.content if row is not None else None

    async def all(self) -> dict[str, str]:
        """Every document of the kind: name → text."""
        return await self.work.run(self._all(), "读取共享文档")

    async def _all(self) -> dict[str, str]:
        stmt = select(SharedDocument.name, SharedDocument.content).where(
            SharedDocument.kind == self.kind
        )
        async with orm_session() as session:
            return {name: content for name, content in (await session.execute(stmt)).all()}

    async def put(self, name: str, content: str, *, only_new: bool = False) -> bool:
        """Write document ``name``; with ``only_new``, only when there is none. Whether it
        was written."""
        return await self.work.run(self._put(name, content, only_new), "写入共享文档")

    async def _put(self, name: str, content: str, only_new: bool) -> bool:
        for _ in range(3):
            try:
                async with orm_session() as session:
                    row = await session.get(SharedDocument, (self.kind, name))
                    if row is None:
                        session.add(
                            SharedDocument(
                                kind=self.kind, name=name, content=content, updated_at=db_now()
                            )
                        )
                    elif only_new:
                        return False
                    else:
                        row.content, row.updated_at = content, db_now()
                    await session.commit()
                return True
            except IntegrityError:  # inserted by another process meanwhile: read it again
                continue
        return False

    async def delete(self, name: str) -> bool:
        """Delete document ``name``; whether there was one."""
        return await self.work.run(self._delete(name), "删除共享文档")

    async def _delete(self, name: str) -> bool:
        async with orm_session() as session:
            result = await session.execute(
                delete(SharedDocument).where(
                    SharedDocument.kind == self.kind, SharedDocument.name == name
                )
            )
            await session.commit()
        return bool(getattr(result, "rowcount", 0))


MARKERS = "migrated"
"""The documents' kind of the one-time imports' markers: one row per kind imported, named
by it (its text the time), written by the first import of the store."""


class Migration:
    """The one-time copy of this data directory's files into the documents of a kind, done
    before the kind's first use in this process (:meth:`ready`) when ``present()`` says
    there is something to copy; under a lease of its own (it may run inside an edit,
    which holds the kind's lease), ``work`` re-checking what another process of this
    host may have moved meanwhile.

    ``work(first)`` is told whether this is the store's first import of the kind (no
    marker row yet): only the first imports; a later host's files are only backed up,
    so an old copy never brings back what was deleted or forgotten since. The marker
    is written when the first import ended."""

    def __init__(
        self,
        documents: SharedDocuments,
        present: Callable[[], bool],
        work: Callable[[bool], Awaitable[None]],
        what: str,
    ) -> None:
        self.documents = documents
        self.present = present
        self.work = work
        self.what = what
        self.markers = SharedDocuments(MARKERS, documents.coherence, work=documents.work)
        self._done = False
        self._lock = asyncio.Lock()

    async def ready(self) -> None:
        if self._done:
            return
        async with self._lock:
            if self._done:
                return
            if await asyncio.to_thread(self.present):
                kind = self.documents.kind
                async with self.documents.exclusive(self.what, step="migration"):
                    first = await self.markers.get(kind) is None
                    await self.work(first)
                    if first:
                        stamp = datetime.now(UTC).isoformat(timespec="seconds")
                        await self.markers.put(kind, stamp, only_new=True)
            self._done = True
