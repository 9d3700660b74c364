"""``[budget]``: the daily cap on the tokens of the plugin's background requests.

Before a background request (an extraction, a persona extraction, an L3
cycle) its feature asks :meth:`BackgroundBudget.admit` with the user it is
for; after it, it reports what the request cost (:meth:`BackgroundBudget.spent`,
into the shared ledger). A request is admitted while today's tokens of the
whole bot are below ``background_tokens_per_day`` and the user's below
``background_tokens_per_user_per_day`` (0 = no cap); a request in flight may
end above a cap (it counts all the same, and nothing more starts).

The check reads the ledger, which every process on the store writes, so the
caps hold for all of them together; it is made only by background work,
never by a chat turn. Once a cap is found reached, this process remembers it
until the owner's day ends (``[memory] timezone``), so the requests that keep arriving for it cost no
database read. Reaching a cap is logged once per day and process.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from nonebot.log import logger

from ...core.config import BudgetConfig
from ...core.text import short_error
from ..scope import UserView
from .ledger import UsageLedger
from .spend import Spend

__all__ = ["Admission", "BackgroundBudget"]

MAX_REMEMBERED_USERS = 100_000


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer to a background request: go, or wait until ``until``."""

    allowed: bool
    cap: Literal["", "bot", "user"] = ""
    """Which cap holds it back."""
    until: datetime | None = None
    """The owner's midnight when the cap is lifted (aware, in the owner's zone)."""

    def wait_seconds(self, now: datetime) -> float:
        """Seconds from ``now`` until the request may go (0 when admitted)."""
        if self.until is None:
            return 0.0
        return max(0.0, (self.until - now).total_seconds())


ADMITTED = Admission(True)


class BackgroundBudget:
    """The caps of one process, on the shared :class:`~.ledger.UsageLedger`."""

    def __init__(self, config: BudgetConfig, ledger: UsageLedger) -> None:
        self.config = config
        self.ledger = ledger
        self.held: dict[str, int] = {}
        """Requests held back since start, per feature (status, tests)."""
        self._bot_day = ""
        self._users: dict[str, str] = {}
        """User → the day their cap was found reached (only today's are kept)."""

    def configure(self, config: BudgetConfig) -> None:
        """Use other caps from now on (what was found reached is asked again)."""
        self.config = config
        self._bot_day = ""
        self._users.clear()

    @property
    def capped(self) -> bool:
        c = self.config
        return bool(c.background_tokens_per_day or c.background_tokens_per_user_per_day)

    def reached(self, user_id: str | None = None) -> bool:
        """Whether this process found today's cap reached (the bot's, or ``user_id``'s)."""
        today = self.ledger.today()
        if self._bot_day == today:
            return True
        return user_id is not None and self._users.get(user_id) == today

    async def admit(self, feature: str, view: UserView) -> Admission:
        """May a background request of ``feature`` for the user of ``view`` be sent now?"""
        user_id = UserView.check(view).user_id
        if not self.capped:
            return ADMITTED
        now = self.ledger.now()
        day = self.ledger.day_of(now)
        if self._bot_day == day:
            return self._hold(feature, "bot", now)
        if self._users.get(user_id) == day:
            return self._hold(feature, "user", now)
        try:
            bot, mine = await self.ledger.spent_on(day, view)
        except Exception as exc:  # the database: judge by what this process spent
            logger.warning(f"[Memory] 读取后台用量失败，按本进程的记录判断预算：{short_error(exc)}")
            bot, mine = self.ledger.pending_spent(day, view)
        c = self.config
        if c.background_tokens_per_day and bot >= c.background_tokens_per_day:
            self._bot_day = day
            logger.warning(
                f"[Memory] 今天（{day}）插件的后台请求已用 {bot} token，达到全局上限 "
                f"[budget] background_tokens_per_day = {c.background_tokens_per_day}："
                "主动记忆提取、画像提取与 L3 循环等到明天（本地时间 0 点）再继续，聊天不受影响"
            )
            return self._hold(feature, "bot", now)
        if c.background_tokens_per_user_per_day and mine >= c.background_tokens_per_user_per_day:
            self._remember(user_id, day)
            logger.warning(
                f"[Memory] 用户 {user_id} 今天（{day}）的后台请求已用 {mine} token，达到每人上限 "
                f"[budget] background_tokens_per_user_per_day = "
                f"{c.background_tokens_per_user_per_day}：该用户的主动记忆提取、画像提取与 "
                "L3 循环等到明天（本地时间 0 点）再继续，聊天不受影响"
            )
            return self._hold(feature, "user", now)
        return ADMITTED

    def _hold(self, feature: str, cap: Literal["bot", "user"], now: datetime) -> Admission:
        self.held[feature] = self.held.get(feature, 0) + 1
        return Admission(False, cap, self.ledger.next_day(now))

    def _remember(self, user_id: str, day: str) -> None:
        if len(self._users) >= MAX_REMEMBERED_USERS:
            self._users = {u: d for u, d in self._users.items() if d == day}
            if len(self._users) >= MAX_REMEMBERED_USERS:
                self._users.clear()  # a bound; the ledger still knows
        self._users[user_id] = day

    async def spent(self, feature: str, user_id: str, spend: Spend) -> None:
        """A background request of ``feature`` for ``user_id`` cost ``spend``."""
        await self.ledger.add(feature, user_id, spend)

    async def status_json(self) -> dict[str, Any]:
        """The caps, today's use and who is held back (``usage.budget`` of the status)."""
        c = self.config
        now = self.ledger.now()
        day = self.ledger.day_of(now)
        used = await self.ledger.spent_by_all(day)
        per_user = c.background_tokens_per_user_per_day
        over = await self.ledger.users_over(day, per_user) if per_user else []
        bot_reached = bool(c.background_tokens_per_day) and used >= c.background_tokens_per_day
        return {
            "background_tokens_per_day": c.background_tokens_per_day,
            "background_tokens_per_user_per_day": per_user,
            "used_today": used,
            "reached": bot_reached,
            "users_reached": [{"user_id": u, "tokens": n} for u, n in over],
            "held_requests": dict(self.held),
            "resets_at": self.ledger.next_day(now).isoformat(timespec="seconds"),
        }
