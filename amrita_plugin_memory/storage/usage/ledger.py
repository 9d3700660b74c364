"""The usage ledger: what the plugin's own work cost, per day, feature and user.

A day is the owner's (``[memory] timezone``, :class:`~...core.calendar.OwnerCalendar`),
the same for every process on the store whatever its machine's zone: two bots
in different zones add to the same day's rows, so a ``[budget]`` cap is spent
once, not once per zone.

One row of ``amrita_plugin_memory_usage`` (:class:`~..models.UsageDay`) per
``(day, feature, user)``. Every process on the store adds to the same rows
with one portable statement, ``UPDATE … SET requests = requests + :n …``; a
row that does not exist yet is inserted, and when another process inserted
it first (an integrity error) the update runs again. No process ever reads a
count to write it back, so concurrent processes never lose each other's
increments, on SQLite and PostgreSQL alike.

Two kinds of entries:

* background requests (:data:`FEATURES`: extraction, persona, the L3 loop),
  written at once by :meth:`UsageLedger.add`: their callers are background
  tasks, and the budget of every process reads what they wrote;
* what the plugin's blocks add to chat turns (:data:`BLOCKS`, and the turns
  themselves, :data:`TURNS`): :meth:`UsageLedger.count_block` and
  :meth:`UsageLedger.count_turn` only add to counters in memory, written every
  :data:`FLUSH_SECONDS` by a background task and at shutdown, so a chat turn
  never waits on the database.

Entries that could not be written (the database is down) stay in memory,
merged, and are written with the next flush; at most :data:`MAX_PENDING` keys
wait, the rest are dropped with a warning. Rows older than :data:`KEEP_DAYS`
days are deleted once a day.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from nonebot.log import logger
from sqlalchemy import case, delete, func, select, update
from sqlalchemy.exc import IntegrityError, OperationalError

from ...core.calendar import OwnerCalendar
from ...core.text import short_error
from ..scope import UserView
from ..shared.sessions import SessionFactory, SharedWork, orm_session
from .spend import Spend

__all__ = [
    "BLOCKS",
    "BLOCK_PREFIX",
    "FEATURES",
    "TURNS",
    "UsageLedger",
]

FEATURES = ("extraction", "persona", "subconscious", "episodes")
"""The background features whose requests are counted (and capped by ``[budget]``)."""
BLOCKS = ("tools", "memo", "memories", "group_context", "personas", "self", "episodes")
"""What the plugin adds to chat turns: the chat tools' schemas and the blocks."""
BLOCK_PREFIX = "block:"
TURNS = "chat"
"""The feature of the chat-turn counter (a block's share of turns is measured against it)."""
KEEP_DAYS = 90
FLUSH_SECONDS = 60.0
MAX_PENDING = 10_000
BUSY_RETRIES = 8

Key = tuple[str, str, str]
"""``(day, feature, user_id)``."""


def _busy(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, OperationalError) and ("locked" in text or "busy" in text)


