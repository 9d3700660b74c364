"""The loop's state in memory, read from and written to its rows, and its pending messages.

The stored state is one row per item (``storage/users/loop_state_row``): every
change reads the rows as they are now, applies the change and writes only what
it changed, so this process never writes back what another erased (a forget
through another bot) and the in-memory copy is only a view for prompts.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, cast

from nonebot import logger

from ..core.calendar import OwnerCalendar
from ..storage.shared.sessions import SharedWork
from ..storage.users.loop_state_row import LoopStateRow
from .consts import PENDING_MAX, STATE_UID
from .types import PendingMessage, StateData, empty_state, normalize_state

__all__ = ["LoopState", "PendingMessages", "StateStore"]

T = TypeVar("T")


class StateStore(LoopStateRow):
    """The loop's stored state (:class:`~..storage.users.loop_state_row.LoopStateRow`),
    with the document's whole-state view the tests and tools read."""

    def __init__(
        self, uid: str = STATE_UID, *, target: str | None = None, work: SharedWork | None = None
    ) -> None:
        super().__init__(uid, target=target, work=work)

    async def load(self) -> Any:
        """The stored JSON document, or ``None`` when nothing is stored yet."""
        return await self.read() or None

    async def save(self, data: StateData | dict[str, Any]) -> None:
        """Make the stored state ``data`` (seeding and imports: it removes every item not
        in ``data``; the loop itself changes items through :meth:`LoopState.mutate`)."""
        document = copy.deepcopy(dict(data))

        def replace(stored: dict[str, Any]) -> None:
            stored.clear()
            stored.update(document)

        await self.edit(replace)


class LoopState:
    """The state document in memory, a view of the rows of a :class:`StateStore`.

    :meth:`mutate` is the one way to change it: serialised with every other
    change of this process, applied to the rows as they are now and written
    item by item (never the whole document), so concurrent writers, here or in
    another process, never lose each other's updates.
    """

    def __init__(self, store: StateStore, *, max_abstracts: int) -> None:
        self.store = store
        self.max_abstracts = max_abstracts
        self.data: StateData = empty_state()
        self.lock = asyncio.Lock()

    async def load(self) -> StateData:
        """Read the stored rows into :attr:`data` (the items of users forgotten since the
        work that made them began are deleted first)."""
        async with self.lock:
            raw = await self.store.read(bury=True)
            self.data = normalize_state(raw, max_abstracts=self.max_abstracts)
            return self.data

    async def _change(
        self, change: Callable[[StateData], T], *, since: float | None, bury: bool
    ) -> T:
        async with self.lock:
            out: list[StateData] = []

            def apply(document: dict[str, Any]) -> T:
                state = normalize_state(document, max_abstracts=self.max_abstracts)
                result = change(state)
                document.clear()
                document.update(state)  # the normalised, changed state is what is written
                out.append(state)
                return result

            result = await self.store.edit(apply, since=since, bury=bury)
            self.data = out[0]
            return result

    async def mutate(self, change: Callable[[StateData], T], *, since: float | None = None) -> T:
        """Apply ``change`` to the state as stored now and write what it changed.

        ``change`` must not await (it runs under the lock). ``since`` is when the
        work behind the change began (a cycle's start; now by default): what it
        adds is buried by a forget of its user from then on.
        """
        return await self._change(change, since=since, bury=True)

    async def read(self) -> dict[str, Any]:
        """A copy of the stored document (``storage.users.loop_state_row.LoopStateAccess``)."""
        async with self.lock:
            return copy.deepcopy(await self.store.read())

    async def edit(self, change: Callable[[dict[str, Any]], T]) -> T:
        """:meth:`mutate` on the document as a plain dict (``LoopStateAccess``: a user's
        export and forget see every stored item, none buried before it counts them)."""
        return await self._change(
            lambda data: change(cast(dict[str, Any], data)), since=None, bury=False
        )


class PendingMessages:
    """Messages for the target user's next private turn, delivered exactly once.

    A chat turn *claims* the messages it shows to the model (pre-completion)
    and *confirms* them when it completed (completion hook); only then are
    they removed from the stored state. A turn that failed never confirms:
    its claim is released at the next claim, so the messages are shown again
    in a later turn instead of being lost. Two concurrent turns never both
    claim the same message.
    """

    def __init__(self, state: LoopState, target_user_id: str, calendar: OwnerCalendar) -> None:
        self._state = state
        self.target_user_id = target_user_id
        self.calendar = calendar
        """The owner's calendar: a message's ``time`` (aware, in the owner's zone)."""
        self._claims: dict[str, tuple[Any, list[str]]] = {}

    @property
    def items(self) -> list[PendingMessage]:
        return self._state.data["pending_messages"]

    async def add(
        self, intent: str, *, text: str | None = None, since: float | None = None
    ) -> PendingMessage | None:
        """Queue a message; ``None`` when the queue is full or holds the same intent.

        ``since``: when the cycle that wants it said began (a forget of the user
        from then on buries it, in every process)."""

        def change(state: StateData) -> PendingMessage | None:
            items = state["pending_messages"]
            if len(items) >= PENDING_MAX or any(p["intent"] == intent for p in items):
                return None
            message: PendingMessage = {
                "id": uuid.uuid4().hex,
                "time": self.calendar.now().isoformat(timespec="seconds"),
                "intent": intent,
            }
            if text:
                message["text"] = text
            items.append(message)
            return message

        message = await self._state.mutate(change, since=since)
        if message is not None:
            logger.info(f"[Subconscious] Queued a message for user={self.target_user_id}")
        return message

    def _release_stale(self) -> None:
        for key, (chat, _) in list(self._claims.items()):
            if chat.is_done():
                del self._claims[key]

    async def claim(self, chat: Any) -> list[PendingMessage]:
        """The messages ``chat`` (an Amrita ChatObject) should deliver, as stored now:
        another process may have delivered them, or a forget removed them."""
        await self._state.load()
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
