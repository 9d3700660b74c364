"""Backups and forgotten users: rewrite the files without them, and never restore them.

A user's forget (``upkeep.users.user_data``) records a tombstone
(``storage.users.tombstones``) and then calls :meth:`BackupScrubber.scrub`: every
backup file is rewritten without the rows the tombstones bury (the user's
partition, live and archived, from before the forget) and with the user's
writer mark cleared on group memories. Each file is written under a temporary
name (mode 0600), fsynced and renamed over the original, so a crash leaves the
old or the new file, never a mix; its name (and so its place in the list and
in pruning) stays. :func:`drop_forgotten` applies the same tombstones to a
backup being restored, so a backup kept elsewhere, or one written while the
forget ran, brings nobody back either.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from nonebot.log import logger

from ..infra.files import fsync_dir
from ..storage.keys import normalize_key
from ..storage.memory_store import Item, MemoryStore
from ..storage.users.tombstones import ForgottenUsers, Tombstones
from .backup import (
    COLLECTION_END,
    FILE_END,
    BackupCollection,
    backup_files,
    collection_start,
    header_text,
    item_text,
    load_backup,
)
from .errors import BackupError

__all__ = ["BackupScrubber", "drop_forgotten", "without_forgotten"]


def without_forgotten(contents: dict[str, BackupCollection], stones: Tombstones) -> tuple[int, int]:
    """Drop buried rows and clear old writer marks in ``contents``: ``(dropped, unmarked)``."""
    dropped = unmarked = 0
    for saved in contents.values():
        kept: list[Item] = []
        for item in saved.items:
            if stones.buries(item.metadata):
                dropped += 1
                continue
            if item.metadata is not None and stones.unmarks(item.metadata):
                item = item._replace(metadata=stones.cleaned(item.metadata))
                unmarked += 1
            kept.append(item)
        saved.items = kept
    return dropped, unmarked


async def drop_forgotten(store: MemoryStore, contents: dict[str, BackupCollection]) -> int:
    """Before a restore: take forgotten users out of a backup's contents; rows dropped.

    Raises ``ForgottenFileError`` (the restore does not start) when the
    tombstone file cannot be read.
    """
    if store.forgotten is None:
        return 0
    stones = await store.forgotten.load(normalize_key)
    if not stones:
        return 0
    dropped, _ = without_forgotten(contents, stones)
    if dropped:
        logger.info(f"[Memory] 恢复备份：已遗忘用户的 {dropped} 条数据不会被恢复")
    return dropped


def _rewrite(path: Path, stones: Tombstones) -> tuple[bool, int]:
    """Rewrite one backup file without buried rows (in place, atomically):
    ``(rewritten, rows dropped)``; a file with nothing to change is left alone."""
    header, contents = load_backup(path)
    dropped, unmarked = without_forgotten(contents, stones)
    if not dropped and not unmarked:
        return False, 0
    header = {**header, "counts": {name: len(saved.items) for name, saved in contents.items()}}
    tmp = path.with_name(f".{path.name}.forget.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # left by a rewrite that crashed
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(header_text(header))
            for n, (name, saved) in enumerate(contents.items()):
                fh.write(collection_start(n, name, saved.metadata, saved.space))
                for i, item in enumerate(saved.items):
                    fh.write(item_text(i, item))
                fh.write(COLLECTION_END)
            fh.write(FILE_END)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return True, dropped


class BackupScrubber:
    """The backup files of one data directory, as a forget rewrites them
    (``upkeep.users.user_data.BackupFiles``)."""

    def __init__(self, backup_dir: Path, forgotten: ForgottenUsers) -> None:
        self.backup_dir = backup_dir
        self.forgotten = forgotten

    def count(self) -> int:
        return len(backup_files(self.backup_dir))

    async def scrub(self, user_id: str, partition: str) -> tuple[int, int]:
        """Apply the tombstones (the one of ``user_id`` just written among them) to every
        backup file: ``(files rewritten, rows removed)``. A file that cannot be read is
        left as it is, with a warning: the tombstone still keeps a restore of it from
        bringing the user back."""
        stones = await self.forgotten.load(normalize_key)
        files = rows = 0
        for path in backup_files(self.backup_dir):
            try:
                rewritten, removed = await asyncio.to_thread(_rewrite, path, stones)
            except (BackupError, OSError) as exc:
                logger.warning(f"[Memory] 遗忘用户 {user_id}：备份 {path.name} 未能改写（{exc}）")
                continue
            files += rewritten
            rows += removed
        if files:
            logger.info(f"[Memory] 遗忘用户 {user_id}：已改写 {files} 份备份（{partition}）")
        return files, rows
