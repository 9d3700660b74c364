"""The loop's persisted state (one ``SubconsciousState`` row) and its pending messages."""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, cast

from nonebot import logger

from ..storage.models import SubconsciousState, db_now
from ..storage.shared.sessions import orm_session
from .consts import PENDING_MAX, STATE_UID
from .templates import local_now
from .types import PendingMessage, StateData, empty_state, normalize_state

__all__ = ["LoopState", "PendingMessages", "StateStore"]

T = TypeVar("T")


class StateStore:
    """Reads and writes the loop's row in the ``SubconsciousState`` table."""

    def __init__(self, uid: str = STATE_UID) -> None:
        self.uid = uid

    async def load(self) -> Any:
        """The stored JSON document, or ``None`` when there is no row yet."""
        async with orm_session() as session:
            row = await session.get(SubconsciousState, self.uid)
            return copy.deepcopy(row.data) if row is not None else None

    async def save(self, data: StateData) -> None:
        document = copy.deepcopy(dict(data))
        async with orm_session() as session:
            row = await session.get(SubconsciousState, self.uid)
            if row is None:
                session.add(SubconsciousState(uid=self.uid, data=document, updated_at=db_now()))
            else:
                row.data = document  # a new object, so the JSON column is marked dirty
                row.updated_at = db_now()
            await session.commit()


class LoopState:
    """The state document in memory, loaded from and saved to a :class:`StateStore`.

    :meth:`mutate` is the one way to change it, so concurrent writers (tool
    calls, chat hooks, the end of a cycle) never lose each other's updates.
    """

    def __init__(self, store: StateStore, *, max_abstracts: int) -> None:
        self.store = store
        self.max_abstracts = max_abstracts
        self.data: StateData = empty_state()
        self.lock = asyncio.Lock()
        self._loaded = False

    async def _read(self) -> None:
        raw = await self.store.load()
        self.data = normalize_state(raw, max_abstracts=self.max_abstracts)
        self._loaded = True

    async def load(self) -> StateData:
        """Read the stored row into :attr:`data`."""
        async with self.lock:
            await self._read()
            return self.data

    async def mutate(self, change: Callable[[StateData], T]) -> T:
        """Apply ``change`` to :attr:`data` and persist it, serialised with every other change.

        The state is saved whatever ``change`` returns; ``change`` must not
        await (it runs under the lock). The stored row is read first if it was
        never loaded, so an early write cannot wipe it.
        """
        async with self.lock:
            if not self._loaded:
                await self._read()
            result = change(self.data)
            await self.store.save(self.data)
            return result

    async def read(self) -> dict[str, Any]:
        """A copy of the document (``storage.users.loop_state_row.LoopStateAccess``)."""
        async with self.lock:
            if not self._loaded:
                await self._read()
            return copy.deepcopy(dict(self.data))

    async def edit(self, change: Callable[[dict[str, Any]], T]) -> T:
        """:meth:`mutate` on the document as a plain dict (``LoopStateAccess``: a user's
        forget removes their items through the loop, which would otherwise save them back)."""
        return await self.mutate(lambda data: change(cast(dict[str, Any], data)))


class PendingMessages:
    """Messages for the target user's next private turn, delivered exactly once.

    A chat turn *claims* the messages it shows to the model (pre-completion)
    and *confirms* them when it completed (completion hook); only then are
    they removed from the stored state. A turn that failed never confirms:
    its claim is released at the next claim, so the messages are shown again
    in a later turn instead of being lost. Two concurrent turns never both
    claim the same message.
    """

    def __init__(self, state: LoopState, target_user_id: str) -> None:
        self._state = state
        self.target_user_id = target_user_id
        self._claims: dict[str, tuple[Any, list[str]]] = {}

    @property
    def items(self) -> list[PendingMessage]:
        return self._state.data["pending_messages"]

    async def add(self, intent: str, *, text: str | None = None) -> PendingMessage | None:
        """Queue a message; ``None`` when the queue is full or holds the same intent."""

        def change(state: StateData) -> PendingMessage | None:
            items = state["pending_messages"]
            if len(items) >= PENDING_MAX or any(p["intent"] == intent for p in items):
                return None
            message: PendingMessage = {
                "id": uuid.uuid4().hex,
                "time": local_now().isoformat(timespec="seconds"),
                "intent": intent,
            }
            if text:
                message["text"] = text
            items.append(message)
            return message

        message = await self._state.mutate(change)
        if message is not None:
            logger.info(f"[Subconscious] Queued a message for user={self.target_user_id}")
        return message

    def _release_stale(self) -> None:
        for key, (chat, _) in list(self._claims.items()):
            if chat.is_done():
                del self._claims[key]

    def claim(self, chat: Any) -> list[PendingMessage]:
        """The messages ``chat`` (an Amrita ChatObject) should deliver."""
        self._release_stale()
        key = str(chat.stream_id)
        if key in self._claims:
            ids = set(self._claims[key][1])
            return [m for m in self.items if m["id"] in ids]
        taken = {i for _, ids in self._claims.values() for i in ids}
        messages = [m for m in self.items if m["id"] not in taken]
        if messages:
            self._claims[key] = (chat, [m["id"] for m in messages])
        return messages

    async def confirm(self, chat: Any) -> int:
        """``chat`` completed: drop the messages it delivered; how many."""
        claim = self._claims.pop(str(chat.stream_id), None)
        if claim is None:
            return 0
        ids = set(claim[1])

        def change(state: StateData) -> int:
            before = len(state["pending_messages"])
            state["pending_messages"] = [m for m in state["pending_messages"] if m["id"] not in ids]
            return before - len(state["pending_messages"])

        delivered = await self._state.mutate(change)
        if delivered:
            logger.info(
                f"[Subconscious] Delivered {delivered} pending message(s) to user={self.target_user_id}"
            )
        return delivered
