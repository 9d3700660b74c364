"""Crash-safe file writes."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

__all__ = ["atomic_write_text", "fsync_dir"]


def atomic_write_text(path: Path, text: str, *, mode: int | None = None) -> None:
    """Write ``text`` so that readers see the old or the new file, never a mix.

    ``mode`` (e.g. ``0o600`` for a file only the bot's account may read) is the
    new file's permission from its creation on, never wider in between.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        fd = os.open(tmp, flags, 0o666 if mode is None else mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def fsync_dir(path: Path) -> None:
    """Persist a rename inside ``path`` (best effort: not every filesystem allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
