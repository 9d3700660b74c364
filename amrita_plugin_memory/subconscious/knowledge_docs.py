"""Where the knowledge entries are kept: files of one data directory, or rows shared by all.

:class:`~.knowledge_base.KnowledgeBaseManager` keeps every entry in two places in
step: its text (the source of truth) and its vector in Chroma. The text has one
home, chosen by who shares the store:

* :class:`KnowledgeFiles` (one process owns the store): ``knowledge/KNOWLEDGE_<kid>.md``
  plus ``knowledge_index.json`` (``kid → title, summary, checksum, times``, for cheap
  listing), written atomically;
* :class:`KnowledgeRows` (remote mode: several processes on one Chroma server and one
  SQL database): one row per entry in the shared database (``kind`` ``knowledge``,
  :mod:`...storage.shared.documents`), holding exactly the file's text. Every bot
  then lists, reads and edits the same entries (the vectors are in the shared
  Chroma collection already), and a change holds a lease every process takes.
  The first use in a data directory that has knowledge files copies each entry
  whose kid is not in the table yet, then moves ``knowledge/`` to
  ``knowledge.migrated-<time>/`` (its backup, the old index with it), once; only the
  store's first such import copies (a marker row): another host's folder, found later,
  is only backed up, so an entry deleted meanwhile does not come back.

Both answer the same calls; only the files can drift from an index (a crash, a hand
edit), which :meth:`~.knowledge_base.KnowledgeBaseManager.validate_on_startup` repairs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol

from ..infra.files import atomic_write_text
from ..storage.shared.documents import Migration, SharedDocuments, move_to_backup
from .knowledge_entry import KnowledgeEntry, KnowledgeError

__all__ = [
    "FILE_PREFIX",
    "INDEX_FILE",
    "KnowledgeDocs",
    "KnowledgeFiles",
    "KnowledgeRows",
    "Scan",
    "index_entry",
]

FILE_PREFIX = "KNOWLEDGE_"
INDEX_FILE = "knowledge_index.json"
KIND = "knowledge"

Index = dict[str, dict[str, Any]]
Scan = tuple[dict[str, KnowledgeEntry], Index, list[str]]
"""Every readable entry, the stored index, the names of what could not be read."""


def index_entry(entry: KnowledgeEntry) -> dict[str, Any]:
    """An entry's line of the index."""
    return {
        "title": entry.title,
        "summary": entry.summary,
        "checksum": entry.checksum,
        "created_at": entry.created_at,
        "updated_at": entry.updated_at,
    }


class KnowledgeDocs(Protocol):
    """The texts of the entries (see the module docstring)."""

    async def index(self) -> Index: ...

    async def load(self, kid: str) -> KnowledgeEntry | None: ...

    async def save(self, entry: KnowledgeEntry) -> None: ...

    async def remove(self, kid: str) -> None: ...

    async def scan(self) -> Scan: ...

    async def store_index(self, index: Index) -> None: ...

    def exclusive(self, what: str) -> contextlib.AbstractAsyncContextManager[None]: ...


