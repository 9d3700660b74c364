"""Embedding fingerprint, startup check, safe re-embedding (remap) and backups.

Vectors are only comparable when they come from the same embedding model. The
memory collection therefore records, in its metadata, a fingerprint of the
embedding configuration::

    fingerprint = sha256(protocol | model | base_url)

(``model`` is the resolved name when ``EMBEDDING_MODEL_NAME=auto``). The
fingerprint travels with the collection, so it also works with a remote
ChromaDB. The L3 knowledge collection is covered by the same fingerprint and is
re-embedded together with the memories.

Entry points:

* :func:`run_startup_check` — synchronous, called by the plugin at import time
  before it registers anything; follows the spec's flowchart.
* :func:`remap` / :func:`restore_backup` — re-embed everything (from the live
  collections or from a backup file) with the current model, safely.
* :func:`create_backup`, :func:`list_backups`, :func:`collect_status`,
  :func:`reset_fingerprint` — used by the ``ambot memory`` commands.

Safety of a remap (nothing may ever be lost)
--------------------------------------------
1. A JSON backup (ids, documents, metadatas; no vectors) of every covered
   collection is written first, atomically, readable only by the owner.
2. Every covered collection ``X`` is re-embedded page by page into a new
   temporary collection ``X__reembed``; the original stays untouched.
3. When every temporary collection holds exactly as many items as its source
   (and a live source did not change meanwhile), the temporaries are marked
   ``reembed_complete=true`` — the knowledge temporary first, the memory
   temporary **last**. Marking the memory temporary is the single atomic
   *commit point* of the remap.
4. Then the swap: for the knowledge and then the memory collection, delete the
   original and rename the temporary to the original name
   (``collection.modify(name=...)``, verified on chromadb 1.5.9, embedded and
   remote). The new collection carries the target fingerprint as a marker.
5. Finally the fingerprint is written and the markers are removed.

Why a kill at any instant is safe: before the commit point the originals are
complete and unchanged and the next start (or command) drops the incomplete
or uncommitted temporaries — a clean retry. After the commit point every
temporary that still exists is complete, so :func:`recover_interrupted_remap`
(run before anything else touches the collections) finishes the swap: it
deletes an original that still exists, renames the temporary, and writes the
fingerprint recorded in the marker (the fingerprint of the vectors, not of the
possibly changed current configuration). "Committed" is recognised either by
the memory temporary's ``reembed_complete`` marker or, once it was renamed, by
the marker carried by the memory collection itself; the knowledge collection
is always swapped before the memory collection, so a committed state never
has an unswapped knowledge temporary without a memory marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import os
import re
import sys
import threading
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from nonebot.log import logger

from .embed import EmbeddingError
from .keys import KEY_FORMAT_META, KeyMigrationReport, current_key_format, migrate_partition_keys
from .vector import DataDirLocked, VectorStoreError

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

    from .runtime import MemoryRuntime
    from .vector import ChromaConnection

__all__ = [
    "BACKUP_FORMAT",
    "TEMP_SUFFIX",
    "BackupError",
    "BackupInfo",
    "FingerprintInfo",
    "RemapError",
    "RemapFailed",
    "RemapReport",
    "StartupResult",
    "StatusReport",
    "collect_status",
    "compute_fingerprint",
    "create_backup",
    "current_fingerprint",
    "list_backups",
    "load_backup",
    "recover_interrupted_remap",
    "remap",
    "reset_fingerprint",
    "restore_backup",
    "run_startup_check",
    "run_startup_check_async",
    "stored_fingerprint",
]

T = TypeVar("T")

# Collection metadata keys (memory collection; also written on the knowledge one).
META_FINGERPRINT = "embedding_fingerprint"
META_PROTOCOL = "embedding_protocol"
META_MODEL = "embedding_model"
META_BASE_URL = "embedding_base_url"
FINGERPRINT_KEYS = (META_FINGERPRINT, META_PROTOCOL, META_MODEL, META_BASE_URL)

# Markers of an in-progress remap (on temporary collections and, between the
# swap and the final fingerprint write, on the swapped-in collections).
META_REEMBED_COMPLETE = "reembed_complete"
META_REEMBED_TARGET = "reembed_target"
META_REEMBED_SOURCE = "reembed_source"
MARKER_KEYS = (META_REEMBED_COMPLETE, META_REEMBED_TARGET, META_REEMBED_SOURCE)

TEMP_SUFFIX = "__reembed"
BACKUP_FORMAT = "amrita_plugin_memory/embed_backup"
BACKUP_VERSION = 1
_BACKUP_RE = re.compile(r"^embed_backup_(\d{8}T\d{6}_\d{6})Z(?:_(\d+))?\.json$")
_HEADER_PREFIX = '{"header": '

ProgressCallback = Callable[[int, int], None]


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


class RemapError(RuntimeError):
    """A remap could not be completed; the message is meant for operators."""


class RemapFailed(RemapError):
    """A remap failed before its commit point: everything is as it was before."""

    def __init__(self, cause: BaseException, backup: Path | None) -> None:
        where = f"；备份：{backup}" if backup is not None else ""
        super().__init__(f"重映射失败：{cause}。所有记忆仍在原集合中，嵌入指纹未改动{where}")
        self.cause = cause
        self.backup = backup


class BackupError(RuntimeError):
    """A backup file could not be written or read; the message is meant for operators."""


# ---------------------------------------------------------------------------
# Fingerprint
# ---------------------------------------------------------------------------


def compute_fingerprint(protocol: str, model: str, base_url: str) -> str:
    """``sha256(protocol | model | base_url)`` as hex."""
    return hashlib.sha256(f"{protocol}|{model}|{base_url}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class FingerprintInfo:
    """A fingerprint with the human-readable parts it was computed from."""

    fingerprint: str
    protocol: str = ""
    model: str = ""
    base_url: str = ""

    @classmethod
    def of(cls, protocol: str, model: str, base_url: str) -> FingerprintInfo:
        return cls(compute_fingerprint(protocol, model, base_url), protocol, model, base_url)

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> FingerprintInfo | None:
        digest = meta.get(META_FINGERPRINT)
        if not isinstance(digest, str) or not digest:
            return None
        return cls(
            digest,
            str(meta.get(META_PROTOCOL, "")),
            str(meta.get(META_MODEL, "")),
            str(meta.get(META_BASE_URL, "")),
        )

    def as_meta(self) -> dict[str, str]:
        return {
            META_FINGERPRINT: self.fingerprint,
            META_PROTOCOL: self.protocol,
            META_MODEL: self.model,
            META_BASE_URL: self.base_url,
        }

    def to_json(self) -> str:
        return json.dumps(
            {
                "fingerprint": self.fingerprint,
                "protocol": self.protocol,
                "model": self.model,
                "base_url": self.base_url,
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: Any) -> FingerprintInfo | None:
        try:
            data = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("fingerprint"), str):
            return None
        return cls(
            data["fingerprint"],
            str(data.get("protocol", "")),
            str(data.get("model", "")),
            str(data.get("base_url", "")),
        )

    def describe(self) -> str:
        if not (self.protocol or self.model or self.base_url):
            return self.fingerprint[:16]
        return f"{self.protocol} / {self.model} @ {self.base_url}（{self.fingerprint[:16]}）"


async def current_fingerprint(runtime: MemoryRuntime) -> FingerprintInfo:
    """The fingerprint of the current configuration.

    Needs the embedding service only when ``EMBEDDING_MODEL_NAME=auto`` (the
    model name is resolved through the service's model list); raises
    :class:`~.embed.EmbeddingError` when it is unreachable then.
    """
    embedder = runtime.embedder
    model = await embedder.resolve_model()
    return FingerprintInfo.of(embedder.protocol, model, embedder.base_url)


async def stored_fingerprint(runtime: MemoryRuntime) -> FingerprintInfo | None:
    """The fingerprint recorded in the memory collection, if any."""
    return FingerprintInfo.from_meta(await runtime.store.get_metadata())


# ---------------------------------------------------------------------------
# Collection helpers
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Covered:
    """A collection covered by the fingerprint."""

    name: str
    role: Literal["memory", "knowledge"]

    @property
    def temp(self) -> str:
        return self.name + TEMP_SUFFIX


def _covered(runtime: MemoryRuntime) -> tuple[_Covered, _Covered]:
    """(knowledge, memory): the swap order (memory last, see module docstring)."""
    knowledge = runtime.config.file.subconscious.knowledge_collection_name
    return _Covered(knowledge, "knowledge"), _Covered(runtime.store.name, "memory")


class _Item(NamedTuple):
    id: str
    document: str | None
    metadata: dict[str, Any] | None


async def _open(conn: ChromaConnection, name: str) -> Collection | None:
    return await conn.get_collection(name, create=False)


def _meta_of(col: Collection) -> dict[str, Any]:
    return dict(col.metadata or {})


def _space_of(col: Collection) -> str | None:
    """The distance space of a collection (kept in its configuration, not only metadata)."""
    cfg = getattr(col, "configuration_json", None)
    hnsw = cfg.get("hnsw") if isinstance(cfg, dict) else None
    space = hnsw.get("space") if isinstance(hnsw, dict) else None
    if not space:
        space = (col.metadata or {}).get("hnsw:space")
    return str(space) if space else None


def _user_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata without fingerprint, remap markers and Chroma's ``hnsw:`` settings."""
    drop = set(FINGERPRINT_KEYS) | set(MARKER_KEYS)
    return {k: v for k, v in meta.items() if k not in drop and not k.startswith("hnsw:")}


async def _replace_meta(conn: ChromaConnection, col: Collection, meta: Mapping[str, Any]) -> None:
    """Replace a collection's metadata (Chroma refuses an empty dict and ``hnsw:`` changes)."""
    clean = {k: v for k, v in meta.items() if not k.startswith("hnsw:")}
    if not clean:
        raise RemapError(f"集合 {col.name} 的 metadata 不能为空")
    await conn.run(col.modify, metadata=clean)


async def _drop(conn: ChromaConnection, name: str) -> bool:
    if name in await conn.list_collections():
        await conn.delete_collection(name)
        return True
    return False


async def _count(conn: ChromaConnection, col: Collection) -> int:
    return await conn.run(col.count)


READ_PAGE_SIZE = 1024
"""Items per Chroma read while paging through a collection (bounded memory)."""


async def _live_pages(
    conn: ChromaConnection, col: Collection, page_size: int | None = None
) -> AsyncIterator[list[_Item]]:
    """Every item of ``col``, one bounded page at a time.

    The id list is read once (ids only, a few MB at 100,000 items) and pages
    are fetched by id: ``get(limit, offset)`` makes Chroma skip ``offset``
    rows on every call, so paging by offset grows quadratically with the
    collection. An item deleted meanwhile is simply missing from its page;
    every caller compares the number of items it saw with the expected count.
    """
    page_size = page_size or READ_PAGE_SIZE
    res = await conn.run(functools.partial(col.get, include=[]))
    ids = list(res["ids"])
    for start in range(0, len(ids), page_size):
        res = await conn.run(
            functools.partial(
                col.get, ids=ids[start : start + page_size], include=["documents", "metadatas"]
            )
        )
        got = list(res["ids"])
        docs = res.get("documents") or [None] * len(got)
        metas = res.get("metadatas") or [None] * len(got)
        yield [
            _Item(i, d, dict(m) if m is not None else None)
            for i, d, m in zip(got, docs, metas, strict=False)
        ]


async def _list_pages(items: Sequence[_Item], page_size: int) -> AsyncIterator[list[_Item]]:
    for start in range(0, len(items), page_size):
        yield list(items[start : start + page_size])


# ---------------------------------------------------------------------------
# Backups
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BackupInfo:
    """A backup file as listed by :func:`list_backups`."""

    path: Path
    created_at: str
    size: int
    counts: dict[str, int] = field(default_factory=dict)
    fingerprint: FingerprintInfo | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _backup_sort_key(path: Path) -> tuple[str, int]:
    m = _BACKUP_RE.match(path.name)
    assert m is not None
    return m.group(1), int(m.group(2) or 0)


def _backup_files(backup_dir: Path) -> list[Path]:
    """Backup files, oldest first."""
    if not backup_dir.is_dir():
        return []
    files = [p for p in backup_dir.iterdir() if p.is_file() and _BACKUP_RE.match(p.name)]
    return sorted(files, key=_backup_sort_key)


def _new_backup_path(backup_dir: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S_%f")
    path = backup_dir / f"embed_backup_{stamp}Z.json"
    n = 1
    while path.exists():
        n += 1
        path = backup_dir / f"embed_backup_{stamp}Z_{n}.json"
    return path


def _read_header(path: Path) -> dict[str, Any]:
    """The header of a backup (first line), falling back to parsing the whole file."""
    with path.open("r", encoding="utf-8") as fh:
        first = fh.readline()
    if first.startswith(_HEADER_PREFIX) and first.rstrip().endswith(","):
        try:
            header = json.loads(first[len(_HEADER_PREFIX) :].rstrip().rstrip(","))
            if isinstance(header, dict):
                return header
        except ValueError:
            pass
    data = json.loads(path.read_text(encoding="utf-8"))
    header = data.get("header") if isinstance(data, dict) else None
    if not isinstance(header, dict):
        raise ValueError("missing header")
    return header


def list_backups(backup_dir: Path) -> list[BackupInfo]:
    """Backups in ``backup_dir``, newest first. Works without Chroma or embedding service."""
    out: list[BackupInfo] = []
    for path in reversed(_backup_files(backup_dir)):
        try:
            header = _read_header(path)
            counts = {str(k): int(v) for k, v in (header.get("counts") or {}).items()}
            fp = header.get("embedding")
            info = FingerprintInfo.from_json(json.dumps(fp)) if isinstance(fp, dict) else None
            created = str(header.get("created_at", ""))
        except (OSError, ValueError, TypeError, AttributeError):
            counts, info, created = {}, None, ""
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        out.append(BackupInfo(path, created, size, counts, info))
    return out


def _prune_backups(backup_dir: Path, keep: int, protect: Iterable[Path] = ()) -> list[Path]:
    """Delete all but the newest ``keep`` backups (never one in ``protect``)."""
    protected = {p.resolve() for p in protect}
    files = _backup_files(backup_dir)
    removed: list[Path] = []
    for path in files[: max(0, len(files) - keep)]:
        if path.resolve() in protected:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _plugin_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("amrita_plugin_memory")
    except PackageNotFoundError:
        return "unknown"


async def create_backup(
    runtime: MemoryRuntime, *, protect: Iterable[Path] = (), prune: bool = True
) -> BackupInfo:
    """Write every covered collection (ids, documents, metadatas) to a new backup file.

    The file is streamed page by page (bounded memory), created with mode 0600
    under a temporary name, fsynced and renamed into place, so a crash never
    leaves a truncated backup under a real backup name. Afterwards only the
    newest ``REEMBED_BACKUP_KEEP`` backups are kept (``protect`` is never
    deleted). Needs Chroma but not the embedding service.
    """
    conn = runtime.connection
    backup_dir = runtime.config.backup_dir
    sources: list[tuple[str, Collection]] = []
    for cov in reversed(_covered(runtime)):  # memory first in the file
        col = await (runtime.store.collection() if cov.role == "memory" else _open(conn, cov.name))
        if col is not None:
            sources.append((cov.name, col))
    counts = {name: await _count(conn, col) for name, col in sources}
    metas = {name: _meta_of(col) for name, col in sources}
    spaces = {name: _space_of(col) for name, col in sources}
    stored = FingerprintInfo.from_meta(metas.get(runtime.store.name, {}))
    created_at = datetime.now(UTC).isoformat(timespec="microseconds")
    header = {
        "format": BACKUP_FORMAT,
        "version": BACKUP_VERSION,
        "created_at": created_at,
        "plugin_version": _plugin_version(),
        "vector_db": conn.describe(),
        "embedding": json.loads(stored.to_json()) if stored else None,
        "counts": counts,
    }

    try:
        backup_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            backup_dir.chmod(0o700)
        path = _new_backup_path(backup_dir)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise BackupError(f"无法创建备份文件（{backup_dir}）：{exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(_HEADER_PREFIX + json.dumps(header, ensure_ascii=False) + ",\n")
            fh.write('"collections": {')
            for n, (name, col) in enumerate(sources):
                entry = {"metadata": metas[name], "space": spaces[name]}
                head = json.dumps(entry, ensure_ascii=False)[:-1]  # open object
                fh.write(
                    ("," if n else "") + "\n" + json.dumps(name) + ": " + head + ', "items": ['
                )
                written = 0
                async for page in _live_pages(conn, col):
                    for item in page:
                        record = {
                            "id": item.id,
                            "document": item.document,
                            "metadata": item.metadata,
                        }
                        fh.write(
                            ("," if written else "") + "\n" + json.dumps(record, ensure_ascii=False)
                        )
                        written += 1
                fh.write("\n]}")
                if written != counts[name]:
                    raise BackupError(
                        f"集合 {name} 在备份期间被修改（预计 {counts[name]} 条，读到 {written} 条）；"
                        "请停止正在运行的 Bot 后重试"
                    )
            fh.write("\n}}\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(backup_dir)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError | TypeError | ValueError):
            raise BackupError(f"写入备份文件失败（{path}）：{exc}") from exc
        raise
    if prune:
        _prune_backups(backup_dir, runtime.config.env.reembed_backup_keep, [path, *protect])
    logger.info(f"[Memory] 已创建备份 {path}（{sum(counts.values())} 条）")
    return BackupInfo(path, created_at, path.stat().st_size, counts, stored)


@dataclass(slots=True)
class _BackupCollection:
    metadata: dict[str, Any]
    space: str | None
    items: list[_Item]


def load_backup(path: Path) -> tuple[dict[str, Any], dict[str, _BackupCollection]]:
    """Read and validate a backup file: ``(header, {collection name: contents})``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BackupError(f"备份文件不存在：{path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BackupError(f"无法读取备份文件 {path}：{exc}") from None
    except ValueError as exc:
        raise BackupError(f"备份文件 {path} 不是合法的 JSON：{exc}") from None
    header = data.get("header") if isinstance(data, dict) else None
    if not isinstance(header, dict) or header.get("format") != BACKUP_FORMAT:
        raise BackupError(f"{path} 不是本插件的嵌入备份文件")
    if header.get("version") != BACKUP_VERSION:
        raise BackupError(f"备份文件 {path} 的版本 {header.get('version')!r} 不受支持")
    raw = data.get("collections")
    if not isinstance(raw, dict):
        raise BackupError(f"备份文件 {path} 缺少 collections")
    out: dict[str, _BackupCollection] = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("items"), list):
            raise BackupError(f"备份文件 {path} 中集合 {name} 的格式无效")
        items: list[_Item] = []
        seen: set[str] = set()
        for rec in entry["items"]:
            if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
                raise BackupError(f"备份文件 {path} 中集合 {name} 含无效条目")
            doc, meta = rec.get("document"), rec.get("metadata")
            if (doc is not None and not isinstance(doc, str)) or (
                meta is not None and not isinstance(meta, dict)
            ):
                raise BackupError(f"备份文件 {path} 中条目 {rec['id']} 的格式无效")
            if rec["id"] in seen:
                raise BackupError(f"备份文件 {path} 中集合 {name} 含重复 ID {rec['id']}")
            seen.add(rec["id"])
            items.append(_Item(rec["id"], doc, meta))
        meta = entry.get("metadata")
        space = entry.get("space")
        out[str(name)] = _BackupCollection(
            dict(meta) if isinstance(meta, dict) else {},
            str(space) if isinstance(space, str) else None,
            items,
        )
    return header, out


# ---------------------------------------------------------------------------
# Recovery of an interrupted remap
# ---------------------------------------------------------------------------


async def _finalize(
    runtime: MemoryRuntime, target: FingerprintInfo, names: Sequence[_Covered]
) -> None:
    """Write the fingerprint and remove the markers (the last step of a remap)."""
    conn = runtime.connection
    for cov in names:  # knowledge first, memory (the fingerprint that counts) last
        col = await _open(conn, cov.name)
        if col is None:
            continue
        meta = _meta_of(col)
        if cov.role == "knowledge" and not any(k in meta for k in MARKER_KEYS):
            continue  # untouched knowledge collection (not part of this remap)
        await _replace_meta(conn, col, {**_user_meta(meta), **target.as_meta()})
    runtime.store.invalidate()


async def _swap(runtime: MemoryRuntime, names: Sequence[_Covered]) -> None:
    """Replace each original by its complete temporary (knowledge first, memory last)."""
    conn = runtime.connection
    for cov in names:
        existing = await conn.list_collections()
        if cov.temp not in existing:
            continue
        if cov.name in existing:
            await conn.delete_collection(cov.name)
        await conn.rename_collection(cov.temp, cov.name)
        logger.info(f"[Memory] 已切换集合 {cov.name}")
    runtime.store.invalidate()


async def recover_interrupted_remap(runtime: MemoryRuntime) -> str | None:
    """Finish a committed remap or drop an uncommitted one; ``None`` if there was none.

    Must run before anything else touches the covered collections (see the
    module docstring for why this is always correct).
    """
    conn = runtime.connection
    names = _covered(runtime)
    knowledge, memory = names
    existing = set(await conn.list_collections())
    temps = [cov for cov in names if cov.temp in existing]
    memory_temp = await _open(conn, memory.temp) if memory.temp in existing else None
    memory_col = await _open(conn, memory.name) if memory.name in existing else None
    target: FingerprintInfo | None = None
    if memory_temp is not None and _meta_of(memory_temp).get(META_REEMBED_COMPLETE) is True:
        target = FingerprintInfo.from_json(_meta_of(memory_temp).get(META_REEMBED_TARGET))
    elif memory_col is not None and META_REEMBED_TARGET in _meta_of(memory_col):
        target = FingerprintInfo.from_json(_meta_of(memory_col).get(META_REEMBED_TARGET))
    if target is None:
        # Not committed: the originals are complete; temporaries are leftovers.
        for cov in temps:
            await conn.delete_collection(cov.temp)
        if temps:
            logger.warning(
                "[Memory] 发现上次未完成的重映射留下的临时集合，已清理"
                f"（{', '.join(c.temp for c in temps)}）；原集合完好"
            )
            return "dropped"
        return None
    logger.warning("[Memory] 发现上次已提交但未切换完成的重映射，正在完成切换…")
    if knowledge.temp in existing:
        col = await _open(conn, knowledge.temp)
        if col is not None and _meta_of(col).get(META_REEMBED_COMPLETE) is not True:
            await conn.delete_collection(knowledge.temp)  # cannot happen; be safe
    await _swap(runtime, names)
    await _finalize(runtime, target, names)
    logger.info(f"[Memory] 已完成上次中断的重映射：{target.describe()}")
    return "finished"


# ---------------------------------------------------------------------------
# Remap
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class RemapReport:
    """What a remap (or restore) did."""

    fingerprint: FingerprintInfo
    backup: Path | None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(slots=True)
class _Plan:
    cov: _Covered
    expected: int
    metadata: dict[str, Any]
    space: str | None
    pages: Callable[[], AsyncIterator[list[_Item]]]
    live: Collection | None = None


ADD_BATCH_LOCAL = 256
"""Items per Chroma add while re-embedding, embedded ChromaDB.

Chroma adds far fewer items per second in batches of 64 than of 256 (about
1,400 vs 2,100 here), so embedded batches are gathered into larger adds. The
embedded ChromaDB holds the GIL during an add, so the bot's event loop stalls
for its duration: 256 keeps that near 100 ms.
"""

ADD_BATCH_REMOTE = 512
"""Items per Chroma add while re-embedding, remote ChromaDB.

An HTTP call, so the event loop runs during the request; but the client
serialises the request holding the GIL, and 1,024 items raised the loop's
worst stall to about 50 ms, while 512 kept it near 30 ms at 1,200 items/s.
"""

DISPATCH_YIELDS = 10
"""Event-loop turns granted to the next embedding request before an add starts."""


async def _let_request_leave() -> None:
    """Let the next embedding request reach its socket before a Chroma add starts.

    The embedded ChromaDB holds the GIL for a whole add: a request still inside
    this process when the add starts waits for it, and the pipeline overlaps
    nothing. A few loop turns are enough for aiohttp to write the request; the
    embedding service then works while the add runs.
    """
    for _ in range(DISPATCH_YIELDS):
        await asyncio.sleep(0)


async def _build_temp(
    runtime: MemoryRuntime,
    plan: _Plan,
    target: FingerprintInfo,
    done: list[int],
    total: int,
    progress: ProgressCallback | None,
) -> Collection:
    conn = runtime.connection
    await _drop(conn, plan.cov.temp)
    meta: dict[str, Any] = {
        **_user_meta(plan.metadata),
        META_REEMBED_COMPLETE: False,
        META_REEMBED_SOURCE: plan.cov.name,
        META_REEMBED_TARGET: target.to_json(),
    }
    if plan.space:
        meta["hnsw:space"] = plan.space
    temp = await conn.create_collection(plan.cov.temp, meta)
    batch_size = runtime.config.env.reembed_batch_size
    add_size = max(batch_size, ADD_BATCH_REMOTE if conn.mode == "remote" else ADD_BATCH_LOCAL)

    async def chunks() -> AsyncGenerator[tuple[list[_Item], list[list[float]]], None]:
        """Embedded items in chunks of about ``add_size`` (embedding calls of ``batch_size``)."""
        items: list[_Item] = []
        vectors: list[list[float]] = []
        async for page in plan.pages():
            for start in range(0, len(page), batch_size):
                batch = page[start : start + batch_size]
                vectors += await runtime.embedder.embed([item.document or "" for item in batch])
                items += batch
                if len(items) >= add_size:
                    yield items, vectors
                    items, vectors = [], []
        if items:
            yield items, vectors

    source = chunks()

    # A one-chunk pipeline: chunk k+1 is read and embedded while chunk k is
    # added to Chroma, so the two services work at the same time; at most two
    # chunks are in memory. Each step starts only after the previous one is
    # done, so the source generator is never entered twice at once.
    pending = asyncio.ensure_future(anext(source, None))
    try:
        while (current := await pending) is not None:
            pending = asyncio.ensure_future(anext(source, None))
            await _let_request_leave()
            batch, vectors = current
            await conn.run(
                functools.partial(
                    temp.add,
                    ids=[item.id for item in batch],
                    documents=[item.document for item in batch],  # type: ignore[arg-type]
                    embeddings=vectors,  # type: ignore[arg-type]
                    metadatas=[item.metadata for item in batch],  # type: ignore[arg-type]
                )
            )
            done[0] += len(batch)
            line = f"[Memory] 重映射进度 {done[0]}/{total}（{plan.cov.name}）"
            if progress is None:
                logger.info(line)
            else:  # a progress bar shows it already (CLI)
                logger.debug(line)
                progress(done[0], total)
    finally:
        if not pending.done():
            pending.cancel()
        with contextlib.suppress(BaseException):
            await pending  # retrieve its outcome; the failure that matters is ours
        await source.aclose()
    got = await _count(conn, temp)
    if got != plan.expected:
        raise RemapError(
            f"集合 {plan.cov.name} 重映射后条数不符（应为 {plan.expected}，实际 {got}；可能有其他进程同时写入）"
        )
    return temp


async def _same_contents(
    conn: ChromaConnection, live: Collection, temp: Collection, expected: int
) -> bool:
    """Whether ``live`` still holds exactly what was copied into ``temp``.

    A second, embedding-free pass page by page: catches writes of another
    process (a bot on a remote Chroma) made while the remap was running.
    """
    if await _count(conn, live) != expected:
        return False
    seen = 0
    async for page in _live_pages(conn, live):
        seen += len(page)
        res = await conn.run(
            functools.partial(
                temp.get, ids=[item.id for item in page], include=["documents", "metadatas"]
            )
        )
        docs = res.get("documents") or [None] * len(res["ids"])
        metas = res.get("metadatas") or [None] * len(res["ids"])
        copied = {
            i: (d, dict(m) if m is not None else None)
            for i, d, m in zip(res["ids"], docs, metas, strict=False)
        }
        for item in page:
            if copied.get(item.id, ("\0missing", None)) != (item.document, item.metadata):
                return False
    return seen == expected


async def _run_remap(
    runtime: MemoryRuntime,
    plans: list[_Plan],
    target: FingerprintInfo,
    backup: Path | None,
    progress: ProgressCallback | None,
) -> RemapReport:
    """Build the temporaries, commit, swap, finalize (see the module docstring)."""
    conn = runtime.connection
    names = _covered(runtime)
    total = sum(p.expected for p in plans)
    done = [0]
    temps: dict[str, Collection] = {}
    try:
        for plan in sorted(plans, key=lambda p: p.cov.role != "memory"):  # memory first
            temps[plan.cov.role] = await _build_temp(runtime, plan, target, done, total, progress)
        for plan in plans:
            if plan.live is not None and not await _same_contents(
                conn, plan.live, temps[plan.cov.role], plan.expected
            ):
                raise RemapError(
                    f"集合 {plan.cov.name} 在重映射期间被修改；请停止正在运行的 Bot 后重试"
                )
        # Commit: knowledge temporary first, memory temporary last (the commit point).
        for role in ("knowledge", "memory"):
            if role in temps:
                col = temps[role]
                await _replace_meta(conn, col, {**_meta_of(col), META_REEMBED_COMPLETE: True})
    except BaseException as exc:
        # Before the commit point: drop the temporaries, the originals are untouched.
        for plan in plans:
            with contextlib.suppress(Exception):
                await _drop(conn, plan.cov.temp)
        if isinstance(exc, Exception):
            raise RemapFailed(exc, backup) from exc
        raise
    try:
        await _swap(runtime, names)
        await _finalize(runtime, target, names)
    except Exception as exc:
        # After the commit point: keep everything; recovery finishes the swap.
        raise RemapError(
            f"重映射已提交，但切换集合时出错：{exc}。新集合已完整、所有记忆都在；"
            "下次启动 Bot（或运行 `ambot memory reindex`）时会自动完成切换"
        ) from exc
    logger.info(f"[Memory] 重映射完成：{total} 条，新嵌入配置 {target.describe()}")
    return RemapReport(target, backup, {p.cov.name: p.expected for p in plans})


async def _write_fingerprint(runtime: MemoryRuntime, info: FingerprintInfo) -> None:
    await runtime.store.set_meta(info.as_meta())


async def _live_plan(runtime: MemoryRuntime, cov: _Covered) -> _Plan | None:
    """Re-embed ``cov`` from its own live contents (``None`` if it does not exist)."""
    conn = runtime.connection
    col = await (runtime.store.collection() if cov.role == "memory" else _open(conn, cov.name))
    if col is None:
        return None
    return _Plan(
        cov,
        await _count(conn, col),
        _meta_of(col),
        _space_of(col),
        functools.partial(_live_pages, conn, col),
        live=col,
    )


async def remap(runtime: MemoryRuntime, *, progress: ProgressCallback | None = None) -> RemapReport:
    """Re-embed every covered collection with the current model (``ambot memory reindex``).

    Raises :class:`RemapFailed` (everything as before, backup kept) or, after
    the commit point, whatever interrupted the swap (finished by the next
    :func:`recover_interrupted_remap`). Embedding and Chroma failures that
    happen before the backup propagate unchanged.
    """
    await recover_interrupted_remap(runtime)
    target = await current_fingerprint(runtime)
    plans = [plan for cov in _covered(runtime) if (plan := await _live_plan(runtime, cov))]
    if sum(p.expected for p in plans) == 0:
        await _write_fingerprint(runtime, target)
        logger.info(f"[Memory] 集合为空，已直接写入嵌入指纹：{target.describe()}")
        return RemapReport(target, None, {p.cov.name: 0 for p in plans})
    info = await create_backup(runtime)
    logger.info(
        f"[Memory] 开始重映射 {sum(p.expected for p in plans)} 条（{target.describe()}），"
        f"备份：{info.path}"
    )
    return await _run_remap(runtime, plans, target, info.path, progress)


async def restore_backup(
    runtime: MemoryRuntime, path: Path, *, progress: ProgressCallback | None = None
) -> RemapReport:
    """Replace the covered collections by a backup's contents, embedded with the current model.

    The current contents are backed up first (the restored file is never
    pruned). Collections missing from the backup but present now are
    re-embedded from their live contents so that everything matches the new
    fingerprint. Uses the same temporary-collection-and-swap procedure as
    :func:`remap`; the partition keys are migrated afterwards.
    """
    _, contents = load_backup(path)
    known = {cov.name for cov in _covered(runtime)}
    for name in sorted(set(contents) - known):
        logger.warning(f"[Memory] 备份中的集合 {name} 不在当前配置中，已忽略")
    await recover_interrupted_remap(runtime)
    target = await current_fingerprint(runtime)
    plans: list[_Plan] = []
    for cov in _covered(runtime):
        saved = contents.get(cov.name)
        if saved is not None:
            plans.append(
                _Plan(
                    cov,
                    len(saved.items),
                    saved.metadata,
                    saved.space,
                    functools.partial(_list_pages, saved.items, READ_PAGE_SIZE),
                )
            )
            continue
        if (plan := await _live_plan(runtime, cov)) is not None:
            plans.append(plan)
    info = await create_backup(runtime, protect=[path])
    logger.info(f"[Memory] 从备份 {path} 恢复，恢复前的内容已备份到 {info.path}")
    report = await _run_remap(runtime, plans, target, info.path, progress)
    await migrate_partition_keys(runtime.store)
    return report


async def reset_fingerprint(runtime: MemoryRuntime) -> FingerprintInfo:
    """Write the current fingerprint without re-embedding (the escape hatch)."""
    await recover_interrupted_remap(runtime)
    info = await current_fingerprint(runtime)
    await _write_fingerprint(runtime, info)
    knowledge = await _open(runtime.connection, _covered(runtime)[0].name)
    if knowledge is not None:
        meta = _meta_of(knowledge)
        await _replace_meta(runtime.connection, knowledge, {**_user_meta(meta), **info.as_meta()})
    logger.warning(f"[Memory] 已重置嵌入指纹为 {info.describe()}（未重新嵌入）")
    return info


# ---------------------------------------------------------------------------
# Status
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class StatusReport:
    """Everything ``ambot memory status`` prints."""

    vector_db: str
    stored: FingerprintInfo | None
    current: FingerprintInfo | None
    current_error: str | None
    memory_total: int
    distribution: dict[tuple[str, str], int]
    knowledge_name: str
    knowledge_count: int | None
    key_format_stored: str | None
    key_format_current: str
    pending_temps: list[str]
    backups: list[BackupInfo]

    @property
    def match(self) -> bool | None:
        if self.current is None:
            return None
        return self.stored is not None and self.stored.fingerprint == self.current.fingerprint


async def collect_status(runtime: MemoryRuntime) -> StatusReport:
    """Read-only state of the store; works with the embedding service down."""
    conn = runtime.connection
    knowledge, memory = _covered(runtime)
    existing = await conn.list_collections()
    meta = await runtime.store.get_metadata() if memory.name in existing else {}
    current: FingerprintInfo | None = None
    error: str | None = None
    try:
        current = await current_fingerprint(runtime)
    except EmbeddingError as exc:
        error = str(exc)
    distribution = await runtime.store.distribution() if memory.name in existing else {}
    kcol = await _open(conn, knowledge.name) if knowledge.name in existing else None
    return StatusReport(
        vector_db=conn.describe(),
        stored=FingerprintInfo.from_meta(meta),
        current=current,
        current_error=error,
        memory_total=sum(distribution.values()),
        distribution=distribution,
        knowledge_name=knowledge.name,
        knowledge_count=await _count(conn, kcol) if kcol is not None else None,
        key_format_stored=meta.get(KEY_FORMAT_META),
        key_format_current=current_key_format(),
        pending_temps=[c.temp for c in (knowledge, memory) if c.temp in existing],
        backups=list_backups(runtime.config.backup_dir),
    )


# ---------------------------------------------------------------------------
# Startup check
# ---------------------------------------------------------------------------

StartupAction = Literal[
    "skipped",  # AMBOT_COMMAND_CONTEXT=1 or EMBED_CHECK_ON_STARTUP=false
    "fresh",  # empty collections: fingerprint written
    "match",  # fingerprint matches
    "kept",  # mismatch, kept as is (never, or ask answered no)
    "remapped",  # mismatch, re-embedded
    "remap_failed",  # mismatch, re-embedding failed (data intact, old fingerprint)
    "refused",  # mismatch, ask without a TTY: the plugin must not register
    "unavailable",  # embedding service or Chroma unreachable: not checked this time
    "locked",  # local data dir held by another process: the plugin must not register
]


@dataclass(frozen=True, slots=True)
class StartupResult:
    """Outcome of :func:`run_startup_check`; ``ok`` says whether the plugin may register."""

    ok: bool
    action: StartupAction
    message: str
    stored: FingerprintInfo | None = None
    current: FingerprintInfo | None = None
    migration: KeyMigrationReport | None = None
    remap: RemapReport | None = None


def _mismatch_text(stored: FingerprintInfo | None, current: FingerprintInfo, count: int) -> str:
    before = stored.describe() if stored else "未记录（可能由旧版本插件写入）"
    return f"嵌入配置已变更：已存储 {before}，当前 {current.describe()}；现有 {count} 条向量与当前模型不匹配"


async def run_startup_check_async(
    runtime: MemoryRuntime, *, interactive: bool, confirm: Callable[[str], bool]
) -> StartupResult:
    """The startup check (spec flowchart) on the caller's event loop.

    Order: finish/drop an interrupted remap (a prerequisite of touching the
    collections at all), key migration (idempotent, O(1) once current), then
    the fingerprint comparison and ``EMBED_MISMATCH_POLICY``.
    """
    env = runtime.config.env
    try:
        await recover_interrupted_remap(runtime)
        migration = await migrate_partition_keys(runtime.store)
        if migration.rewritten:
            logger.info(f"[Memory] 已迁移 {migration.rewritten} 条记忆的分区键到当前格式")
        stored = await stored_fingerprint(runtime)
        knowledge = await _open(runtime.connection, _covered(runtime)[0].name)
        count = await runtime.store.count()
        if knowledge is not None:
            count += await _count(runtime.connection, knowledge)
    except DataDirLocked as exc:
        msg = f"[Memory] {exc}。插件未启用（Bot 继续运行）"
        logger.error(msg)
        return StartupResult(False, "locked", msg)
    except VectorStoreError as exc:
        msg = f"[Memory] 启动检查跳过：{exc}。记忆工具会在向量库恢复后可用，下次启动重新检查"
        logger.warning(msg)
        return StartupResult(True, "unavailable", msg)

    try:
        current = await current_fingerprint(runtime)
    except EmbeddingError as exc:
        msg = (
            f"[Memory] 无法确定当前嵌入模型，暂不校验嵌入指纹：{exc}。"
            "插件照常加载，记忆工具在嵌入服务可用前会报错；下次启动重新检查"
        )
        logger.warning(msg)
        return StartupResult(True, "unavailable", msg, stored=stored, migration=migration)

    if count == 0:
        if stored is None or stored.fingerprint != current.fingerprint:
            await _write_fingerprint(runtime, current)
        msg = f"[Memory] 记忆库为空，已记录嵌入指纹：{current.describe()}"
        logger.debug(msg)
        return StartupResult(True, "fresh", msg, stored, current, migration)
    if stored is not None and stored.fingerprint == current.fingerprint:
        return StartupResult(True, "match", "[Memory] 嵌入指纹一致", stored, current, migration)

    mismatch = _mismatch_text(stored, current, count)
    policy = env.embed_mismatch_policy
    if policy == "ask" and not interactive:
        msg = (
            f"[Memory] {mismatch}。EMBED_MISMATCH_POLICY=ask 需要交互确认，但当前不是交互终端，"
            "插件未启用（Bot 继续运行）。请任选其一：设置 EMBED_MISMATCH_POLICY=auto 自动重映射；"
            "设置 EMBED_MISMATCH_POLICY=never 保留旧向量继续运行（检索会劣化）；"
            "或停止 Bot 后运行 `ambot memory reindex` 重映射"
            "（模型实际未变时用 `ambot memory reset-fingerprint`）"
        )
        logger.error(msg)
        return StartupResult(False, "refused", msg, stored, current, migration)
    if policy == "ask":
        question = (
            f"[Memory] {mismatch}。\n"
            f"是否现在用新模型重映射全部 {count} 条（先自动备份）？选否则保留旧向量继续运行"
        )
        if not confirm(question):
            policy = "never"
    if policy == "never":
        msg = (
            f"[Memory] {mismatch}。已按策略保留现有数据继续运行，语义检索结果会劣化；"
            "运行 `ambot memory reindex` 重映射，或 `ambot memory reset-fingerprint` 确认模型未变"
        )
        logger.warning(msg)
        return StartupResult(True, "kept", msg, stored, current, migration)

    logger.warning(f"[Memory] {mismatch}，开始重映射…")
    try:
        report = await remap(runtime)
    except (RemapError, EmbeddingError, VectorStoreError, BackupError) as exc:
        msg = (
            f"[Memory] {exc if isinstance(exc, RemapError) else '重映射失败：' + str(exc)}。"
            "插件照常加载但检索会劣化；修复后重启 Bot 自动重试，或停止 Bot 后运行 "
            "`ambot memory reindex`"
        )
        logger.error(msg)
        return StartupResult(True, "remap_failed", msg, stored, current, migration)
    msg = f"[Memory] 重映射完成：{report.total} 条，备份 {report.backup}"
    return StartupResult(True, "remapped", msg, stored, current, migration, report)


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):
        return False


def _click_confirm(question: str) -> bool:
    import click

    try:
        return click.confirm(question, default=False)
    except click.Abort:
        return False


def _run_in_private_loop(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion on a private event loop in a worker thread.

    A worker thread is used whether or not the calling thread runs a loop: it
    works inside pytest/nonebug (a loop is running) and leaves the main
    thread's event-loop state untouched for ``ambot run`` (no loop yet).
    """
    box: dict[str, Any] = {}

    def target() -> None:
        async def main() -> T:
            return await factory()

        try:
            box["value"] = asyncio.run(main())
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="amrita-memory-startup-check", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def run_startup_check(
    runtime: MemoryRuntime,
    *,
    interactive: bool | None = None,
    confirm: Callable[[str], bool] | None = None,
) -> StartupResult:
    """The synchronous startup check the plugin runs at import time.

    ``AMBOT_COMMAND_CONTEXT=1`` (an ``ambot memory …`` command) or
    ``EMBED_CHECK_ON_STARTUP=false`` skip it. ``interactive`` defaults to
    whether stdin is a TTY and ``confirm`` to ``click.confirm``. The work runs
    on a private event loop; the embedding client's HTTP session opened there
    is closed before returning (it is recreated lazily on the bot's loop).
    """
    if os.environ.get("AMBOT_COMMAND_CONTEXT") == "1":
        return StartupResult(True, "skipped", "[Memory] 命令行上下文，跳过启动检查")
    if not runtime.config.env.embed_check_on_startup:
        msg = "[Memory] EMBED_CHECK_ON_STARTUP=false，跳过嵌入指纹检查"
        logger.info(msg)
        return StartupResult(True, "skipped", msg)
    is_tty = _stdin_is_tty() if interactive is None else interactive
    ask = confirm or _click_confirm

    async def work() -> StartupResult:
        try:
            return await run_startup_check_async(runtime, interactive=is_tty, confirm=ask)
        finally:
            await runtime.embedder.close()

    # An aiohttp session belongs to the loop it was created on: set aside one
    # opened earlier on another loop, and let the private loop open (and
    # close) its own.
    embedder = runtime.embedder
    outer_session, embedder._session = embedder._session, None
    try:
        return _run_in_private_loop(work)
    except Exception as exc:  # never take the bot down because of the check itself
        msg = f"[Memory] 启动检查出错，跳过：{exc.__class__.__name__}: {exc}；下次启动重新检查"
        logger.exception(msg)
        return StartupResult(True, "unavailable", msg)
    finally:
        embedder._session = outer_session
