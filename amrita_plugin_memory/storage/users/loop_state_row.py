"""What the L3 loop's state keeps about one user, and how to reach it with or without the loop.

The loop (``subconscious.state.LoopState``) holds its state document in memory
and saves it whole after every change, so while a loop runs in this process
its document must be changed through it; both it and :class:`LoopStateRow`
(the stored row, for the command line or a bot without the loop) implement
:class:`LoopStateAccess`. A user's export and forget (``upkeep/users/user_data``) read
and remove, through it, the messages waiting for the loop's target user, the
abstracts of the loop's cycles (each says what a cycle did with the target
user's memories) and the knowledge suggestions a user made.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ..models import SubconsciousState, db_now
from ..shared.sessions import orm_session

__all__ = [
    "LOOP_STATE_UID",
    "LoopItems",
    "LoopStateAccess",
    "LoopStateRow",
    "drop_user_items",
    "user_items",
]

LOOP_STATE_UID = "amrita_memory"
"""The loop's row in the ``SubconsciousState`` table."""

T = TypeVar("T")

PENDING = "pending_messages"
SUGGESTIONS = "knowledge_suggestions"
ABSTRACTS = "last_abstracts"


class LoopStateAccess(Protocol):
    """Reading and changing the loop's state document (a plain JSON dict)."""

    async def read(self) -> Mapping[str, Any]: ...

    async def edit(self, change: Callable[[dict[str, Any]], T]) -> T:
        """Apply ``change`` to the document and persist it, serialised with other changes."""
        ...


class LoopStateRow:
    """The stored row itself, for a process in which no loop runs."""

    def __init__(self, uid: str = LOOP_STATE_UID) -> None:
        self.uid = uid

    async def read(self) -> Mapping[str, Any]:
        async with orm_session() as session:
            row = await session.get(SubconsciousState, self.uid)
            data = row.data if row is not None else None
        return copy.deepcopy(data) if isinstance(data, dict) else {}

    async def edit(self, change: Callable[[dict[str, Any]], T]) -> T:
        """Change the row in one transaction; saved only when ``change`` changed something
        (no row is created for nothing)."""
        async with orm_session() as session:
            row = await session.get(SubconsciousState, self.uid)
            stored = row.data if row is not None else None
            data: dict[str, Any] = copy.deepcopy(stored) if isinstance(stored, dict) else {}
            before = json.dumps(data, sort_keys=True, default=str)
            result = change(data)
            if row is not None and json.dumps(data, sort_keys=True, default=str) != before:
                row.data = data  # a new object, so the JSON column is marked dirty
                row.updated_at = db_now()
                await session.commit()
        return result


def _suggested_by(item: Any, user_id: str, partition: str) -> bool:
    """A suggestion records who made it (``user_id``); older ones only their chat
    (``source``), which names the user when it was a private chat."""
    if not isinstance(item, Mapping):
        return False
    return item.get("user_id") == user_id or item.get("source") == partition


@dataclass(slots=True)
class LoopItems:
    """What the loop's state keeps about one user."""

    pending: list[Any] = field(default_factory=list)
    """Messages waiting for the user (only the loop's target user has any)."""
    suggestions: list[Any] = field(default_factory=list)
    """The knowledge suggestions they made."""
    abstracts: list[Any] = field(default_factory=list)
    """What the loop's last cycles did: all about the target user, the one it works on."""


def user_items(
    state: Mapping[str, Any], user_id: str, partition: str, *, target: bool
) -> LoopItems:
    """The user's items in ``state``: the waiting messages and the cycles' abstracts
    belong to the loop's target user (``target``) alone, suggestions to who made them."""
    suggestions = [s for s in state.get(SUGGESTIONS) or [] if _suggested_by(s, user_id, partition)]
    if not target:
        return LoopItems(suggestions=suggestions)
    return LoopItems(list(state.get(PENDING) or []), suggestions, list(state.get(ABSTRACTS) or []))


def drop_user_items(
    state: dict[str, Any], user_id: str, partition: str, *, target: bool
) -> LoopItems:
    """Remove what :func:`user_items` finds from ``state``; what was removed."""
    found = user_items(state, user_id, partition, target=target)
    if found.pending:
        state[PENDING] = []
    if found.abstracts:
        state[ABSTRACTS] = []
    if found.suggestions:
        state[SUGGESTIONS] = [
            s for s in state[SUGGESTIONS] if not _suggested_by(s, user_id, partition)
        ]
    return found
