"""Conversation episodes: the shared vocabulary (issue #48).

A conversation is a run of messages in one chat (a private chat, or a group),
ended by an idle gap (``[episodes] idle_minutes``) or the owner's local day's
end. Its lines wait in the store (:class:`EpisodeLine`) until it ends; then
one :class:`EpisodeRecord` keeps what it was about: the chat, the span, who
took part, a short summary and its topics. Plain data, no storage and no
framework, so the ranking, the prompts, the benchmarks and the stores share it.

Privacy follows the memories' rule: an episode has the chat's partition key
(``chat``: the user's private key, or the group's key) and an origin
(``private``, or ``group:<gid>``), and a read sees it only through a view whose
partition is that chat and whose origins allow that origin
(:meth:`EpisodeRecord.visible_in`), so a private episode never reaches a group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .records import ORIGIN_PRIVATE, OriginFilter

__all__ = [
    "EPISODE_SOURCES",
    "LINE_MAX_CHARS",
    "SUMMARY_MAX_CHARS",
    "EpisodeLine",
    "EpisodeRecord",
    "EpisodeSource",
    "NewEpisode",
]

SUMMARY_MAX_CHARS = 200
"""An episode's summary is at most this long (the issue's bound; longer answers are cut)."""
LINE_MAX_CHARS = 500
"""A message is kept for its episode cut to this many characters."""

EpisodeSource = Literal["model", "extract"]
"""How the summary was made: by the background model, or extracted without one."""
EPISODE_SOURCES: tuple[EpisodeSource, ...] = ("model", "extract")


@dataclass(frozen=True, slots=True)
class EpisodeLine:
    """One message of a conversation not ended yet (``id`` 0 until stored)."""

    chat: str
    """The chat's partition key (the private user's key, or the group's key)."""
    origin: str
    """``private``, or ``group:<gid>``."""
    user_id: str
    """Who said it (the bot's own id for a reply)."""
    text: str
    at: float
    """UTC seconds since the epoch."""
    name: str = ""
    """The speaker's nickname in a group (labels are given when the episode is made)."""
    is_bot: bool = False
    id: int = 0


@dataclass(frozen=True, slots=True)
class NewEpisode:
    """An episode being kept: what :class:`EpisodeRecord` holds, without its id."""

    chat: str
    origin: str
    start: float
    end: float
    participants: tuple[str, ...]
    """The members (never the bot) who spoke, in the order they first did."""
    summary: str
    topics: tuple[str, ...]
    source: EpisodeSource
    messages: int
    """Messages in the conversation (the bot's replies included)."""
    chars: int
    """Characters of those messages (what the summary stands for)."""
    day: str = ""
    """The owner's local date of ``start``, ``YYYY-MM-DD`` (set by the store's caller)."""


@dataclass(frozen=True, slots=True)
class EpisodeRecord:
    """A kept episode, as read from the store."""

    id: str
    chat: str
    origin: str
    start: float
    end: float
    day: str
    participants: tuple[str, ...]
    summary: str
    topics: tuple[str, ...] = field(default_factory=tuple)
    source: EpisodeSource = "extract"
    messages: int = 0
    chars: int = 0
    archived: bool = False
    """Moved to the archive (past ``lifetime_days``, or deleted by its user): shown to
    nobody but an export, restorable, removed only by a forget."""

    @property
    def in_group(self) -> bool:
        return self.origin != ORIGIN_PRIVATE

    def visible_in(self, partition: str, origins: OriginFilter) -> bool:
        """Whether a view of ``partition`` with ``origins`` shows this episode."""
        return self.chat == partition and origins.allows(self.origin)
