"""The L3 loop's user profile as stored: one text about the target user, in one home.

The loop keeps what it learned about its target user (the profile's *subject*) as a
``summary---body`` text (edited line by line by ``subconscious.profile_store.ProfileStore``,
which implements :class:`LoopProfile` under its own lock while a loop runs in this
process). Where that text lives is its *home*, one of two (:func:`profile_home`):

* :class:`ProfileFile`: ``<data_dir>/user_profile.md``, when one process owns the
  store (the embedded or local Chroma modes);
* :class:`ProfileRow`: a row of the shared database (``kind`` ``profile``, named by the
  subject's user id, :mod:`..shared.documents`), when several processes share it
  (remote mode): a bot on another host reads and edits the same profile, and a forget
  of the user through any process removes it for all, whatever that process's own
  ``[subconscious]`` says (the row is found by the forgotten user's id). The first use
  in a process that knows the subject copies an existing ``user_profile.md`` of this
  data directory into the row and moves the file to ``user_profile.md.migrated-<time>``,
  its backup; that import happens once per store (a marker row,
  :class:`~..shared.documents.Migration`): another host's old file is only backed up.
  A file no newer than the subject's last forget is deleted instead (a forget is final).

A forget of the subject deletes the profile (the row or the file) and every copy of it
in the data directory (``user_profile.md.migrated-*``), under the lease of the edits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Protocol

from nonebot.log import logger

from ...core.errors import ErrorKind, PluginError
from ...infra.files import atomic_write_text
from ..scope import UserView
from ..shared.coherence import Coherence
from ..shared.documents import Migration, SharedDocuments, move_to_backup

__all__ = [
    "PROFILE_FILE",
    "PROFILE_SEPARATOR",
    "ForgottenAt",
    "LoopProfile",
    "NoProfileSubject",
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
"""The documents' kind of the profile (:mod:`..shared.documents`); a row's name is its subject."""
BACKUP_GLOB = f"{PROFILE_FILE}.migrated-*"
"""The backups the one-time import left (:func:`~..shared.documents.move_to_backup`)."""

ForgottenAt = Callable[[str], Awaitable[datetime | None]]
"""When a user was last forgotten (``ForgottenUsers.forgotten_at``)."""


class NoProfileSubject(PluginError, ValueError):
    """The process does not know whose profile it would write (no ``target_user_id``)."""

    kind = ErrorKind.INVALID


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
    """Delete the file and every backup of it beside it (``user_profile.md.migrated-*``);
    the lines of content the profile had (the file's, else the largest backup's)."""
    lines = profile_lines(read_profile(path))
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    for copy in path.parent.glob(BACKUP_GLOB):
        if copy.is_file():
            lines = lines or profile_lines(read_profile(copy))
            with contextlib.suppress(FileNotFoundError):
                copy.unlink()
    return lines


class LoopProfile(Protocol):
    """The profile of one user, read and removed whole (a user's export and forget)."""

    async def text_of(self, view: UserView) -> str:
        """The profile about the user of ``view`` as stored (``""``: none)."""
        ...

    async def remove_of(self, user_id: str) -> int:
        """Delete the profile about ``user_id`` and every copy of it; its lines of content."""
        ...


class ProfileFile:
    """The profile file itself (one process owns the store); about ``subject``."""

    def __init__(self, path: Path, subject: str = "") -> None:
        self.path = path
        self.subject = subject.strip()
        """The loop's target user (``""``: not known here; the file is then nobody's)."""

    @classmethod
    def in_dir(cls, data_dir: Path, subject: str = "") -> ProfileFile:
        return cls(data_dir / PROFILE_FILE, subject)

    async def text(self) -> str:
        return await asyncio.to_thread(read_profile, self.path)

    async def write(self, text: str) -> None:
        await asyncio.to_thread(atomic_write_text, self.path, text)

    async def exists(self) -> bool:
        return await asyncio.to_thread(self.path.exists)

    async def text_of(self, view: UserView) -> str:
        user_id = UserView.check(view).user_id
        return await self.text() if user_id and user_id == self.subject else ""

    async def remove_of(self, user_id: str) -> int:
        if not user_id or user_id != self.subject:
            return 0
        return await asyncio.to_thread(remove_profile, self.path)

    @contextlib.asynccontextmanager
    async def exclusive(self, what: str) -> AsyncIterator[None]:
        """Nothing to take: no other process edits this file."""
        yield


class ProfileRow:
    """The profile as a row of the shared database (several processes share the store),
    named by its subject's user id."""

    def __init__(
        self,
        documents: SharedDocuments,
        legacy: Path,
        subject: str = "",
        forgotten_at: ForgottenAt | None = None,
    ) -> None:
        self.documents = documents
        self.legacy = legacy
        """``user_profile.md`` of this data directory: copied in once, then moved away."""
        self.subject = subject.strip()
        """The loop's target user, whose row the loop edits (``""``: not known here)."""
        self.forgotten_at = forgotten_at
        self._ready = Migration(documents, self._present, self._migrate, "迁移用户画像").ready

    def _present(self) -> bool:
        # Only a process that knows whose profile the file is may import it.
        return bool(self.subject) and self.legacy.exists()

    async def _migrate(self, first: bool) -> None:
        text = await asyncio.to_thread(read_profile, self.legacy)
        if not text:
            return  # moved meanwhile by another process of this host
        written = await asyncio.to_thread(os.path.getmtime, self.legacy)
        forgot = await self.forgotten_at(self.subject) if self.forgotten_at else None
        if forgot is not None and forgot.timestamp() >= written:
            await asyncio.to_thread(remove_profile, self.legacy)
            logger.info(
                f"[Subconscious] 本机的 {self.legacy.name} 早于用户 {self.subject} 的遗忘，"
                "已删除，未迁入共享数据库"
            )
            return
        copied = first and await self.documents.put(self.subject, text, only_new=True)
        backup = await asyncio.to_thread(move_to_backup, self.legacy)
        if backup is None:
            return
        if copied:
            logger.info(f"[Subconscious] 用户画像已迁入共享数据库，原文件备份为 {backup}")
        else:
            logger.warning(
                f"[Subconscious] 共享数据库已迁移过用户画像，本机的 {self.legacy.name} 未迁入，"
                f"已备份为 {backup}"
            )

    def _name(self) -> str:
        if not self.subject:
            raise NoProfileSubject("未配置 [subconscious] target_user_id：不知道这是谁的用户画像")
        return self.subject

    async def text(self) -> str:
        if not self.subject:
            return ""
        await self._ready()
        return await self.documents.get(self.subject) or ""

    async def write(self, text: str) -> None:
        name = self._name()
        await self._ready()
        await self.documents.put(name, text)

    async def exists(self) -> bool:
        if not self.subject:
            return False
        await self._ready()
        return await self.documents.get(self.subject) is not None

    async def text_of(self, view: UserView) -> str:
        user_id = UserView.check(view).user_id
        if not user_id:
            return ""
        if user_id == self.subject:
            await self._ready()
        return await self.documents.get(user_id) or ""

    async def remove_of(self, user_id: str) -> int:
        """Under the lease of every process's edits and of the one-time import (an edit
        in flight elsewhere cannot write the profile back, nor an import bring it back)."""
        if not user_id:
            return 0
        async with (
            self.documents.exclusive("删除用户画像"),
            self.documents.exclusive("删除用户画像", step="migration"),
        ):
            lines = profile_lines(await self.documents.get(user_id) or "")
            await self.documents.delete(user_id)
            if user_id == self.subject:  # this host's copies of it
                copies = await asyncio.to_thread(remove_profile, self.legacy)
                lines = lines or copies
        return lines

    @contextlib.asynccontextmanager
    async def exclusive(self, what: str) -> AsyncIterator[None]:
        """The lease of every process's edits (a line edit reads, then writes, the text)."""
        async with self.documents.exclusive(what):
            yield


ProfileHome = ProfileFile | ProfileRow
"""Where the profile's text lives (:func:`profile_home`)."""


def profile_home(
    data_dir: Path,
    coherence: Coherence | None = None,
    subject: str = "",
    forgotten_at: ForgottenAt | None = None,
) -> ProfileHome:
    """The home of the profile about ``subject`` (the loop's target user; ``""``: not known
    in this process): the shared database when ``coherence`` is active (remote mode), else
    the file in ``data_dir``. ``forgotten_at`` fences the one-time import of the file."""
    if coherence is not None and coherence.active:
        documents = SharedDocuments(KIND, coherence)
        return ProfileRow(documents, data_dir / PROFILE_FILE, subject, forgotten_at)
    return ProfileFile.in_dir(data_dir, subject)
