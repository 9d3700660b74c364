"""Per-user epochs: work taken for a user before a forget or an opt-out writes nothing.

Background work for a user (an extraction batch, a persona extraction, a loop
cycle) can be in flight for seconds or minutes: a model request is waiting.
When the user confirms a forget or switches active memory off meanwhile, that
work must not write its results afterwards. Each user has an epoch, moved on
by every forget and opt-out (:meth:`UserEpochs.bump`); work takes a
:class:`Ticket` when it takes its input and checks it right before each write
(under the partition's lock): a ticket of an older epoch is void.

Epochs live in this process; other processes learn of a forget from its
tombstone and of an opt-out from its shared record, which the checks read too
(``storage/users/fences``): there a ticket's time is when the user said what the
work reads, so a forget anywhere voids everything said before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Ticket", "UserEpochs"]


@dataclass(frozen=True, slots=True)
class Ticket:
    """Work for ``user_id`` taken at ``epoch``, on input said at wall-clock ``taken_at``
    (seconds; compared with the shared tombstones and opt-outs)."""

    user_id: str
    epoch: int
    taken_at: float


class UserEpochs:
    """The epoch of every user that was ever forgotten or opted out in this process.

    Only those users have an entry (everyone else is at epoch 0), so the map
    grows with forgets and opt-outs, never with the number of users served.
    """

    def __init__(self) -> None:
        self._epochs: dict[str, int] = {}

    def current(self, user_id: str) -> int:
        return self._epochs.get(user_id, 0)

    def bump(self, user_id: str) -> int:
        """Void every ticket of ``user_id`` taken so far; the new epoch."""
        epoch = self._epochs.get(user_id, 0) + 1
        self._epochs[user_id] = epoch
        return epoch

    def ticket(self, user_id: str) -> Ticket:
        return Ticket(user_id, self.current(user_id), time.time())

    def snapshot(self) -> Callable[[str], Ticket]:
        """Tickets of *now* for users chosen later (work that reads its input first and
        learns whom it concerns from it: a forget in between still voids them)."""
        epochs = dict(self._epochs)
        at = time.time()
        return lambda user_id: Ticket(user_id, epochs.get(user_id, 0), at)

    def valid(self, ticket: Ticket) -> bool:
        """Whether nothing voided ``ticket`` in this process since it was taken."""
        return self.current(ticket.user_id) == ticket.epoch
