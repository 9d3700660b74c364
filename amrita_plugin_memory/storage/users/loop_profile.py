"""The L3 loop's user profile as stored: one text about the target user, in one home.

The loop keeps what it learned about its target user as a ``summary---body`` text
(edited line by line by ``subconscious.profile_store.ProfileStore``, which
implements :class:`LoopProfile` under its own lock while a loop runs in this
process). Where that text lives is its *home*, one of two (:func:`profile_home`):

* :class:`ProfileFile`: ``<data_dir>/user_profile.md``, when one process owns the
  store (the embedded or local Chroma modes);
* :class:`ProfileRow`: a row of the shared database (``kind`` ``profile``,
  :mod:`..shared.documents`), when several processes share it (remote mode): a
  bot on another host reads and edits the same profile, and a forget through any
  process removes it for all. The first use copies an existing ``user_profile.md``
  of this data directory into the row (unless the row already has a text: the
  file is then only kept) and moves the file to ``user_profile.md.migrated-<time>``,
  its backup.

A forget of the target user deletes the profile (the file, or the row).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

from nonebot.log import logger

from ...infra.files import atomic_write_text
from ..shared.coherence import Coherence
from ..shared.documents import Migration, SharedDocuments, move_to_backup

__all__ = [
    "PROFILE_FILE",
    "PROFILE_SEPARATOR",
    "LoopProfile",
    "ProfileFile",
    "ProfileHome",
    "ProfileRow",
    "profile_home",
    "profile_lines",
    "read_profile",
    "remove_profile",
]

PROFILE_FILE = "user_profile.md"
"""The profile's file name in the plugin's data directory."""
PROFILE_SEPARATOR = "---"
"""The line between the profile's summary and its body."""
KIND = "profile"
"""The documents' kind of the profile (:mod:`..shared.documents`); its one name is ``""``."""


def profile_lines(text: str) -> int:
    """Lines of content in a profile's text (the separator is not content)."""
    return sum(1 for line in text.splitlines() if line != PROFILE_SEPARATOR)


def read_profile(path: Path) -> str:
    """The file's text; ``""`` when there is none."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def remove_profile(path: Path) -> int:
    """Delete the file; the lines of content it had (0 when there was none)."""
    lines = profile_lines(read_profile(path))
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return lines


class LoopProfile(Protocol):
    """The target user's profile, read and removed whole."""

    async def text(self) -> str:
        """The profile as stored (``""``: none)."""
        ...

    async def remove(self) -> int:
        """Delete the profile; its lines of content."""
        ...


class ProfileFile:
    """The profile file itself (one process owns the store)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def in_dir(cls, data_dir: Path) -> ProfileFile:
        return cls(data_dir / PROFILE_FILE)

    async def text(self) -> str:
        return await asyncio.to_thread(read_profile, self.path)

    async def write(self, text: str) -> None:
        await asyncio.to_thread(atomic_write_text, self.path, text)

    async def exists(self) -> bool:
        return await asyncio.to_thread(self.path.exists)

    async def remove(self) -> int:
        return await asyncio.to_thread(remove_profile, self.path)

    @contextlib.asynccontextmanager
    async def exclusive(self, what: str) -> AsyncIterator[None]:
        """Nothing to take: no other process edits this file."""
        yield


class ProfileRow:
    """The profile as a row of the shared database (several processes share the store)."""

    def __init__(self, documents: SharedDocuments, legacy: Path) -> None:
        self.documents = documents
        self.legacy = legacy
        """``user_profile.md`` of this data directory: copied in once, then moved away."""
        self._ready = Migration(documents, legacy.exists, self._migrate, "迁移用户画像").ready

    async def _migrate(self) -> None:
        text = await asyncio.to_thread(read_profile, self.legacy)
        if not text:
            return  # moved meanwhile by another process of this host
        copied = await self.documents.put("", text, only_new=True)
        backup = await asyncio.to_thread(move_to_backup, self.legacy)
        if backup is None:
            return
        if copied:
            logger.info(f"[Subconscious] 用户画像已迁入共享数据库，原文件备份为 {backup}")
        else:
            logger.warning(
                f"[Subconscious] 共享数据库中已有用户画像，本机的 {self.legacy.name} 未迁入，"
                f"已备份为 {backup}"
            )

    async def text(self) -> str:
        await self._ready()
        return await self.documents.get("") or ""

    async def write(self, text: str) -> None:
        await self._ready()
        await self.documents.put("", text)

    async def exists(self) -> bool:
        await self._ready()
        return await self.documents.get("") is not None

    async def remove(self) -> int:
        await self._ready()
        lines = profile_lines(await self.documents.get("") or "")
        await self.documents.delete("")
        return lines

    @contextlib.asynccontextmanager
    async def exclusive(self, what: str) -> AsyncIterator[None]:
        """The lease of every process's edits (a line edit reads, then writes, the text)."""
        async with self.documents.exclusive(what):
            yield


ProfileHome = ProfileFile | ProfileRow
"""Where the profile's text lives (:func:`profile_home`)."""


def profile_home(data_dir: Path, coherence: Coherence | None = None) -> ProfileHome:
    """The profile's home: the shared database when ``coherence`` is active (remote mode),
    else the file in ``data_dir``."""
    if coherence is not None and coherence.active:
        return ProfileRow(SharedDocuments(KIND, coherence), data_dir / PROFILE_FILE)
    return ProfileFile.in_dir(data_dir)
