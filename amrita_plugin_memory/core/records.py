"""A memory as the plugin sees it, and how its metadata is stored in Chroma."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .calendar import EVENT_TIME_KEY, OwnerCalendar

if TYPE_CHECKING:
    from .config import ConfigFile

__all__ = [
    "IMPORTANCE_LEVELS",
    "META_AUTHOR",
    "ORIGIN_GROUP_FLAG",
    "ORIGIN_PRIVATE",
    "PENDING_KEY",
    "SCOPES",
    "SOURCE_AUTO",
    "SUPERSEDED_BY_KEY",
    "SUPERSEDES_KEY",
    "GroupPrivacy",
    "MemoryRecord",
    "OriginFilter",
    "ScopeKind",
    "decode_tags",
    "encode_tags",
    "group_of_origin",
    "origin_after_rewrite",
    "origin_of_chat",
    "origin_of_group",
    "split_tag_text",
    "utc_now",
    "where_partition",
    "without_pending",
]

IMPORTANCE_LEVELS: tuple[str, ...] = ("low", "medium", "high")
SCOPES: tuple[str, ...] = ("user", "group")
ScopeKind = Literal["user", "group"]
"""The tool argument ``scope``: the speaker's partition or this group's (``storage/scope``)."""

SOURCE_AUTO = "auto"
"""``source`` of a memory that active memory learned without a tool call."""
SUPERSEDES_KEY = "supersedes"
"""Metadata key of :attr:`MemoryRecord.supersedes`."""
SUPERSEDED_BY_KEY = "superseded_by"
"""Metadata key of :attr:`MemoryRecord.superseded_by`."""
META_AUTHOR = "author"
"""Metadata key of :attr:`MemoryRecord.author` (present only when a writer is recorded;
a forget sets it to ``""``, which Chroma's metadata update can store, unlike a removal)."""

ORIGIN_PRIVATE = "private"
"""``origin`` of a memory written in a private chat (and of every memory older than origins)."""
ORIGIN_GROUP_FLAG = "from_group"
"""Boolean metadata beside ``origin``: Chroma's ``where`` has no prefix match and its
``$ne`` also matches records without the key, so "written in some group" needs an
equality filter on a key that memories from before origins do not have."""


_GROUP_PREFIX = "group:"


def origin_of_group(group_id: str) -> str:
    """``origin`` of a memory written in group ``group_id``: ``group:<gid>``."""
    return f"{_GROUP_PREFIX}{group_id}"


def origin_of_chat(group_id: str | None) -> str:
    """``origin`` of what is said in a chat: its group's, or ``private`` without a group."""
    return origin_of_group(group_id) if group_id else ORIGIN_PRIVATE


def group_of_origin(origin: str) -> str | None:
    """The group id of a ``group:<gid>`` origin; ``None`` for ``private`` (or anything else)."""
    if origin.startswith(_GROUP_PREFIX) and origin != _GROUP_PREFIX:
        return origin[len(_GROUP_PREFIX) :]
    return None


def origin_after_rewrite(memory_origin: str, written_in: str) -> str | None:
    """The origin a memory takes when its text is rewritten from the chat of ``written_in``
    (``None``: it keeps its own).

    A private chat's text makes a memory written in a group private: kept as
    it was, the memory would carry the private text into that group's reads
    and recall. The one rule for every rewrite (active memory's extraction,
    ``update_memory`` in a chat and in the L3 loop)."""
    if written_in == ORIGIN_PRIVATE and memory_origin != ORIGIN_PRIVATE:
        return ORIGIN_PRIVATE
    return None


@dataclass(frozen=True, slots=True)
class OriginFilter:
    """Which memories of a partition a read returns, by where they were written.

    :attr:`ALL` (every origin), :attr:`ANY_GROUP` (written in some group) or
    :meth:`only` one group's. Reads carry it down to the store: the Chroma
    ``where`` (:meth:`where`) and the partition index test the same thing.
    Which filter a chat gets is decided by :meth:`GroupPrivacy.origins_for` only.
    """

    kind: Literal["all", "any_group", "one"] = "all"
    origin: str = ""
    """The one origin allowed (``group:<gid>``; only with ``kind == "one"``)."""

    ALL: ClassVar[OriginFilter]
    ANY_GROUP: ClassVar[OriginFilter]

    @classmethod
    def only(cls, origin: str) -> OriginFilter:
        """The memories written in one group (``origin`` is ``group:<gid>``).

        Not for ``private``: memories from before origins have no ``origin``
        key, so no Chroma equality filter finds them.
        """
        if not origin.startswith(_GROUP_PREFIX) or origin == _GROUP_PREFIX:
            raise ValueError(f"not a group origin: {origin!r}")
        return cls("one", origin)

    @property
    def narrows(self) -> bool:
        """Whether some origin is left out (every filter but :attr:`ALL`)."""
        return self.kind != "all"

    def allows(self, origin: str) -> bool:
        """Whether a memory written at ``origin`` passes."""
        if self.kind == "all":
            return True
        if self.kind == "any_group":
            return origin != ORIGIN_PRIVATE
        return origin == self.origin

    def allows_meta(self, meta: Mapping[str, Any]) -> bool:
        """:meth:`allows` for a row's stored metadata (no ``origin``: ``private``)."""
        return self.kind == "all" or self.allows(str(meta.get("origin") or ORIGIN_PRIVATE))

    def where(self) -> dict[str, Any] | None:
        """The Chroma ``where`` clause of this filter (``None``: no clause)."""
        if self.kind == "all":
            return None
        if self.kind == "any_group":  # see ORIGIN_GROUP_FLAG
            return {ORIGIN_GROUP_FLAG: True}
        return {"origin": self.origin}


OriginFilter.ALL = OriginFilter("all")
OriginFilter.ANY_GROUP = OriginFilter("any_group")


@dataclass(frozen=True, slots=True)
class GroupPrivacy:
    """Which of a member's own memories a chat shows: the privacy rule, decided here only.

    What a member said in group A is shown in group A and in their private
    chat, never in group B; what they said in private only in private. Two
    switches widen it: ``group_memories_across_groups`` (any group reads what
    was written in any group) and ``private_memories_in_groups`` (a group reads
    every memory of the speaker, whatever the other switch says).
    """

    private_memories_in_groups: bool = False
    group_memories_across_groups: bool = False

    @classmethod
    def from_config(cls, file: ConfigFile) -> GroupPrivacy:
        """The rule as configured (the one place that reads its keys)."""
        return cls(
            private_memories_in_groups=file.private_memories_in_groups,
            group_memories_across_groups=file.group_memories_across_groups,
        )

    def origins_for(self, chat_origin: str) -> OriginFilter:
        """What a member's memories a read in the chat of ``chat_origin`` may return
        (``private``: their private chat, or an answer sent to it; ``group:<gid>``)."""
        if chat_origin == ORIGIN_PRIVATE or self.private_memories_in_groups:
            return OriginFilter.ALL
        if self.group_memories_across_groups:
            return OriginFilter.ANY_GROUP
        return OriginFilter.only(chat_origin)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


PENDING_KEY = "vector_pending"
"""Metadata flag of a memory stored without its vector (``True``; absent otherwise). Its
stored vector is a placeholder: nearest-neighbour reads leave it out, the keyword
channel finds it, the background embedding (``embedding/pending``) replaces it."""


def without_pending(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A row's metadata once it has its real vector (re-embedding writes fresh rows)."""
    return {k: v for k, v in meta.items() if k != PENDING_KEY}


@dataclass(slots=True)
class MemoryRecord:
    """One memory as the plugin sees it (not a raw Chroma structure)."""

    id: str
    content: str
    partition: str
    scope: str
    tags: list[str] = field(default_factory=list)
    importance: str = "medium"
    created_at: str = ""
    updated_at: str = ""
    distance: float | None = None
    origin: str = ORIGIN_PRIVATE
    """Where it was written: ``private`` or ``group:<gid>`` (which chats show it:
    :class:`GroupPrivacy`)."""
    source: str = ""
    """Who wrote it: ``""`` (a tool call, a command) or :data:`SOURCE_AUTO`
    (learned by active memory's extraction, shown with a mark in listings)."""
    author: str = ""
    """The user id of who wrote a group memory (``""``: not recorded, e.g. written
    before writers were recorded). A user's export lists the group memories they
    wrote; their forget removes the mark (the memory itself belongs to the group)."""
    event_time: str = ""
    """When what it tells happened, apart from when it was said: ``2026-12-01`` /
    ``2026-12`` / ``2026`` (the precision is the form, ``core/calendar.parse_event_time``);
    ``""``: unknown (a period question then matches :attr:`created_at`)."""
    supersedes: str = ""
    """The id of the older version of this fact (``用户住在北京`` before ``用户搬到了上海``):
    both stay, linked; "now" questions get this one first, "before" questions the older."""
    superseded_by: str = ""
    """The id of the newer version of this fact (``""``: none, this is current)."""
    imported_at: str = ""
    """When ``ambot memory import`` brought it in (``""``: written here): the archive sweep
    counts its lifetime from the later of this and :attr:`updated_at`."""
    pending: bool = False
    """Stored without its vector (no embedding model, or the service failed when it was
    written): found by keywords until the background embedding gives it one (:data:`PENDING_KEY`)."""

    @classmethod
    def from_chroma(
        cls,
        memory_id: str,
        document: str | None,
        meta: Mapping[str, Any] | None,
        distance: float | None = None,
    ) -> MemoryRecord:
        meta = meta or {}
        return cls(
            id=memory_id,
            content=document or "",
            partition=str(meta.get("user_id", "")),
            scope=str(meta.get("scope", "user")),
            tags=decode_tags(meta.get("tags")),
            importance=str(meta.get("importance", "medium")),
            created_at=str(meta.get("created_at", "")),
            updated_at=str(meta.get("updated_at", meta.get("created_at", ""))),
            distance=None if distance is None else round(float(distance), 4),
            origin=str(meta.get("origin") or ORIGIN_PRIVATE),
            source=str(meta.get("source") or ""),
            author=str(meta.get(META_AUTHOR) or ""),
            event_time=str(meta.get(EVENT_TIME_KEY) or ""),
            supersedes=str(meta.get(SUPERSEDES_KEY) or ""),
            superseded_by=str(meta.get(SUPERSEDED_BY_KEY) or ""),
            imported_at=str(meta.get("imported_at") or ""),
            pending=bool(meta.get(PENDING_KEY)),
        )

    def to_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "user_id": self.partition,
            "scope": self.scope,
            "tags": encode_tags(self.tags),
            "importance": self.importance,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "origin": self.origin,
            ORIGIN_GROUP_FLAG: self.origin != ORIGIN_PRIVATE,
            **({"source": self.source} if self.source else {}),
        }
        if self.author:
            meta[META_AUTHOR] = self.author
        if self.event_time:
            meta[EVENT_TIME_KEY] = self.event_time
        if self.supersedes:
            meta[SUPERSEDES_KEY] = self.supersedes
        if self.superseded_by:
            meta[SUPERSEDED_BY_KEY] = self.superseded_by
        if self.imported_at:
            meta["imported_at"] = self.imported_at
        if self.pending:
            meta[PENDING_KEY] = True
        return meta

    def to_json(self) -> dict[str, Any]:
        """Every field, for people (the admin console, a user's export)."""
        out: dict[str, Any] = {
            "id": self.id,
            "content": self.content,
            "partition": self.partition,
            "scope": self.scope,
            "tags": list(self.tags),
            "importance": self.importance,
            "origin": self.origin,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
        if self.author:
            out["author"] = self.author
        if self.source:
            out["source"] = self.source
        out.update(self._time_fields())
        if self.pending:
            out["pending"] = True
        if self.distance is not None:
            out["distance"] = self.distance
        return out

    def _time_fields(self) -> dict[str, str]:
        """The event time and version links that are set (both people's and models' forms)."""
        fields = {
            "event_time": self.event_time,
            "supersedes": self.supersedes,
            "superseded_by": self.superseded_by,
        }
        return {key: value for key, value in fields.items() if value}

    def compact(self, calendar: OwnerCalendar) -> dict[str, Any]:
        """The short form an LLM reads cheaply; ``created_at`` in the owner's zone with its
        offset (``2026-12-04T07:30:00+08:00``: the model reads the owner's day and hour)."""
        out: dict[str, Any] = {
            "id": self.id,
            "content": self.content,
            "tags": self.tags,
            "importance": self.importance,
            "created_at": calendar.show_stamp(self.created_at) or self.created_at,
        }
        out.update(self._time_fields())
        if self.distance is not None:
            out["distance"] = self.distance
        if self.source:
            out["source"] = self.source
        return out


def encode_tags(tags: Iterable[str]) -> str:
    # Stored as a JSON string: list-valued metadata is not portable across
    # Chroma versions and servers.
    return json.dumps(list(tags), ensure_ascii=False)


def split_tag_text(text: str) -> list[str]:
    """Tags written as one plain string (``"宠物,猫"``, ``"a， b"``): split, stripped, once each."""
    tags: list[str] = []
    for tag in text.replace("，", ",").split(","):
        tag = tag.strip()
        if tag and tag not in tags:
            tags.append(tag)
    return tags


def decode_tags(value: Any) -> list[str]:
    """Stored tags as a list: this plugin's JSON list, or the plain string the published
    ``amrita-plugin-memory`` stored (any text that is not a JSON list, even ``"2024"``)."""
    if isinstance(value, list):
        return [str(v) for v in value]
    if not isinstance(value, str) or not value:
        return []
    try:
        parsed = json.loads(value)
    except ValueError:
        return split_tag_text(value)
    return [str(v) for v in parsed] if isinstance(parsed, list) else split_tag_text(value)


def where_partition(
    partition: str,
    *,
    origins: OriginFilter = OriginFilter.ALL,
    with_vectors: bool = False,
    **filters: str | None,
) -> dict[str, Any]:
    """The Chroma ``where`` filter that confines a read to one partition, the
    ``origins`` it may return and ``filters``; ``with_vectors``: only memories that have
    their vector (a nearest-neighbour query: a pending memory's placeholder means nothing)."""
    clauses: list[dict[str, Any]] = [{"user_id": partition}]
    by_origin = origins.where()
    if by_origin is not None:
        clauses.append(by_origin)
    if with_vectors:
        clauses.append({PENDING_KEY: {"$ne": True}})
    clauses += [{k: v} for k, v in filters.items() if v is not None]
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}
