"""Active memory of one process: what the hooks and commands call.

* :meth:`ActiveMemory.answered` — after a turn the bot answered: queue the
  user's message for extraction (never waits; the reply is already out).
* :meth:`ActiveMemory.recall_block` — the ``<MEMORIES>`` block of a turn.
* :meth:`ActiveMemory.set_consent` — ``/memory auto on|off``.

Everything reads the live configuration (:meth:`configure`), so switching
``[active_memory]`` on or off needs no new hooks.

The user stays in control of work in flight: a forget or an opt-out is a
point in time that every process honours for everything said before it. A
batch first drops its turns said at or before the user's last forget or
``/memory auto off`` anywhere (their text reaches no model); its ticket has
the time of its oldest remaining turn (:mod:`..infra.fences`), and every write
of its extraction re-checks it, the tombstones, the shared opt-outs and the
user's consent under the partition's lock right before applying
(:class:`~..storage.users.fences.UserFences`). A forget through another process
also drops the user's waiting turns from this one as soon as its change-feed row
arrives (:meth:`ActiveMemory.share`). A chat model
that keeps failing opens a circuit breaker: batches wait (bounded) instead of
retrying in a storm. Every request is counted in the usage ledger, and once
a ``[budget]`` cap is reached the user's batches wait, untouched and bounded
as always, for the next local day (:class:`~..storage.usage.BackgroundBudget`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from nonebot import logger

from ..core.calendar import OwnerCalendar
from ..core.config import ActiveMemoryConfig, ConfigFile
from ..core.records import ORIGIN_PRIVATE, origin_of_group
from ..groups.amrita_llm import Completion, add_usage, complete_isolated
from ..infra.breaker import CircuitBreaker
from ..infra.fences import UserEpochs
from ..services import MemoryRuntime
from ..storage.consent_store import ConsentStore
from ..storage.keys import ChatTarget, user_of_key
from ..storage.memory_store import MemoryStore
from ..storage.scope import ScopeRules, UserView
from ..storage.shared.coherence import Coherence, forgotten_of
from ..storage.usage import BackgroundBudget, spend_of
from ..storage.users.fences import UserFences
from .batches import Batch, BatchKey, BatchQueue, BatchResult, Turn
from .extraction import ExtractionOutcome, MemoryExtractor, describe
from .recall import MemoryRecall

__all__ = ["NOTICE_TEXT", "ActiveMemory", "ActiveStats", "Notify"]

RESULTS_KEPT = 50

NOTICE_TEXT = (
    "小提示：我会自动记住你聊天中提到的关于你自己的事。"
    "看我记住了什么：/memory user list；不想被自动记住：/memory auto off"
)
"""The one-time private notice after the first automatic memory of a user."""

Notify = Callable[[str, str, str], Awaitable[bool]]
"""``(bot_id, user_id, text) -> sent?``: one private message (set by the hooks)."""


@dataclass(slots=True)
class ActiveStats:
    """Counters since start (cost figures in the docs come from the benchmark)."""

    messages: int = 0
    requests: int = 0
    request_chars: int = 0
    largest_request: int = 0
    failures: int = 0
    deferred: int = 0
    """Batches held back while the chat model was failing (circuit breaker open)."""
    over_budget: int = 0
    """Batches held back until the next day by a ``[budget]`` cap."""
    fenced: int = 0
    """Extractions whose user was forgotten or opted out before they wrote everything."""
    notices: int = 0
    results: list[ExtractionOutcome] = field(default_factory=list)


async def _never_notify(bot_id: str, user_id: str, text: str) -> bool:
    return False


def _nothing() -> None:
    """A failed poll: waiting turns are data, not a cache (the batch screens them)."""


class ActiveMemory:
    """Learning (batched extraction) and recall, wired to one configuration."""

    def __init__(
        self,
        config: ConfigFile,
        store: MemoryStore,
        consent: ConsentStore,
        *,
        calendar: OwnerCalendar,
        complete: Completion = complete_isolated,
        fences: UserFences | None = None,
        budget: BackgroundBudget | None = None,
    ) -> None:
        self.store = store
        self.calendar = calendar
        """The owner's calendar (the runtime's): the days recalled memories are shown with."""
        self.budget = budget
        """The daily caps and the usage ledger (``None``: nothing counted nor capped)."""
        self.consent = consent
        self.complete = complete
        self.fences = fences or UserFences(UserEpochs(), store.forgotten)
        self.notify: Notify = _never_notify
        self.stats = ActiveStats()
        self.model_breaker = CircuitBreaker(threshold=3, cooldown=30.0, max_cooldown=600.0)
        """Open after 3 failed extraction requests in a row: batches wait, 30 s … 10 min."""
        self._notice_tried: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.config = config
        self.rules = ScopeRules.from_config(config)
        """What a turn's :class:`~..storage.scope.Scope` (recall, extraction) is decided with."""
        self.extractor = self._extractor(config)
        self.recaller = self._recaller(config)
        self.queue = BatchQueue(self._extract, epochs=self.fences.epochs, **self._queue_args())

    @classmethod
    def build(cls, runtime: MemoryRuntime) -> ActiveMemory:
        active = cls(
            runtime.config.file,
            runtime.store,
            runtime.consent,
            calendar=runtime.calendar,
            fences=runtime.fences,
            budget=runtime.budget,
        )
        if runtime.store.coherence.active:
            active.share(runtime.store.coherence)
        return active

    def _queue_args(self) -> dict[str, Any]:
        am = self.config.active_memory
        return {
            "batch_messages": am.batch_messages,
            "idle_seconds": am.idle_seconds,
            "max_pending": am.max_pending_turns,
            "max_turns": am.max_turns_per_request,
            "max_running": am.max_concurrent_requests,
        }

    def _extractor(self, config: ConfigFile) -> MemoryExtractor:
        am = config.active_memory
        return MemoryExtractor(
            self.store,
            memory_limit=config.per_session_memory_limit,
            related_memories=am.related_memories,
            max_ops=am.max_ops,
            rules=self.rules,
        )

    def _recaller(self, config: ConfigFile) -> MemoryRecall:
        am = config.active_memory
        previous = getattr(self, "recaller", None)
        recaller = MemoryRecall(
            self.store,
            calendar=self.calendar,
            top_k=am.recall_top_k,
            max_chars=am.recall_max_chars,
            min_similarity=am.recall_min_similarity,
            min_similarity_non_cjk=am.recall_min_similarity_non_cjk,
            cross_script_lift=am.recall_cross_script_lift,
            timeout=am.recall_timeout_seconds,
        )
        if previous is not None:
            recaller.breaker = previous.breaker  # what is known of the embedder stays known
        return recaller

    def configure(self, config: ConfigFile) -> None:
        """Use another configuration from now on (queued turns stay)."""
        self.config = config
        self.rules = ScopeRules.from_config(config)
        self.extractor = self._extractor(config)
        self.recaller = self._recaller(config)
        self.queue.configure(**self._queue_args())

    @property
    def settings(self) -> ActiveMemoryConfig:
        return self.config.active_memory

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def learns_in(self, target: ChatTarget) -> bool:
        am = self.settings
        return am.enabled and (am.in_groups or not target.is_group)

    # -- learning --------------------------------------------------------------------

    async def answered(
        self, target: ChatTarget, message: str, reply: str, *, bot_id: str = ""
    ) -> bool:
        """A turn was answered: queue ``message`` for extraction; whether it was queued.

        ``bot_id`` is the bot that answered (the one notice goes through it)."""
        if not self.learns_in(target) or not message.strip():
            return False
        if not await self.consent.allows(self.rules.of_turn(target).user_view()):
            return False
        origin = origin_of_group(target.group_id) if target.group_id else ORIGIN_PRIVATE
        self.stats.messages += 1
        key = BatchKey(target.user_id, target.user, origin)
        return self.queue.add(key, Turn(message, reply, bot_id=bot_id))

    async def _screen(self, batch: Batch) -> int:
        """How many of the batch's first turns were said at or before the user's last
        forget or opt-out of active memory, in any process (dropped unsent)."""
        user_id = batch.key.user_id
        point = (await self.fences.void_points([user_id], "active")).get(user_id)
        if point is None:
            return 0
        return next((i for i, t in enumerate(batch.turns) if t.at > point), len(batch.turns))

    async def _extract(self, batch: Batch) -> BatchResult:
        outcome = ExtractionOutcome(batch.key, turns=len(batch.turns))
        user_id = batch.key.user_id
        key = batch.key
        speaker = self.rules.of_batch(user_id, key.partition, key.origin).user_view()
        voided = 0
        sent = len(batch.turns)
        try:
            voided = await self._screen(batch)
            turns = batch.turns[voided:]
            if not turns:
                return BatchResult(ok=True, sent=sent, voided=voided)
            if not await self.consent.allows(speaker):
                # opted out meanwhile: learn nothing
                return BatchResult(ok=True, sent=sent, voided=voided)
            ticket = self.fences.ticket(user_id, at=min(t.at for t in turns))
            if batch.ticket is not None:  # the epoch the turns were taken in
                ticket = replace(ticket, epoch=batch.ticket.epoch)
            if not self.model_breaker.allow():
                self.stats.deferred += 1
                return BatchResult(
                    ok=False,
                    sent=0,
                    deferred=True,
                    retry_in=self.model_breaker.retry_in(),
                    voided=voided,
                )
            if self.budget is not None:
                admission = await self.budget.admit("extraction", speaker)
                if not admission.allowed:  # its turns wait (bounded) for the next day
                    self.stats.over_budget += 1
                    wait = admission.wait_seconds(self.budget.ledger.now())
                    return BatchResult(
                        ok=False, sent=0, deferred=True, retry_in=wait, voided=voided
                    )
            messages, related, taken = await self.extractor.prepare(
                batch.key, turns, budget=self.settings.max_request_chars
            )
            sent = voided + taken
            outcome.sent = taken
            outcome.request_chars = sum(len(m["content"]) for m in messages)
            self.stats.requests += 1
            self.stats.request_chars += outcome.request_chars
            self.stats.largest_request = max(self.stats.largest_request, outcome.request_chars)
            try:
                answer, usage = await self.complete(messages)
            except Exception as exc:
                self.model_breaker.failure()
                outcome.error = exc.__class__.__name__
                logger.warning(f"[Memory] 主动记忆提取请求失败：{exc.__class__.__name__}: {exc}")
                return BatchResult(ok=False, sent=sent, voided=voided)
            self.model_breaker.success()
            await add_usage(usage, what="主动记忆提取")
            if self.budget is not None:
                sent_texts = [m["content"] for m in messages]
                spend = spend_of(usage, sent=sent_texts, answer=answer)
                await self.budget.spent("extraction", user_id, spend)
            parsed = await self.extractor.apply(
                batch.key,
                answer,
                related,
                outcome,
                fence=self.fences.fence(
                    ticket, lambda _user: self.consent.allows_now(speaker), "active"
                ),
            )
            for reason in outcome.ignored:
                logger.debug(f"[Memory] 主动记忆提取忽略：{reason}")
            if outcome.fenced:
                self.stats.fenced += 1
                logger.info(
                    f"[Memory] 主动记忆：用户 {user_id} 已遗忘数据或关闭自动记忆，本批不再写入"
                )
                return BatchResult(ok=True, sent=sent, voided=voided)
            if parsed.malformed:
                outcome.error = "malformed"
                logger.warning("[Memory] 主动记忆提取的回答不是约定的 JSON，本批未写入，稍后重试")
                return BatchResult(ok=False, sent=sent, voided=voided)
            if outcome.added or outcome.updated or outcome.archived:
                logger.info(
                    f"[Memory] 主动记忆 partition={batch.key.partition}：{describe(outcome)}"
                )
            if outcome.added or outcome.updated:
                bots = [t.bot_id for t in turns[:taken] if t.bot_id]
                await self._notice(speaker, bots[-1] if bots else "")
            return BatchResult(ok=True, sent=sent, voided=voided)
        except Exception as exc:
            outcome.error = exc.__class__.__name__
            logger.warning(f"[Memory] 主动记忆提取失败：{exc.__class__.__name__}: {exc}")
            return BatchResult(ok=False, sent=sent, voided=voided)
        finally:
            if outcome.error:
                self.stats.failures += 1
            self.stats.results = [*self.stats.results[-(RESULTS_KEPT - 1) :], outcome]

    async def _notice(self, speaker: UserView, bot_id: str) -> None:
        """Tell the user once, in private, that the bot learns on its own (``notice``)."""
        user_id = speaker.user_id
        if not self.settings.notice or user_id in self._notice_tried:
            return
        if len(self._notice_tried) >= 100_000:
            self._notice_tried.clear()  # a bound; the table still says who was told
        self._notice_tried.add(user_id)
        if await self.consent.noticed(speaker):
            return
        if await self.notify(bot_id, user_id, NOTICE_TEXT):
            self.stats.notices += 1
            await self.consent.mark_noticed(user_id)

    # -- recall ----------------------------------------------------------------------

    async def recall_block(self, target: ChatTarget, message: str) -> str:
        """The ``<MEMORIES>`` block for this turn ("" when off, opted out or nothing relevant)."""
        am = self.settings
        if not (am.enabled and am.recall) or not message.strip():
            return ""
        if not await self.consent.allows(self.rules.of_turn(target).user_view()):
            return ""
        return await self.recaller.block(self.rules.of_turn(target), message)

    # -- consent ---------------------------------------------------------------------

    async def allows(self, view: UserView) -> bool:
        return await self.consent.allows(view)

    async def set_consent(self, view: UserView, allowed: bool) -> bool:
        """``/memory auto on|off``; off also drops the user's unprocessed messages and
        voids an extraction in flight (it writes nothing more)."""
        user_id = UserView.check(view).user_id
        if not allowed:
            self.queue.forget(user_id)
            # The point in time every process honours, even after /memory auto on.
            await self.fences.void(user_id, "active")
        changed = await self.consent.set_allowed(view, allowed)
        if not allowed:
            self.queue.forget(user_id)  # a turn queued while the row was written
        return changed

    def share(self, coherence: Coherence) -> None:
        """Follow forgets through other processes (remote mode): the user's waiting turns
        said before it leave this process's memory when its feed row arrives (a batch
        would drop them anyway before building its request)."""
        coherence.follow_with(self._forgotten_elsewhere, _nothing)

    def _forgotten_elsewhere(self, row: str) -> None:
        partition = forgotten_of(row)
        user_id = user_of_key(partition) if partition is not None else None
        if user_id is None:
            return
        task = asyncio.get_running_loop().create_task(self._drop_forgotten(user_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drop_forgotten(self, user_id: str) -> None:
        try:
            point = (await self.fences.void_points([user_id])).get(user_id)
        except Exception as exc:  # the tombstones cannot be read: the batch screens again
            logger.warning(f"[Memory] 读取遗忘记录失败：{exc.__class__.__name__}: {exc}")
            return
        if point is not None:
            self.queue.drop_said_before(user_id, point)

    async def forget(self, user_id: str) -> None:
        """A forget of ``user_id`` (a ``UserData`` forget hook): drop and void their work,
        and forget that they were told (learning starts anew, so does the notice)."""
        self.queue.forget(user_id)
        self._notice_tried.discard(user_id)
        await self.consent.forget_notice(user_id)

    # -- lifecycle -------------------------------------------------------------------

    async def flush(self) -> None:
        """Extract every waiting batch now and wait (tests)."""
        await self.queue.flush()

    async def drain(self) -> None:
        await self.queue.drain()

    async def close(self) -> None:
        """Stop extractions (driver shutdown); unprocessed messages are not learned."""
        for task in list(self._tasks):
            task.cancel()
        await self.queue.close()
