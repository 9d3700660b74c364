"""Where the store's vectors come from, and what it does when they cannot come.

What a user said is never lost to a side service (issue #47): when the embedding
service fails, or no embedding model is used at all (``EMBEDDING_ENABLED=false``), a
memory is stored at once with a placeholder vector and the flag
:data:`~...core.records.PENDING_KEY`. The keyword channel finds it right away; the
nearest-neighbour reads leave it out (a placeholder is not a position in any vector
space); ``embedding/pending`` gives it its vector when the service answers again.

:class:`Vectors` owns the embedder as the store uses it: a circuit breaker so that an
outage costs one timeout, not one per write or per question, and a bound on a
question's embedding (a hung embedder never delays a reply: the read falls back to
keywords).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import numpy as np
from nonebot import logger

from ..core.errors import EmbeddingError, EmbeddingOff
from ..core.protocols import Embedder
from ..infra.breaker import CircuitBreaker

__all__ = ["QUERY_TIMEOUT", "UNKNOWN_DIMENSION", "Vectors", "placeholder_vector"]

QUERY_TIMEOUT = 8.0
"""Seconds a question's embedding may take before the read answers by keywords."""


UNKNOWN_DIMENSION = 8
"""The placeholders' dimension in a new collection before any model answered (no embedding
model, or an outage at the first write): small, yet enough random directions that Chroma's
HNSW graph never holds a crowd of equal points; rebuilt at the model's dimension when
embeddings come (``embedding/pending``, the start-up check)."""


def placeholder_vector(dimension: int) -> list[float]:
    """The stored vector of a pending memory: a random unit vector of the collection's
    dimension (Chroma needs one per row; the flag, not this vector, says it means nothing).

    Random, not one fixed vector: many identical points break the links of Chroma's HNSW
    graph, and a filtered search then misses real neighbours (seen: a repeat not found
    once a few dozen pending memories shared one placeholder)."""
    rng = np.random.default_rng()
    vector = rng.standard_normal(max(1, dimension))
    return (vector / (np.linalg.norm(vector) or 1.0)).tolist()


class Vectors:
    """The embedder as the store uses it: ``None`` instead of a wait or an error.

    ``enabled=False`` is the keyword-only mode: the embedder is never called.
    Otherwise a failure (any :class:`~...core.errors.EmbeddingError`, or a question's
    embedding later than :attr:`query_timeout`) opens the breaker: for a few seconds
    (doubling up to a minute) writes are kept pending and questions answered by
    keywords without calling the service; then one call tries again.
    """

    def __init__(self, embedder: Embedder, *, enabled: bool = True) -> None:
        self.embedder = embedder
        self.enabled = enabled
        self.breaker = CircuitBreaker(threshold=1, cooldown=5.0, max_cooldown=60.0)
        self.query_timeout = QUERY_TIMEOUT
        self.dimension: int | None = None
        """The dimension of the last vectors the service returned (``None``: none yet)."""
        self.on_pending: list[Callable[[], None]] = []
        """Called when a write was kept pending (wakes the background embedding)."""

    def kept_pending(self) -> None:
        """A memory was stored without its vector: tell whoever embeds them later."""
        for listener in self.on_pending:
            listener()

    @property
    def available(self) -> bool:
        """Whether a call would be made now (enabled, breaker closed or due for a trial)."""
        return self.enabled and (not self.breaker.is_open or self.breaker.retry_in() <= 0)

    async def documents(self, texts: Sequence[str]) -> list[list[float]] | None:
        """Vectors of texts to store, or ``None`` (keep them pending)."""
        return await self._call(lambda: self.embedder.embed(list(texts), "document"), limit=None)

    async def query(self, text: str) -> list[float] | None:
        """The vector of a question, or ``None`` (answer by keywords), within
        :attr:`query_timeout`."""
        got = await self._call(
            lambda: self.embedder.embed([text], "query"), limit=self.query_timeout
        )
        return None if got is None else got[0]

    async def _call(
        self, call: Callable[[], Awaitable[list[list[float]]]], *, limit: float | None
    ) -> list[list[float]] | None:
        if not self.enabled or not self.breaker.allow():
            return None
        try:
            async with asyncio.timeout(limit):
                vectors = await call()
        except (EmbeddingError, TimeoutError) as exc:
            if isinstance(exc, EmbeddingOff):
                return None
            self.breaker.failure()
            logger.warning(
                f"[Memory] 嵌入服务暂不可用，改用关键词（写入的记忆稍后补嵌入）：{exc or 'timeout'}"
            )
            return None
        except BaseException:
            self.breaker.failure()  # cancelled: never leave a trial hanging
            raise
        self.breaker.success()
        if vectors:
            self.dimension = len(vectors[0])
        return vectors
