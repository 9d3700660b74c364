"""Tombstones of forgotten users: no restore, now or later, brings a forgotten user back.

A user's forget (``upkeep/users/user_data``) removes their rows everywhere, the backup
files included; but a backup copied elsewhere, or one written while the forget
ran, may still hold them. So the forget also records the user here, with its
time, and every restore path (a backup restore: ``embedding.forgotten``; an
archive restore: ``upkeep/archive/restore``) drops the rows of the user's
partition last changed no later than that time, and clears the user's writer
mark (:data:`~...core.records.META_AUTHOR`) on group memories as old. A user
who talks again after the forget is not blocked: what they say afterwards is
newer than the tombstone, so it is restored like anyone's.

The file is ``<data_dir>/forgotten_users.json`` (mode 0600, written
atomically), one entry per user id::

    {"format": "amrita_plugin_memory/forgotten_users", "version": 1,
     "users": {"10001": {"partition": "QQPlatform_Private_10001",
                         "at": "2025-06-01T12:00:00.123456+00:00"}}}

A file that cannot be read makes every restore refuse (:class:`ForgottenFileError`):
restoring without it could bring a forgotten user back.

With ``sessions`` (the runtime's), every entry is also a row of the table
``amrita_plugin_memory_forgotten_user`` (:class:`~..models.ForgottenUser`), so a
forget in one process (or on another host sharing the database) is seen by every
other process's fences and restores. The entries are the union of both (the later
time wins); the first read copies the file's entries into the table (those written
before the table existed), and a forget writes both. Every reading and writing of
the table is waited for at most :data:`~..shared.sessions.OPERATION_LIMIT` seconds
(:class:`~..shared.sessions.SharedWork`): past it a restore refuses and a fence
voids the work it guards (:class:`~..shared.sessions.SharedDatabaseError`), rather
than wait without end or guess.

A fence asks about a few users at a time (every extraction batch, persona run and group
window flush): :meth:`ForgottenUsers.of` reads their rows only (the table by its primary
key, the file parsed in a thread and again only after it changed), so its cost does not
grow with the number of users ever forgotten. Only a restore reads every entry.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from ...core.errors import ErrorKind, PluginError
from ...core.records import META_AUTHOR
from ...infra.files import atomic_write_text
from ..shared.sessions import SessionFactory, SharedWork

__all__ = [
    "FORGOTTEN_FILE_NAME",
    "ForgottenFileError",
    "ForgottenUsers",
    "Tombstones",
    "parse_time",
    "row_time",
]

FORGOTTEN_FILE_NAME = "forgotten_users.json"
_FORMAT = "amrita_plugin_memory/forgotten_users"
_VERSION = 1
_TIME_KEYS = ("created_at", "updated_at", "archived_at")
KEYED_CHUNK = 500
"""User ids per ``IN`` of a keyed read (a bound on the statement's size)."""

Normalize = Callable[[str], str | None]
"""A partition key in its current form (``storage.keys.normalize_key``; ``None``: unknown form)."""


class ForgottenFileError(PluginError, OSError):
    """The tombstone file exists but cannot be read: restores refuse rather than guess."""

    kind = ErrorKind.FILES


def parse_time(value: Any) -> datetime | None:
    """An ISO timestamp as stored in metadata (naive means UTC); ``None`` if unusable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def row_time(meta: Mapping[str, Any]) -> datetime | None:
    """When a row was last changed: the latest of its creation, update and archiving."""
    times = [t for t in (parse_time(meta.get(k)) for k in _TIME_KEYS) if t is not None]
    return max(times) if times else None


def _older(meta: Mapping[str, Any], forgot_at: datetime) -> bool:
    """A row without a usable time counts as old: it cannot prove it is newer."""
    changed = row_time(meta)
    return changed is None or changed <= forgot_at


@dataclass(frozen=True, slots=True)
class Tombstones:
    """The forgotten users as a restore checks them (partition keys already normalised)."""

    partitions: Mapping[str, datetime] = field(default_factory=dict)
    """Current-form partition key → time of the user's last forget."""
    authors: Mapping[str, datetime] = field(default_factory=dict)
    """User id → time of their last forget (writer marks of group memories)."""
    normalize: Normalize = lambda key: key

    def __bool__(self) -> bool:
        return bool(self.partitions)

    def buries(self, meta: Mapping[str, Any] | None) -> bool:
        """Whether a row (its metadata) is a forgotten user's from before their forget."""
        if not meta or not self.partitions:
            return False
        key = str(meta.get("user_id") or "")
        forgot_at = self.partitions.get(self.normalize(key) or key)
        return forgot_at is not None and _older(meta, forgot_at)

    def unmarks(self, meta: Mapping[str, Any] | None) -> bool:
        """Whether a row carries a forgotten user's writer mark from before their forget."""
        if not meta or not self.authors:
            return False
        forgot_at = self.authors.get(str(meta.get(META_AUTHOR) or ""))
        return forgot_at is not None and _older(meta, forgot_at)

    def cleaned(self, meta: dict[str, Any]) -> dict[str, Any]:
        """``meta`` with an old writer mark of a forgotten user cleared (see :meth:`unmarks`)."""
        return {**meta, META_AUTHOR: ""} if self.unmarks(meta) else meta


class ForgottenUsers:
    """The tombstone file of one data directory."""

    def __init__(
        self, path: Path, sessions: SessionFactory | None = None, work: SharedWork | None = None
    ) -> None:
        self.path = path
        self.sessions = sessions
        self.work = work or SharedWork()
        """Waits for the table with a bound (the runtime's store's, settled with it)."""
        self._lock = asyncio.Lock()
        self._copied = False
        self._parsed: tuple[tuple[int, int, int], dict[str, dict[str, str]]] | None = None
        """The file as last parsed, by its stat (a lookup parses it again only if it changed)."""

    @classmethod
    def in_dir(
        cls, data_dir: Path, sessions: SessionFactory | None = None, work: SharedWork | None = None
    ) -> ForgottenUsers:
        return cls(data_dir / FORGOTTEN_FILE_NAME, sessions, work)

    async def _rows(self) -> dict[str, dict[str, str]]:
        """The table's entries (empty without ``sessions``)."""
        if self.sessions is None:
            return {}
        return await self.work.run(self._read_rows(self.sessions), "读取遗忘记录")

    @staticmethod
    async def _read_rows(sessions: SessionFactory) -> dict[str, dict[str, str]]:
        from ..models import ForgottenUser  # lazily: importable without NoneBot

        async with sessions() as session:
            rows = (await session.scalars(select(ForgottenUser))).all()
        return {
            r.user_id: {"partition": r.partition, "at": _from_us(r.at_us).isoformat()} for r in rows
        }

    async def _put_row(self, user_id: str, partition: str, at: datetime) -> None:
        """Record ``user_id`` in the table, moving its time forward only (portable upsert)."""
        if self.sessions is None:
            return
        await self.work.run(self._upsert(self.sessions, user_id, partition, at), "写入遗忘记录")

    @staticmethod
    async def _upsert(sessions: SessionFactory, user_id: str, partition: str, at: datetime) -> None:
        from ..models import ForgottenUser  # lazily: importable without NoneBot

        us = _to_us(at)
        for _ in range(3):
            try:
                async with sessions() as session:
                    row = await session.get(ForgottenUser, user_id)
                    if row is None:
                        session.add(ForgottenUser(user_id=user_id, partition=partition, at_us=us))
                    elif row.at_us < us:
                        row.at_us, row.partition = us, partition or row.partition
                    await session.commit()
                return
            except IntegrityError:  # inserted by another process meanwhile: read it again
                continue

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as exc:
            raise ForgottenFileError(f"无法读取遗忘记录 {self.path}：{exc}") from None
        try:
            document = json.loads(text)
        except ValueError:
            document = None
        users = document.get("users") if isinstance(document, dict) else None
        if not isinstance(document, dict) or document.get("format") != _FORMAT:
            users = None
        if not isinstance(users, dict):
            raise ForgottenFileError(
                f"遗忘记录 {self.path} 已损坏：为免恢复出已被遗忘的用户的数据，本次恢复未执行"
            )
        out: dict[str, dict[str, str]] = {}
        for user_id, entry in users.items():
            if isinstance(entry, dict) and parse_time(entry.get("at")) is not None:
                out[str(user_id)] = {
                    "partition": str(entry.get("partition") or ""),
                    "at": str(entry["at"]),
                }
        return out

    async def entries(self) -> dict[str, dict[str, str]]:
        """Every recorded user: ``{user id: {"partition": key, "at": ISO time}}``."""
        found = await asyncio.to_thread(self._read)
        if self.sessions is not None and not self._copied:
            for user_id, entry in found.items():  # entries from before the table
                at = parse_time(entry["at"])
                assert at is not None
                await self._put_row(user_id, entry["partition"], at)
            self._copied = True
        for user_id, entry in (await self._rows()).items():
            mine = found.get(user_id)
            if mine is None or (parse_time(mine["at"]) or at_min()) < (
                parse_time(entry["at"]) or at_min()
            ):
                found[user_id] = entry
        return found

    async def load(self, normalize: Normalize) -> Tombstones:
        """The tombstones as restores check them (raises :class:`ForgottenFileError`)."""
        entries = await self.entries()
        partitions: dict[str, datetime] = {}
        authors: dict[str, datetime] = {}
        for user_id, entry in entries.items():
            at = parse_time(entry["at"])
            assert at is not None
            key = entry["partition"]
            if key:
                partitions[normalize(key) or key] = at
            authors[user_id] = at
        return Tombstones(partitions, authors, normalize)

    async def forgotten_at(self, user_id: str) -> datetime | None:
        """When ``user_id`` was last forgotten (``None``: never; raises :class:`ForgottenFileError`)."""
        return (await self.of([user_id])).get(user_id)

    async def of(self, user_ids: Iterable[str]) -> dict[str, datetime]:
        """When each of ``user_ids`` that was forgotten was last forgotten: keyed reads, their
        cost independent of how many other users were ever forgotten (the table by its
        primary key; the file parsed in a thread, and again only when it changed)."""
        wanted = sorted(set(user_ids))
        if not wanted:
            return {}
        found: dict[str, datetime] = {}
        users = await asyncio.to_thread(self._read_cached)
        for user_id in wanted:
            entry = users.get(user_id)
            at = parse_time(entry["at"]) if entry is not None else None
            if at is not None:
                found[user_id] = at
        if self.sessions is not None:
            rows = await self.work.run(self._read_keyed(self.sessions, wanted), "读取遗忘记录")
            for user_id, at_us in rows.items():
                at = _from_us(at_us)
                if at > found.get(user_id, at_min()):
                    found[user_id] = at
        return found

    @staticmethod
    async def _read_keyed(sessions: SessionFactory, wanted: list[str]) -> dict[str, int]:
        from ..models import ForgottenUser  # lazily: importable without NoneBot

        out: dict[str, int] = {}
        async with sessions() as session:
            for start in range(0, len(wanted), KEYED_CHUNK):
                chunk = wanted[start : start + KEYED_CHUNK]
                stmt = select(ForgottenUser.user_id, ForgottenUser.at_us).where(
                    ForgottenUser.user_id.in_(chunk)
                )
                out.update({str(u): int(at) for u, at in (await session.execute(stmt)).all()})
        return out

    def _read_cached(self) -> dict[str, dict[str, str]]:
        """:meth:`_read`, parsed again only when the file changed (run in a thread; the
        result is shared: never changed by the caller)."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ForgottenFileError(f"无法读取遗忘记录 {self.path}：{exc}") from None
        key = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        parsed = self._parsed
        if parsed is not None and parsed[0] == key:
            return parsed[1]
        users = self._read()
        self._parsed = (key, users)
        return users

    async def add(self, user_id: str, partition: str, at: datetime) -> None:
        """Record (or move forward) the forget of ``user_id``; persisted before it returns."""

        def write() -> None:
            users = self._read()
            users[user_id] = {"partition": partition, "at": at.isoformat()}
            document = {"format": _FORMAT, "version": _VERSION, "users": users}
            text = json.dumps(document, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
            atomic_write_text(self.path, text, mode=0o600)

        async with self._lock:
            await asyncio.to_thread(write)
        await self._put_row(user_id, partition, at)


def at_min() -> datetime:
    return datetime.min.replace(tzinfo=UTC)


def _to_us(at: datetime) -> int:
    at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    delta = at - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _from_us(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
