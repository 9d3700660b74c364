"""The global knowledge base: each entry's text + a Chroma collection, kept in step.

Every entry ``<kid>`` lives in two places:

* its text, the source of truth (title, summary, body), in its home
  (:mod:`.knowledge_docs`): ``knowledge/KNOWLEDGE_<kid>.md`` plus ``knowledge_index.json``
  (``kid → {title, summary, checksum, created_at, updated_at}`` for cheap listing)
  when one process owns the store; a row of the shared database when several
  processes share it (remote mode), so every bot sees the same knowledge;
* the Chroma collection ``knowledge_collection_name`` — one vector per entry
  (id = kid, metadata carries the text's checksum), embedded with the shared
  embedding client and therefore covered by the embedding fingerprint.

Writes embed first, then write the text (atomically), then upsert the vector; in
remote mode under a lease every process takes. Without a vector (``EMBEDDING_ENABLED=false``
or the service down, issue #47) the text is saved all the same and the entry's old vector
removed: searches find it by keywords (:mod:`.knowledge_search`), and the start-up
validation embeds it once the service answers (its checksum has no vector). :meth:`KnowledgeBaseManager.validate_on_startup` repairs any drift
a crash or a hand edit left, in every direction, and reports what it fixed.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import EmbeddingError, EmbeddingOff
from ..core.protocols import Embedder
from ..storage.chroma.connection import ChromaConnection
from ..storage.chroma.remap_markers import CollectionGuard
from ..storage.shared.coherence import Coherence
from ..storage.shared.documents import SharedDocuments
from .knowledge_docs import KnowledgeDocs, KnowledgeFiles, KnowledgeRows, index_entry
from .knowledge_entry import (
    SUMMARY_MAX,
    TITLE_MAX,
    KnowledgeEntry,
    KnowledgeError,
    header_field,
    now,
)
from .knowledge_search import keyword_search

__all__ = [
    "SUMMARY_MAX",
    "TITLE_MAX",
    "KnowledgeBaseManager",
    "KnowledgeEntry",
    "KnowledgeError",
    "ValidationReport",
    "check_knowledge_base",
]

_KID_RE = re.compile(r"^[a-z0-9]{6,32}$")


@dataclass(slots=True)
class ValidationReport:
    """What :meth:`KnowledgeBaseManager.validate_on_startup` repaired."""

    indexed_files: list[str] = field(default_factory=list)
    dropped_index_entries: list[str] = field(default_factory=list)
    reembedded: list[str] = field(default_factory=list)
    removed_vectors: list[str] = field(default_factory=list)
    unreadable_files: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(asdict(self).values())


class KnowledgeBaseManager:
    """Three-way synced knowledge store (files, index, vectors)."""

    def __init__(
        self,
        *,
        root: Path,
        connection: ChromaConnection,
        embedder: Embedder,
        collection_name: str,
        max_chars: int,
        log: Callable[[str], None] = lambda _msg: None,
        shared: Coherence | None = None,
    ) -> None:
        self.root = root
        self.files = KnowledgeFiles(root, log)
        self.dir = self.files.dir
        self.index_path = self.files.index_path
        self.docs: KnowledgeDocs = self.files
        """Where the texts live: these files, or (``shared`` active: remote mode) the rows."""
        if shared is not None and shared.active:
            self.docs = KnowledgeRows(SharedDocuments("knowledge", shared), self.files, log)
        self.connection = connection
        self.embedder = embedder
        self.collection_name = collection_name
        self.max_chars = max_chars
        self.log = log
        self._lock = asyncio.Lock()
        self._guard = CollectionGuard(connection)
        """Refuses writes while a remap re-embeds the collection; never re-creates it mid-swap."""

    # -- paths and files ----------------------------------------------------------

    def path_for(self, kid: str) -> Path:
        return self.files.path_for(kid)

    @staticmethod
    def check_kid(kid: Any) -> str:
        if not isinstance(kid, str) or not _KID_RE.match(kid.strip()):
            raise KnowledgeError(f"知识 ID {str(kid)[:40]!r} 格式无效")
        return kid.strip()

    async def _collection(self) -> Any:
        return await self._guard.collection(self.collection_name)

    # -- reads ------------------------------------------------------------------------

    async def list(self) -> list[dict[str, Any]]:
        index = await self.docs.index()
        entries = [
            {"kid": kid, **{k: v.get(k, "") for k in ("title", "summary", "updated_at")}}
            for kid, v in index.items()
        ]
        return sorted(entries, key=lambda e: e["updated_at"], reverse=True)

    async def get(self, kid: str) -> KnowledgeEntry:
        kid = self.check_kid(kid)
        entry = await self.docs.load(kid)
        if entry is None:
            raise KnowledgeError(f"知识条目 {kid} 不存在")
        return entry

    async def read(
        self, kid: str, start_line: int = 1, end_line: int | None = None
    ) -> dict[str, Any]:
        """A window of the body's lines (1-based, inclusive)."""
        entry = await self.get(kid)
        lines = entry.body.splitlines()
        total = len(lines)
        if isinstance(start_line, bool) or not isinstance(start_line, int) or start_line < 1:
            raise KnowledgeError("start_line 必须是 ≥ 1 的整数")
        if end_line is not None and (
            isinstance(end_line, bool) or not isinstance(end_line, int) or end_line < start_line
        ):
            raise KnowledgeError("end_line 必须是 ≥ start_line 的整数")
        end = total if end_line is None else end_line
        end = min(end, total, start_line + 199)  # at most 200 lines per read
        window = (
            [f"{n}: {lines[n - 1]}" for n in range(start_line, end + 1)]
            if start_line <= total
            else []
        )
        return {
            **entry.brief(),
            "total_lines": total,
            "start_line": start_line,
            "end_line": end if window else start_line - 1,
            "lines": window,
        }

    async def _vector(self, text: str, kind: str = "document") -> list[float] | None:
        """The text's vector, or ``None``: no embedding model, or the service failed (the
        text is what counts; the vector follows at the next start-up validation)."""
        try:
            return (await self.embedder.embed([text], kind))[0]  # type: ignore[arg-type]
        except EmbeddingOff:
            return None
        except EmbeddingError as exc:
            self.log(f"[Subconscious] 嵌入服务不可用，知识库改用关键词：{exc}")
            return None

    async def search(self, query: str, top_k: int = 5) -> list[dict[str, Any]]:
        vector = await self._vector(query, "query")
        if vector is None:
            return await keyword_search(self.docs, query, top_k)
        res = await self._guard.run(
            self.collection_name,
            lambda c: c.query(
                query_embeddings=[vector], n_results=top_k, include=["metadatas", "distances"]
            ),
            self._guard.invalidate,
        )
        ids = res["ids"][0] if res["ids"] else []
        metas = (res.get("metadatas") or [[]])[0]
        dists = (res.get("distances") or [[]])[0]
        out = []
        for kid, meta, dist in zip(ids, metas, dists, strict=False):
            meta = meta or {}
            out.append(
                {
                    "kid": kid,
                    "title": meta.get("title", ""),
                    "summary": meta.get("summary", ""),
                    "distance": round(float(dist), 4),
                }
            )
        return out

    # -- writes -------------------------------------------------------------------------

    def _validate_body(self, body: Any) -> str:
        if not isinstance(body, str):
            raise KnowledgeError("参数 body 必须是字符串")
        body = body.strip("\n")
        if not body.strip():
            raise KnowledgeError("参数 body 不能为空")
        if len(body) > self.max_chars:
            raise KnowledgeError(
                f"正文过长（{len(body)} 字，上限 {self.max_chars} 字），请拆分或精简"
            )
        return body

    async def _commit(self, entry: KnowledgeEntry, vector: list[float] | None) -> None:
        """Text, then vector (the text is the source of truth); without a vector the old
        one goes (it would answer for another text)."""
        name = self.collection_name
        slot = await self._guard.for_write(name)  # before the text: a refusal changes nothing
        await self.docs.save(entry)
        meta = {
            "kid": entry.kid,
            "title": entry.title,
            "summary": entry.summary,
            "checksum": entry.checksum,
        }
        if vector is None:
            await self._guard.apply(name, slot, lambda c: c.delete(ids=[entry.kid]))
            return
        await self._guard.apply(
            name,
            slot,
            lambda c: c.upsert(
                ids=[entry.kid], documents=[entry.document], embeddings=[vector], metadatas=[meta]
            ),
        )

    async def create(self, title: Any, summary: Any, body: Any) -> KnowledgeEntry:
        stamp = now()
        entry = KnowledgeEntry(
            kid=uuid.uuid4().hex[:12],
            title=header_field(title, "title", TITLE_MAX),
            summary=header_field(summary, "summary", SUMMARY_MAX),
            body=self._validate_body(body),
            created_at=stamp,
            updated_at=stamp,
        )
        vector = await self._vector(entry.document)
        async with self._lock, self.docs.exclusive("新建知识"):
            await self._commit(entry, vector)
        self.log(f"[Subconscious] 新建知识 {entry.kid}")
        return entry

    async def update(
        self, kid: Any, *, title: Any = None, summary: Any = None, body: Any = None
    ) -> KnowledgeEntry:
        kid = self.check_kid(kid)
        if title is None and summary is None and body is None:
            raise KnowledgeError("至少提供 title、summary、body 之一")
        async with self._lock, self.docs.exclusive("修改知识"):
            entry = await self.get(kid)
            if title is not None:
                entry.title = header_field(title, "title", TITLE_MAX)
            if summary is not None:
                entry.summary = header_field(summary, "summary", SUMMARY_MAX)
            if body is not None:
                entry.body = self._validate_body(body)
            entry.updated_at = now()
            vector = await self._vector(entry.document)
            await self._commit(entry, vector)
        self.log(f"[Subconscious] 更新知识 {kid}")
        return entry

    async def delete(self, kid: Any) -> None:
        kid = self.check_kid(kid)
        async with self._lock, self.docs.exclusive("删除知识"):
            await self.get(kid)  # clear error when missing
            # Vector first: a crash after it leaves a text that validation re-embeds,
            # never a vector that answers searches for a deleted entry.
            await self._guard.write(
                self.collection_name, lambda c: c.delete(ids=[kid]), self._guard.invalidate
            )
            await self.docs.remove(kid)
        self.log(f"[Subconscious] 删除知识 {kid}")

    # -- repair -----------------------------------------------------------------------------

    async def validate_on_startup(self) -> ValidationReport:
        """Bring index and vectors in line with the files, logging each repair."""
        report = ValidationReport()
        async with self._lock, self.docs.exclusive("校验知识库"):
            entries, index, report.unreadable_files = await self.docs.scan()
            new_index: dict[str, dict[str, Any]] = {}
            for kid, entry in entries.items():
                if kid not in index:
                    report.indexed_files.append(kid)
                new_index[kid] = index_entry(entry)
            report.dropped_index_entries = sorted(set(index) - set(entries))
            if new_index != index:
                await self.docs.store_index(new_index)

            col = await self._collection()
            stored = await self.connection.run(lambda: col.get(include=["metadatas"]))
            stored_sums = {
                i: (m or {}).get("checksum")
                for i, m in zip(stored["ids"], stored.get("metadatas") or [], strict=False)
            }
            stale = [kid for kid, e in entries.items() if stored_sums.get(kid) != e.checksum]
            orphans = sorted(set(stored_sums) - set(entries))
            if orphans:
                await self.connection.run(lambda: col.delete(ids=orphans))
                report.removed_vectors = orphans
            for start in range(0, len(stale), 32):
                batch = [entries[k] for k in stale[start : start + 32]]
                try:
                    vectors = await self.embedder.embed([e.document for e in batch])
                except EmbeddingOff:  # no embedding model: found by keywords until it is on
                    break
                metas = [
                    {"kid": e.kid, "title": e.title, "summary": e.summary, "checksum": e.checksum}
                    for e in batch
                ]
                await self.connection.run(
                    lambda b=batch, v=vectors, m=metas: col.upsert(
                        ids=[e.kid for e in b],
                        documents=[e.document for e in b],
                        embeddings=v,
                        metadatas=m,
                    )
                )
                report.reembedded += [e.kid for e in batch]
        if report.changed:
            self.log(
                "[Subconscious] 知识库校验修复："
                f"补入索引 {len(report.indexed_files)}，移除失效索引 {len(report.dropped_index_entries)}，"
                f"重嵌入 {len(report.reembedded)}，删除孤立向量 {len(report.removed_vectors)}，"
                f"无法解析的文件 {len(report.unreadable_files)}"
            )
        return report


async def check_knowledge_base(kb: KnowledgeBaseManager) -> ValidationReport | None:
    """Repair drift between knowledge files, index and vectors; never raises.

    What was repaired is logged by the knowledge base itself; a failure
    (embedding service or vector store down) is logged and retried at the
    next start, the loop runs anyway.
    """
    from nonebot import logger

    try:
        report = await kb.validate_on_startup()
        entries = len(await kb.list())
    except Exception as exc:
        logger.warning(
            "[Subconscious] 知识库启动校验失败（不影响运行，下次启动时重试）："
            f"{exc.__class__.__name__}: {exc}"
        )
        return None
    if report.unreadable_files:
        logger.warning(
            "[Subconscious] 知识库中有无法解析的文件（已跳过，请手工检查）："
            + ", ".join(report.unreadable_files)
        )
    logger.info(
        f"[Subconscious] Knowledge base checked: {entries} entries"
        + ("" if report.changed else ", nothing to repair")
    )
    return report
