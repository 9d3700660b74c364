"""Active memory of one process: what the hooks and commands call.

* :meth:`ActiveMemory.answered` — after a turn the bot answered: queue the
  user's message for extraction (never waits; the reply is already out).
* :meth:`ActiveMemory.recall_block` — the ``<MEMORIES>`` block of a turn.
* :meth:`ActiveMemory.set_consent` — ``/memory auto on|off``.

Everything reads the live configuration (:meth:`configure`), so switching
``[active_memory]`` on or off needs no new hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nonebot import logger

from ..core.config import ActiveMemoryConfig, ConfigFile
from ..core.records import ORIGIN_PRIVATE, GroupPrivacy, origin_of_group
from ..groups.amrita_llm import Completion, add_usage, complete_isolated
from ..services import MemoryRuntime
from ..storage.consent_store import ConsentStore
from ..storage.keys import ChatTarget
from ..storage.memory_store import MemoryStore
from .batches import Batch, BatchKey, BatchQueue, Turn
from .extraction import ExtractionOutcome, MemoryExtractor, describe
from .recall import MemoryRecall

__all__ = ["ActiveMemory", "ActiveStats"]

RESULTS_KEPT = 50


@dataclass(slots=True)
class ActiveStats:
    """Counters since start (cost figures in the README come from the benchmark)."""

    messages: int = 0
    requests: int = 0
    request_chars: int = 0
    failures: int = 0
    results: list[ExtractionOutcome] = field(default_factory=list)


class ActiveMemory:
    """Learning (batched extraction) and recall, wired to one configuration."""

    def __init__(
        self,
        config: ConfigFile,
        store: MemoryStore,
        consent: ConsentStore,
        *,
        complete: Completion = complete_isolated,
    ) -> None:
        self.store = store
        self.consent = consent
        self.complete = complete
        self.stats = ActiveStats()
        self.config = config
        self.extractor = self._extractor(config)
        self.recaller = self._recaller(config)
        am = config.active_memory
        self.queue = BatchQueue(
            self._extract, batch_messages=am.batch_messages, idle_seconds=am.idle_seconds
        )

    @classmethod
    def build(cls, runtime: MemoryRuntime) -> ActiveMemory:
        return cls(runtime.config.file, runtime.store, ConsentStore())

    def _extractor(self, config: ConfigFile) -> MemoryExtractor:
        am = config.active_memory
        return MemoryExtractor(
            self.store,
            memory_limit=config.per_session_memory_limit,
            related_memories=am.related_memories,
            max_ops=am.max_ops,
            privacy=GroupPrivacy.from_config(config),
        )

    def _recaller(self, config: ConfigFile) -> MemoryRecall:
        am = config.active_memory
        return MemoryRecall(
            self.store,
            top_k=am.recall_top_k,
            max_chars=am.recall_max_chars,
            min_similarity=am.recall_min_similarity,
            min_similarity_non_cjk=am.recall_min_similarity_non_cjk,
            privacy=GroupPrivacy.from_config(config),
        )

    def configure(self, config: ConfigFile) -> None:
        """Use another configuration from now on (queued turns stay)."""
        self.config = config
        self.extractor = self._extractor(config)
        self.recaller = self._recaller(config)
        am = config.active_memory
        self.queue.configure(batch_messages=am.batch_messages, idle_seconds=am.idle_seconds)

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

    async def answered(self, target: ChatTarget, message: str, reply: str) -> bool:
        """A turn was answered: queue ``message`` for extraction; whether it was queued."""
        if not self.learns_in(target) or not message.strip():
            return False
        if not await self.consent.allows(target.user_id):
            return False
        origin = origin_of_group(target.group_id) if target.group_id else ORIGIN_PRIVATE
        self.stats.messages += 1
        self.queue.add(BatchKey(target.user_id, target.user, origin), Turn(message, reply))
        return True

    async def _extract(self, batch: Batch) -> bool:
        outcome = ExtractionOutcome(batch.key, turns=len(batch.turns))
        try:
            if not await self.consent.allows(batch.key.user_id):
                return True  # opted out meanwhile: learn nothing
            messages, related = await self.extractor.prepare(batch.key, batch.turns)
            outcome.request_chars = sum(len(m["content"]) for m in messages)
            self.stats.requests += 1
            self.stats.request_chars += outcome.request_chars
            try:
                answer, usage = await self.complete(messages)
            except Exception as exc:
                outcome.error = exc.__class__.__name__
                logger.warning(f"[Memory] 主动记忆提取请求失败：{exc.__class__.__name__}: {exc}")
                return False
            await add_usage(usage, what="主动记忆提取")
            parsed = await self.extractor.apply(batch.key, answer, related, outcome)
            for reason in outcome.ignored:
                logger.debug(f"[Memory] 主动记忆提取忽略：{reason}")
            if parsed.malformed:
                outcome.error = "malformed"
                logger.warning("[Memory] 主动记忆提取的回答不是约定的 JSON，本批未写入，稍后重试")
                return False
            if outcome.added or outcome.updated or outcome.archived:
                logger.info(
                    f"[Memory] 主动记忆 partition={batch.key.partition}：{describe(outcome)}"
                )
            return True
        except Exception as exc:
            outcome.error = exc.__class__.__name__
            logger.warning(f"[Memory] 主动记忆提取失败：{exc.__class__.__name__}: {exc}")
            return False
        finally:
            if outcome.error:
                self.stats.failures += 1
            self.stats.results = [*self.stats.results[-(RESULTS_KEPT - 1) :], outcome]

    # -- recall ----------------------------------------------------------------------

    async def recall_block(self, target: ChatTarget, message: str) -> str:
        """The ``<MEMORIES>`` block for this turn ("" when off, opted out or nothing relevant)."""
        am = self.settings
        if not (am.enabled and am.recall) or not message.strip():
            return ""
        if not await self.consent.allows(target.user_id):
            return ""
        return await self.recaller.block(target, message)

    # -- consent ---------------------------------------------------------------------

    async def allows(self, user_id: str) -> bool:
        return await self.consent.allows(user_id)

    async def set_consent(self, user_id: str, allowed: bool) -> bool:
        """``/memory auto on|off``; off also drops the user's unprocessed messages."""
        changed = await self.consent.set_allowed(user_id, allowed)
        if not allowed:
            self.queue.forget(user_id)
        return changed

    # -- lifecycle -------------------------------------------------------------------

    async def flush(self) -> None:
        """Extract every waiting batch now and wait (tests)."""
        await self.queue.flush()

    async def drain(self) -> None:
        await self.queue.drain()

    async def close(self) -> None:
        """Stop extractions (driver shutdown); unprocessed messages are not learned."""
        await self.queue.close()