class KnowledgeFiles:
    """Entries as Markdown files plus a JSON index in ``root``."""

    def __init__(self, root: Path, log: Callable[[str], None]) -> None:
        self.dir = root / "knowledge"
        self.index_path = root / INDEX_FILE
        self.log = log

    def path_for(self, kid: str) -> Path:
        return self.dir / f"{FILE_PREFIX}{kid}.md"

    def _read_index(self) -> Index:
        try:
            data = json.loads(self.index_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError:
            self.log(f"[Subconscious] 知识索引 {self.index_path} 损坏，将从文件重建")
            return {}
        return data if isinstance(data, dict) else {}

    def _write_index(self, index: Index) -> None:
        atomic_write_text(
            self.index_path, json.dumps(index, ensure_ascii=False, indent=2, sort_keys=True)
        )

    def _load(self, kid: str) -> KnowledgeEntry | None:
        try:
            return KnowledgeEntry.parse(self.path_for(kid).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    async def index(self) -> Index:
        return await asyncio.to_thread(self._read_index)

    async def load(self, kid: str) -> KnowledgeEntry | None:
        return await asyncio.to_thread(self._load, kid)

    async def save(self, entry: KnowledgeEntry) -> None:
        """The file, then the index (the file is the source of truth)."""

        def write() -> None:
            atomic_write_text(self.path_for(entry.kid), entry.render())
            index = self._read_index()
            index[entry.kid] = index_entry(entry)
            self._write_index(index)

        await asyncio.to_thread(write)

    async def remove(self, kid: str) -> None:
        def remove() -> None:
            index = self._read_index()
            index.pop(kid, None)
            self._write_index(index)
            with contextlib.suppress(FileNotFoundError):
                self.path_for(kid).unlink()

        await asyncio.to_thread(remove)

    async def scan(self) -> Scan:
        def scan() -> Scan:
            self.dir.mkdir(parents=True, exist_ok=True)
            entries: dict[str, KnowledgeEntry] = {}
            unreadable: list[str] = []
            for path in sorted(self.dir.glob(f"{FILE_PREFIX}*.md")):
                kid = path.stem[len(FILE_PREFIX) :]
                try:
                    entry = KnowledgeEntry.parse(path.read_text(encoding="utf-8"))
                except (KnowledgeError, OSError, UnicodeDecodeError):
                    unreadable.append(path.name)
                    continue
                if entry.kid != kid:
                    unreadable.append(path.name)
                    continue
                entries[kid] = entry
            return entries, self._read_index(), unreadable

        return await asyncio.to_thread(scan)

    async def store_index(self, index: Index) -> None:
        await asyncio.to_thread(self._write_index, index)

    @contextlib.asynccontextmanager
    async def exclusive(self, what: str) -> AsyncIterator[None]:
        """Nothing to take: no other process writes these files."""
        yield


class KnowledgeRows:
    """Entries as rows of the shared database (the file's text in each)."""

    def __init__(
        self, documents: SharedDocuments, files: KnowledgeFiles, log: Callable[[str], None]
    ) -> None:
        self.documents = documents
        self.files = files
        """This data directory's files: copied in once, then moved to a backup."""
        self.log = log
        self._ready = Migration(documents, files.dir.is_dir, self._migrate, "迁移知识库").ready

    def exclusive(self, what: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self.documents.exclusive(what)

    async def _migrate(self, first: bool) -> None:
        """This data directory's files into the table when the store never imported any
        (``first``; kids already there are kept as they are), then the folder and its
        index to a backup. A later host's files are only backed up: an entry an operator
        deleted since the first import does not come back from an old copy."""
        if not await asyncio.to_thread(self.files.dir.is_dir):
            return  # moved meanwhile by another process of this host
        entries, _, unreadable = await self.files.scan()
        copied = 0
        for kid, entry in entries.items() if first else ():
            copied += await self.documents.put(kid, entry.render(), only_new=True)
        backup = await asyncio.to_thread(move_to_backup, self.files.dir)
        if backup is not None and await asyncio.to_thread(self.files.index_path.exists):
            await asyncio.to_thread(
                self.files.index_path.rename, backup / self.files.index_path.name
            )
        if not first:
            self.log(
                f"[Subconscious] 共享数据库已迁移过知识库，本机的 {len(entries)} 条未迁入"
                f"（其间删除的条目不会因此恢复）；原文件备份于 {backup}"
            )
            return
        self.log(
            f"[Subconscious] 知识库已迁入共享数据库：迁入 {copied} 条，已存在 "
            f"{len(entries) - copied} 条，无法解析 {len(unreadable)} 个文件；原文件备份于 {backup}"
        )

    def _parse(self, kid: str, text: str) -> KnowledgeEntry | None:
        try:
            entry = KnowledgeEntry.parse(text)
        except KnowledgeError:
            return None
        return entry if entry.kid == kid else None

    async def _entries(self) -> tuple[dict[str, KnowledgeEntry], list[str]]:
        await self._ready()
        entries: dict[str, KnowledgeEntry] = {}
        unreadable: list[str] = []
        for kid, text in (await self.documents.all()).items():
            entry = self._parse(kid, text)
            if entry is None:
                unreadable.append(kid)
            else:
                entries[kid] = entry
        return entries, unreadable

    async def index(self) -> Index:
        entries, _ = await self._entries()
        return {kid: index_entry(e) for kid, e in entries.items()}

    async def load(self, kid: str) -> KnowledgeEntry | None:
        await self._ready()
        text = await self.documents.get(kid)
        return None if text is None else self._parse(kid, text)

    async def save(self, entry: KnowledgeEntry) -> None:
        await self._ready()
        await self.documents.put(entry.kid, entry.render())

    async def remove(self, kid: str) -> None:
        await self._ready()
        await self.documents.delete(kid)

    async def scan(self) -> Scan:
        entries, unreadable = await self._entries()
        return entries, {kid: index_entry(e) for kid, e in entries.items()}, unreadable

    async def store_index(self, index: Index) -> None:
        """Nothing to store: the rows are their own index."""
