"""Backups of the covered collections (ids, documents, metadatas; no vectors).

A backup is written before every re-embedding and on demand (``ambot memory
backup create``); it needs ChromaDB but not the embedding service. Files are
JSON, streamed page by page, created 0600 under a temporary name, fsynced and
renamed into place, and only the newest ``REEMBED_BACKUP_KEEP`` are kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nonebot.log import logger

from ..infra.files import fsync_dir
from ..storage.memory_store import Item, iter_pages
from .errors import BackupError
from .fingerprint import FingerprintInfo
from .maintenance import Maintenance, count_of, meta_of, open_collection, space_of

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = [
    "BACKUP_FORMAT",
    "COLLECTION_END",
    "FILE_END",
    "BackupCollection",
    "BackupInfo",
    "backup_files",
    "collection_start",
    "create_backup",
    "header_text",
    "item_text",
    "list_backups",
    "load_backup",
]

BACKUP_FORMAT = "amrita_plugin_memory/embed_backup"
BACKUP_VERSION = 1
_BACKUP_RE = re.compile(r"^embed_backup_(\d{8}T\d{6}_\d{6})Z(?:_(\d+))?\.json$")
_HEADER_PREFIX = '{"header": '


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


def backup_files(backup_dir: Path) -> list[Path]:
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
    for path in reversed(backup_files(backup_dir)):
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
    files = backup_files(backup_dir)
    removed: list[Path] = []
    for path in files[: max(0, len(files) - keep)]:
        if path.resolve() in protected:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


# The file layout, written by create_backup and by a forget's rewrite
# (``embedding.forgotten``): the header alone on the first line (list_backups
# reads only that line), then one item per line.
COLLECTION_END = "\n]}"
FILE_END = "\n}}\n"


def header_text(header: dict[str, Any]) -> str:
    """The first line (the header) and the opening of the collections object."""
    return _HEADER_PREFIX + json.dumps(header, ensure_ascii=False) + ',\n"collections": {'


def collection_start(n: int, name: str, metadata: dict[str, Any], space: str | None) -> str:
    """The opening of the ``n``-th collection (from 0), up to its items list."""
    entry = {"metadata": metadata, "space": space}
    head = json.dumps(entry, ensure_ascii=False)[:-1]  # open object
    return ("," if n else "") + "\n" + json.dumps(name) + ": " + head + ', "items": ['


def item_text(n: int, item: Item) -> str:
    """The ``n``-th item of a collection (from 0) as its own line."""
    record = {"id": item.id, "document": item.document, "metadata": item.metadata}
    return ("," if n else "") + "\n" + json.dumps(record, ensure_ascii=False)


def _plugin_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("amrita_plugin_memory")
    except PackageNotFoundError:
        return "unknown"


async def create_backup(
    maint: Maintenance, *, protect: Iterable[Path] = (), prune: bool = True
) -> BackupInfo:
    """Write every covered collection (ids, documents, metadatas) to a new backup file.

    The file is streamed page by page (bounded memory), created with mode 0600
    under a temporary name, fsynced and renamed into place, so a crash never
    leaves a truncated backup under a real backup name. Afterwards only the
    newest ``REEMBED_BACKUP_KEEP`` backups are kept (``protect`` is never
    deleted). Needs Chroma but not the embedding service.
    """
    conn = maint.connection
    backup_dir = maint.backup_dir
    sources: list[tuple[str, Collection]] = []
    for cov in reversed(maint.covered):  # memory first in the file
        col = await (
            maint.store.collection() if cov.role == "memory" else open_collection(conn, cov.name)
        )
        if col is not None:
            sources.append((cov.name, col))
    counts = {name: await count_of(conn, col) for name, col in sources}
    metas = {name: meta_of(col) for name, col in sources}
    spaces = {name: space_of(col) for name, col in sources}
    stored = FingerprintInfo.from_meta(metas.get(maint.store.name, {}))
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
            fh.write(header_text(header))
            for n, (name, col) in enumerate(sources):
                fh.write(collection_start(n, name, metas[name], spaces[name]))
                written = 0
                async for page in iter_pages(conn, col):
                    for item in page:
                        fh.write(item_text(written, item))
                        written += 1
                fh.write(COLLECTION_END)
                if written != counts[name]:
                    raise BackupError(
                        f"集合 {name} 在备份期间被修改（预计 {counts[name]} 条，读到 {written} 条）；"
                        "请停止正在运行的 Bot 后重试"
                    )
            fh.write(FILE_END)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(backup_dir)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError | TypeError | ValueError):
            raise BackupError(f"写入备份文件失败（{path}）：{exc}") from exc
        raise
    if prune:
        _prune_backups(backup_dir, maint.env.reembed_backup_keep, [path, *protect])
    logger.info(f"[Memory] 已创建备份 {path}（{sum(counts.values())} 条）")
    return BackupInfo(path, created_at, path.stat().st_size, counts, stored)


@dataclass(slots=True)
class BackupCollection:
    metadata: dict[str, Any]
    space: str | None
    items: list[Item]


def load_backup(path: Path) -> tuple[dict[str, Any], dict[str, BackupCollection]]:
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
    out: dict[str, BackupCollection] = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("items"), list):
            raise BackupError(f"备份文件 {path} 中集合 {name} 的格式无效")
        items: list[Item] = []
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
            items.append(Item(rec["id"], doc, meta))
        meta = entry.get("metadata")
        space = entry.get("space")
        out[str(name)] = BackupCollection(
            dict(meta) if isinstance(meta, dict) else {},
            str(space) if isinstance(space, str) else None,
            items,
        )
    return header, out