class UsageLedger:
    """The ledger of one process (its unwritten entries, its flush task)."""

    def __init__(
        self,
        calendar: OwnerCalendar,
        *,
        sessions: SessionFactory = orm_session,
        flush_every: float = FLUSH_SECONDS,
        work: SharedWork | None = None,
    ) -> None:
        self.sessions = sessions
        self.calendar = calendar
        """The owner's calendar (the runtime's): which day a row belongs to, and its clock."""
        self.work = work or SharedWork()
        """Every operation on the table is waited for with a bound (``storage/shared/sessions``):
        a database that stops answering delays no admission, switch or shutdown for long."""
        self.flush_every = flush_every
        self.tools_chars: Callable[[], int] = lambda: 0
        """Characters of the chat tools offered with a turn (set where they are registered)."""
        self.dropped = 0
        """Entries dropped because :data:`MAX_PENDING` keys were waiting."""
        self._pending: dict[Key, Spend] = {}
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[bool]] = set()
        self._failing = False
        self._pruned = ""

    def now(self) -> datetime:
        """Now, in the owner's zone."""
        return self.calendar.now()

    def day_of(self, moment: datetime) -> str:
        """The owner's day of ``moment``: the ``day`` of its rows."""
        return self.calendar.show_date(moment)

    def today(self) -> str:
        return self.day_of(self.now())

    def _days_back(self, count: int) -> str:
        """The owner's day ``count`` days before today (calendar days: DST-proof)."""
        return (self.calendar.today() - timedelta(days=count)).isoformat()

    def next_day(self, moment: datetime) -> datetime:
        """The owner's midnight after ``moment`` (when a day's caps are lifted)."""
        return self.calendar.next_midnight(moment)

    # -- entries ---------------------------------------------------------------------

    def count_turn(self) -> None:
        """One chat turn (and the chat tools offered with it); memory only."""
        day = self.today()
        self._merge((day, TURNS, ""), Spend(requests=1))
        tools = self.tools_chars()
        if tools > 0:
            self._merge((day, BLOCK_PREFIX + "tools", ""), Spend(requests=1, chars=tools))
        self._schedule()

    def count_block(self, block: str, chars: int) -> None:
        """``block`` (one of :data:`BLOCKS`) added ``chars`` characters to a chat turn."""
        if chars > 0:
            self._merge((self.today(), BLOCK_PREFIX + block, ""), Spend(requests=1, chars=chars))
            self._schedule()

    async def add(self, feature: str, user_id: str, spend: Spend) -> bool:
        """A background request of ``feature`` for ``user_id``; written now (whether it was:
        if not, it waits in memory for the next flush)."""
        self._merge((self.today(), feature, user_id[:64]), spend)
        return await self.flush()

    def _merge(self, key: Key, spend: Spend) -> None:
        current = self._pending.get(key)
        if current is None and len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                logger.warning(
                    f"[Memory] 用量记录积压超过 {MAX_PENDING} 项（数据库不可写），"
                    f"已丢弃 {self.dropped} 项"
                )
            return
        self._pending[key] = spend if current is None else current + spend

    def pending(self, day: str) -> dict[tuple[str, str], Spend]:
        """This process's unwritten entries of ``day``: ``{(feature, user_id): spend}``."""
        return {(f, u): s for (d, f, u), s in self._pending.items() if d == day}

    # -- writing ---------------------------------------------------------------------

    def _schedule(self) -> None:
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a command): written by close()
            return
        self._timer = loop.call_later(self.flush_every, self._flush_later)

    def _flush_later(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self.flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self) -> bool:
        """Write every waiting entry; whether all were written (the rest wait, merged)."""
        async with self._lock:
            batch, self._pending = self._pending, {}
            error: Exception | None = None
            for key, spend in batch.items():
                if error is None:
                    try:
                        await self._increment(key, spend)
                        continue
                    except Exception as exc:  # the database: the entry waits for the next flush
                        error = exc
                self._merge(key, spend)
            if error is not None:
                if not self._failing:
                    logger.warning(
                        f"[Memory] 写入用量记录失败，稍后重试（{len(self._pending)} 项在内存中等待）："
                        f"{short_error(error)}"
                    )
                self._failing = True
                self._schedule()
                return False
            if self._failing:
                logger.info("[Memory] 用量记录已恢复写入")
                self._failing = False
            await self._prune()
            return True

    async def _increment(self, key: Key, spend: Spend) -> None:
        """Add ``spend`` to the row ``key`` in the database (see the module's docstring),
        waited for with the bound of :attr:`work`."""
        await self.work.run(self._add_to_row(key, spend), "写入用量记录")

    async def _add_to_row(self, key: Key, spend: Spend) -> None:
        from ..models import UsageDay  # lazily: importable without NoneBot

        day, feature, user_id = key
        row = (UsageDay.day == day, UsageDay.feature == feature, UsageDay.user_id == user_id)
        added = {
            "requests": UsageDay.requests + spend.requests,
            "prompt_tokens": UsageDay.prompt_tokens + spend.prompt_tokens,
            "completion_tokens": UsageDay.completion_tokens + spend.completion_tokens,
            "cached_tokens": UsageDay.cached_tokens + spend.cached_tokens,
            "estimated": UsageDay.estimated + spend.estimated,
            "chars": UsageDay.chars + spend.chars,
        }
        pause = 0.02
        for attempt in range(BUSY_RETRIES):
            try:
                async with self.sessions() as session:
                    res = await session.execute(
                        update(UsageDay)
                        .where(*row)
                        .values(**added)
                        .execution_options(synchronize_session=False)
                    )
                    if getattr(res, "rowcount", 0) == 1:
                        await session.commit()
                        return
                try:
                    async with self.sessions() as session:
                        session.add(
                            UsageDay(day=day, feature=feature, user_id=user_id, **_row(spend))
                        )
                        await session.commit()
                        return
                except IntegrityError:
                    continue  # another process inserted the row first: add to it
            except OperationalError as exc:
                if not _busy(exc) or attempt == BUSY_RETRIES - 1:
                    raise
            await asyncio.sleep(pause)  # SQLite's lock between processes: a moment
            pause = min(pause * 2, 0.5)
        raise RuntimeError(f"用量记录 {key} 多次写入冲突")

    async def _prune(self) -> None:
        """Delete rows older than :data:`KEEP_DAYS` (once a day per process)."""
        from ..models import UsageDay

        today = self.today()
        if self._pruned == today:
            return
        self._pruned = today
        oldest = self._days_back(KEEP_DAYS)
        stmt = delete(UsageDay).where(UsageDay.day < oldest)
        try:
            await self.work.run(self._execute(stmt), "清理旧的用量记录")
        except Exception as exc:  # tried again tomorrow
            logger.warning(f"[Memory] 清理旧的用量记录失败：{short_error(exc)}")

    # -- reading ---------------------------------------------------------------------

    async def spent_on(self, day: str, view: UserView) -> tuple[int, int]:
        """Tokens of the background features on ``day``: the whole bot's and the user's of
        ``view`` (every process's written rows, and this process's unwritten entries)."""
        return await self._spent(day, UserView.check(view).user_id)

    async def spent_by_all(self, day: str) -> int:
        """Tokens of the background features on ``day``, every user's (an operator's status)."""
        total, _ = await self._spent(day, None)
        return total

    async def _spent(self, day: str, user_id: str | None) -> tuple[int, int]:
        from ..models import UsageDay

        tokens = UsageDay.prompt_tokens + UsageDay.completion_tokens
        mine = case((UsageDay.user_id == (user_id or ""), tokens), else_=0)
        stmt = select(func.coalesce(func.sum(tokens), 0), func.coalesce(func.sum(mine), 0)).where(
            UsageDay.day == day, UsageDay.feature.in_(FEATURES)
        )
        ((total, own),) = await self.work.run(self._rows(stmt), "读取用量记录")
        waiting = [(u, s) for (f, u), s in self.pending(day).items() if f in FEATURES]
        total = int(total) + sum(s.tokens for _, s in waiting)
        own = int(own) + sum(s.tokens for u, s in waiting if user_id is not None and u == user_id)
        return total, (own if user_id is not None else 0)

    def pending_spent(self, day: str, view: UserView) -> tuple[int, int]:
        """:meth:`spent_on` from this process's unwritten entries only (the database is down)."""
        user_id = UserView.check(view).user_id
        waiting = [(u, s) for (f, u), s in self.pending(day).items() if f in FEATURES]
        return sum(s.tokens for _, s in waiting), sum(s.tokens for u, s in waiting if u == user_id)

    async def users_over(self, day: str, cap: int, *, limit: int = 20) -> list[tuple[str, int]]:
        """Users whose background tokens on ``day`` reached ``cap`` (most first, at most ``limit``)."""
        from ..models import UsageDay

        tokens = func.sum(UsageDay.prompt_tokens + UsageDay.completion_tokens)
        stmt = (
            select(UsageDay.user_id, tokens)
            .where(UsageDay.day == day, UsageDay.feature.in_(FEATURES))
            .group_by(UsageDay.user_id)
            .having(tokens >= cap)
            .order_by(tokens.desc(), UsageDay.user_id)
            .limit(limit)
        )
        rows = await self.work.run(self._rows(stmt), "读取用量记录")
        return [(str(user), int(n)) for user, n in rows]

    async def totals_by_day(self, count: int) -> dict[str, dict[str, Spend]]:
        """``{day: {feature: spend}}`` of the last ``count`` days (every user summed: an
        operator door), including this process's unwritten entries."""
        from ..models import UsageDay

        first = self._days_back(count - 1)
        u = UsageDay
        stmt = (
            select(
                u.day,
                u.feature,
                func.sum(u.requests),
                func.sum(u.prompt_tokens),
                func.sum(u.completion_tokens),
                func.sum(u.cached_tokens),
                func.sum(u.estimated),
                func.sum(u.chars),
            )
            .where(u.day >= first)
            .group_by(u.day, u.feature)
        )
        rows = await self.work.run(self._rows(stmt), "读取用量记录")
        out: dict[str, dict[str, Spend]] = {}
        for day, feature, *counts in rows:
            out.setdefault(str(day), {})[str(feature)] = Spend(*(int(c or 0) for c in counts))
        for (day, feature, _user), spend in self._pending.items():
            if day >= first:
                by_feature = out.setdefault(day, {})
                by_feature[feature] = by_feature.get(feature, Spend()) + spend
        return out

    # -- one user's rows (a user's export and forget) ------------------------------------

    async def of_user(self, view: UserView) -> list[dict[str, Any]]:
        """Every entry kept under the user of ``view`` (their QQ number): the written rows
        and this process's unwritten ones, oldest day first."""
        from ..models import UsageDay

        key = UserView.check(view).user_id[:64]
        u = UsageDay
        stmt = (
            select(u.day, u.feature, u.requests, u.prompt_tokens, u.completion_tokens,
                   u.cached_tokens, u.estimated, u.chars)
            .where(u.user_id == key)
            .order_by(u.day, u.feature)
        )  # fmt: skip
        out: dict[tuple[str, str], Spend] = {
            (str(day), str(feature)): Spend(*(int(c or 0) for c in counts))
            for day, feature, *counts in await self.work.run(self._rows(stmt), "读取用量记录")
        }
        for (day, feature, user), spend in self._pending.items():
            if user == key:
                out[(day, feature)] = out.get((day, feature), Spend()) + spend
        return [
            {"day": day, "feature": feature, **_row(spend)}
            for (day, feature), spend in sorted(out.items())
        ]

    async def forget_user(self, user_id: str) -> int:
        """Delete every entry kept under ``user_id`` (written or waiting); how many rows."""
        from ..models import UsageDay

        key = user_id[:64]
        async with self._lock:  # no flush of theirs runs meanwhile
            waiting = [k for k in self._pending if k[2] == key]
            for k in waiting:
                del self._pending[k]
            stmt = delete(UsageDay).where(UsageDay.user_id == key)
            deleted = await self.work.run(self._execute(stmt), "删除用量记录")
        return deleted + len(waiting)

    async def _rows(self, stmt: Any) -> list[Any]:
        async with self.sessions() as session:
            return list((await session.execute(stmt)).all())

    async def _execute(self, stmt: Any) -> int:
        """A write statement, committed; the rows it changed."""
        async with self.sessions() as session:
            result = await session.execute(stmt.execution_options(synchronize_session=False))
            await session.commit()
        return int(getattr(result, "rowcount", 0) or 0)

    # -- lifecycle -------------------------------------------------------------------

    async def close(self) -> None:
        """Write what waits (shutdown, the end of a command); the timer stops."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._pending:
            await self.flush()
        if self._timer is not None:  # a failed flush re-armed it: nothing runs after close
            self._timer.cancel()
            self._timer = None


def _row(spend: Spend) -> dict[str, int]:
    return {
        "requests": spend.requests,
        "prompt_tokens": spend.prompt_tokens,
        "completion_tokens": spend.completion_tokens,
        "cached_tokens": spend.cached_tokens,
        "estimated": spend.estimated,
        "chars": spend.chars,
    }
