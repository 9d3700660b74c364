"""A group's rolling window of messages (Openmim's L1), as plain data.

The window is what the plugin shows the chat model of what the group said:
every message the bot saw in the group and every reply it sent, the newest
``capacity`` of them. This module is the in-memory half: appending must be
cheap enough to run on every group message (the observer's hot path), so it
is a bounded deque plus a list of entries not yet written to the database.
Persistence is :mod:`..storage.groups.window_store`.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ELLIPSIS", "GroupWindow", "WindowEntry", "cut_text"]

ELLIPSIS = "…"
"""Marks a text cut at its limit (``context_max_text_chars`` / ``bot_context_max_chars``)."""


def cut_text(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, the last one an ellipsis when cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + ELLIPSIS


@dataclass(slots=True)
class WindowEntry:
    """One message of a group window.

    ``nickname`` is kept only to show it when the group switched
    anonymisation off; ``user_id`` of a bot reply is the bot's own id.
    """

    user_id: str
    nickname: str
    text: str
    is_bot: bool
    at: float
    """Unix time (seconds) the message was seen."""


class GroupWindow:
    """The newest ``capacity`` entries of one group, and those not yet persisted.

    ``pending_members`` counts the members' messages among ``pending``: the
    flush rule is "every ``context_persist_every`` member messages".
    ``loaded`` turns true once the persisted rows were merged in
    (:meth:`merge_persisted`); until then ``entries`` holds only what this
    process saw.
    """

    __slots__ = ("entries", "loaded", "pending", "pending_members")

    def __init__(self, capacity: int) -> None:
        self.entries: deque[WindowEntry] = deque(maxlen=capacity)
        self.pending: list[WindowEntry] = []
        self.pending_members = 0
        self.loaded = False

    @property
    def capacity(self) -> int:
        return self.entries.maxlen or 0

    def append(self, entry: WindowEntry) -> None:
        self.entries.append(entry)
        self.pending.append(entry)
        if not entry.is_bot:
            self.pending_members += 1

    def take_pending(self) -> list[WindowEntry]:
        """The entries to write now; the window then counts none as pending."""
        taken, self.pending, self.pending_members = self.pending, [], 0
        return taken

    def restore_pending(self, entries: list[WindowEntry]) -> None:
        """Put back entries whose write failed, before any appended since."""
        self.pending = entries + self.pending
        self.pending_members = sum(1 for e in self.pending if not e.is_bot)

    def merge_persisted(self, persisted: Iterable[WindowEntry]) -> None:
        """Put the rows read from the database before what this process appended."""
        merged = deque(persisted, maxlen=self.capacity)
        merged.extend(self.entries)
        self.entries = merged
        self.loaded = True

    def resize(self, capacity: int) -> None:
        if capacity != self.capacity:
            self.entries = deque(self.entries, maxlen=capacity)

    def recent(self, count: int) -> list[WindowEntry]:
        """The newest ``count`` entries, oldest first."""
        if count <= 0:
            return []
        size = len(self.entries)
        if count >= size:
            return list(self.entries)
        return list(itertools.islice(self.entries, size - count, size))

    def drop_user(self, user_id: str) -> int:
        """Remove every message of member ``user_id`` (not the bot's replies); how many
        entries of the window went (a user's forget)."""

        def theirs(entry: WindowEntry) -> bool:
            return entry.user_id == user_id and not entry.is_bot

        before = len(self.entries)
        self.entries = deque((e for e in self.entries if not theirs(e)), maxlen=self.capacity)
        self.pending = [e for e in self.pending if not theirs(e)]
        self.pending_members = sum(1 for e in self.pending if not e.is_bot)
        return before - len(self.entries)

    def clear(self) -> None:
        self.entries.clear()
        self.pending = []
        self.pending_members = 0
