"""Objects shared by the benchmarks of one vector-database mode."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .data import Dataset, Scale
from .stats import Row, Summary

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

    from amrita_plugin_memory.embedding.client import EmbeddingClient
    from amrita_plugin_memory.services import MemoryRuntime
    from amrita_plugin_memory.storage.scope import Scope

BASE_UID = 100_000  # QQ number of partition 0's user


def uid_of(index: int) -> str:
    return str(BASE_UID + index)


def caller_of(ds: Dataset, partition: str) -> Scope:
    """A tool caller whose personal partition is ``partition``."""
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import Scope

    return Scope.of_loop(target_from_ids(uid_of(ds.keys.index(partition))))


@dataclass
class ModeContext:
    """One vector-database mode (local or remote) with its filled collection."""

    mode: str
    scale: Scale
    rt: MemoryRuntime
    col: Collection  # the raw handle of the same collection our store uses
    ds: Dataset
    rows: list[Row]
    fill_items_per_s: float = 0.0  # raw ChromaDB adds, batch REEMBED_BATCH_SIZE
    fill_rss_mb: float = 0.0
    read_p50: dict[str, Summary] = field(default_factory=dict)  # wrapper query by partition
    facts: dict[str, float] = field(default_factory=dict)  # figures quoted by the analysis

    def row(self, item: str, what: str, **kwargs: Any) -> Row:
        row = Row(item, self.mode, what, **kwargs)
        self.rows.append(row)
        return row

    def fact(self, name: str, value: float) -> None:
        self.facts[f"{self.mode}.{name}"] = value

    def label(self, partition: str) -> str:
        return f"partition {self.ds.size(partition):,}"


def precomputed_embedder(vectors: dict[str, list[float]]) -> EmbeddingClient:
    """An embedder returning precomputed vectors: times a write without the HTTP call.

    Defined lazily: the plugin package can only be imported once NoneBot runs.
    """
    from amrita_plugin_memory.embedding.client import EmbeddingClient

    class PrecomputedEmbedder(EmbeddingClient):
        async def embed(self, texts: Sequence[str], kind: str = "document") -> list[list[float]]:
            return [vectors[t] for t in texts]

    return PrecomputedEmbedder(
        protocol="ollama-embed", base_url="http://127.0.0.1:9", model="precomputed"
    )


def timed_sync(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


def ratio_text(ours: float, base: float, *, base_name: str = "raw") -> str:
    return f"{ours / base:.2f}× ({base_name} p50 {base * 1000:.2f} ms)"
